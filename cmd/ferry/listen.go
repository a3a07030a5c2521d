package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Limits of ferry listen.
const (
	// defaultListenAddr is where ferry listen receives: this machine only.
	defaultListenAddr = "127.0.0.1:8787"
	// maxListenBodyBytes bounds a delivery's body; Ferry's messages are a few hundred bytes.
	maxListenBodyBytes = 1 << 20
	// maxListenSecrets is how many secrets a receiver may hold: the current one and, during a
	// rotation, the one before it.
	maxListenSecrets = 2
	// listenHeaderTimeout bounds reading a request's headers.
	listenHeaderTimeout = 10 * time.Second
	// listenShutdownTimeout bounds the wait for requests in flight when ferry listen stops.
	listenShutdownTimeout = 5 * time.Second
)

// runListen is ferry listen: a webhook receiver for Ferry's notifications, for a developer's
// machine and for scripts. It verifies every delivery with the Standard Webhooks library, as a
// platform's receiver would, answers 204 to a verified one and 401 to one whose signature does
// not verify, and prints one line per verified delivery; it counts distinct webhook-ids, so a
// retry of a delivery shows as a repeat, and -count N exits once N distinct ones arrived.
func runListen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("listen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", defaultListenAddr, "address to listen on (127.0.0.1 keeps the receiver on this machine)")
	var secrets []string
	fs.Func("secret", "the endpoint's signing secret (whsec_…); give it twice during a rotation", func(s string) error {
		secrets = append(secrets, s)
		return nil
	})
	count := fs.Int("count", 0, "exit after this many distinct verified deliveries (0: run until interrupted)")
	asJSON := fs.Bool("json", false, "print each verified delivery's body as one JSON line")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("listen: unexpected arguments %q", fs.Args())
	}
	if *count < 0 {
		return fmt.Errorf("listen: -count %d: want 0 or more", *count)
	}
	rcv, err := newWebhookReceiver(secrets, *asJSON, *count, stdout, stderr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	if host, _, _ := net.SplitHostPort(*addr); !loopbackHost(host) {
		fmt.Fprintf(stderr, "warning: %s is reachable from other machines; deliveries are still verified\n", *addr)
	}
	fmt.Fprintf(stderr, "listening on http://%s (POST any path); stop with Ctrl-C\n", ln.Addr())
	return rcv.serve(ctx, ln)
}

// loopbackHost reports whether host names this machine only.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// webhookReceiver verifies and prints deliveries.
type webhookReceiver struct {
	hooks  []*standardwebhooks.Webhook
	asJSON bool
	// want is the number of distinct deliveries after which serve returns (0: never).
	want        int
	out, errOut io.Writer
	done        chan struct{}
	doneOnce    sync.Once

	mu sync.Mutex
	// seen holds the webhook-ids verified so far; requests counts verified requests, refusals
	// the others.
	seen     map[string]bool
	requests int
	refusals int
}

// newWebhookReceiver checks the secrets (one or two, each "whsec_" and base64) and returns a
// receiver that prints to out, and says what it refuses on errOut.
func newWebhookReceiver(secrets []string, asJSON bool, want int, out, errOut io.Writer) (*webhookReceiver, error) {
	if len(secrets) == 0 || len(secrets) > maxListenSecrets {
		return nil, fmt.Errorf("listen: give -secret once (twice during a rotation); got %d", len(secrets))
	}
	r := &webhookReceiver{asJSON: asJSON, want: want, out: out, errOut: errOut, seen: map[string]bool{}, done: make(chan struct{})}
	for i, s := range secrets {
		if !strings.HasPrefix(s, "whsec_") {
			return nil, fmt.Errorf("listen: secret %d does not start with whsec_", i+1)
		}
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			return nil, fmt.Errorf("listen: secret %d: %w", i+1, err)
		}
		r.hooks = append(r.hooks, wh)
	}
	return r, nil
}

// serve receives on ln until ctx ends or the wanted number of distinct deliveries arrived.
func (r *webhookReceiver) serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: r, ReadHeaderTimeout: listenHeaderTimeout}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("listen: %w", err)
	case <-ctx.Done():
	case <-r.done:
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), listenShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutdown)
	r.mu.Lock()
	fmt.Fprintf(r.errOut, "%d distinct deliveries in %d verified requests; %d refused\n", len(r.seen), r.requests, r.refusals)
	r.mu.Unlock()
	return err
}

// message is what ferry listen reads of a notification's body.
type message struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

func (r *webhookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST a delivery", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxListenBodyBytes+1))
	if err != nil {
		http.Error(w, "could not read the body", http.StatusBadRequest)
		return
	}
	if len(body) > maxListenBodyBytes {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	id := req.Header.Get(standardwebhooks.HeaderWebhookID)
	if err := r.verify(body, req.Header); err != nil {
		r.refused(id, err)
		http.Error(w, "signature does not verify", http.StatusUnauthorized)
		return
	}
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		r.refused(id, fmt.Errorf("body is not a JSON message: %w", err))
		http.Error(w, "body is not a JSON message", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	repeat := r.seen[id]
	r.seen[id] = true
	r.requests++
	distinct := len(r.seen)
	r.print(id, m, body, repeat)
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	if r.want > 0 && distinct >= r.want {
		r.doneOnce.Do(func() { close(r.done) })
	}
}

// verify accepts a delivery that verifies under any of the secrets, timestamp included.
func (r *webhookReceiver) verify(body []byte, header http.Header) error {
	var errs []error
	for _, wh := range r.hooks {
		err := wh.Verify(body, header)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// print writes one verified delivery: its body as one JSON line with -json, otherwise its
// webhook-id, type, account and data. Called under r.mu.
func (r *webhookReceiver) print(id string, m message, body []byte, repeat bool) {
	if r.asJSON {
		var line bytes.Buffer
		if json.Compact(&line, body) != nil {
			line.Write(body)
		}
		fmt.Fprintln(r.out, line.String())
		return
	}
	var data struct {
		Account string `json:"account"`
	}
	_ = json.Unmarshal(m.Data, &data)
	var compact bytes.Buffer
	if json.Compact(&compact, m.Data) != nil {
		compact.Write(m.Data)
	}
	suffix := ""
	if repeat {
		suffix = " (repeat)"
	}
	fmt.Fprintf(r.out, "%s %s account=%s data=%s%s\n", id, m.Type, data.Account, compact.String(), suffix)
}

func (r *webhookReceiver) refused(id string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refusals++
	fmt.Fprintf(r.errOut, "refused %q: %v\n", id, err)
}
