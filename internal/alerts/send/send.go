package send

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Limits of one delivery, with their units.
const (
	// DefaultTimeout bounds one delivery from the first DNS query to the last byte of the
	// answer that is kept, when Config.Timeout is zero. Standard Webhooks receivers are expected
	// to answer quickly and do their work later.
	DefaultTimeout = 10 * time.Second
	// MaxAnswerBytes is how much of an answer's body is kept for the delivery log. The rest is
	// never read: the body is closed, so a huge or endless answer costs nothing.
	MaxAnswerBytes = 4 << 10
	// MaxAnswerHeaderBytes bounds an answer's headers (Go's default is 1 MiB).
	MaxAnswerHeaderBytes = 64 << 10
	// MaxSecrets is how many secrets an endpoint may have at once: the current one and, during a
	// rotation, the one before it.
	MaxSecrets = 2
	// MaxIDBytes bounds a message id, which travels in a header.
	MaxIDBytes = 256
)

// UserAgent names Ferry's deliveries to receivers; the number is the delivery format's version.
const UserAgent = "Ferry-Webhooks/1"

// secretPrefix starts every Standard Webhooks secret; the rest is the key in base64.
const secretPrefix = "whsec_"

// Errors for failures that happen before anything is sent. None is retryable (see the package
// comment); ErrInvalidURL and ErrForbiddenAddress are declared beside the checks that return
// them.
var (
	// ErrInvalidSecret says an endpoint's secrets cannot sign: none, too many, or one that is not
	// "whsec_" and base64.
	ErrInvalidSecret = errors.New("invalid endpoint secret")
	// ErrInvalidMessage says a message cannot be sent as it is: no id, no timestamp, a body that
	// is not JSON.
	ErrInvalidMessage = errors.New("invalid message")
)

// ErrStatus says the endpoint answered, with a status other than 2xx (a redirect included). It is
// retryable.
var ErrStatus = errors.New("endpoint did not accept the message")

// Endpoint is where one message goes.
type Endpoint struct {
	// URL is the endpoint as the platform registered it; see CheckURL.
	URL string
	// Secrets sign the message, newest first: one during normal operation, two during a rotation.
	// Each is "whsec_" followed by the key in base64.
	Secrets []string
}

// Message is one notification, as the caller stored it. Send takes every field as given and
// adds nothing of its own.
type Message struct {
	// ID is the webhook-id: unique per notification, the same on every attempt (receivers
	// recognise a retry by it), printable ASCII without spaces.
	ID string
	// Timestamp is the webhook-timestamp, sent in unix seconds. Receivers refuse a timestamp far
	// from their clock (five minutes in the reference library), so a caller that retries long
	// after the first attempt has to store a newer timestamp with the notification first.
	Timestamp time.Time
	// Body is the JSON document sent.
	Body []byte
}

// Outcome is what happened to one delivery.
type Outcome struct {
	// Status is the answer's HTTP status, or 0 if there was no answer.
	Status int
	// Answer is the start of the answer's body, at most MaxAnswerBytes; AnswerCut says there
	// was more.
	Answer    []byte
	AnswerCut bool
	// Delivered says the endpoint accepted the message (a 2xx status).
	Delivered bool
	// Retryable says a later attempt with the same message can succeed.
	Retryable bool
	// Err is nil when Delivered, and says what went wrong otherwise. It names the endpoint by its
	// host only: a URL's path or query may hold a token.
	Err error
}

// Config configures a Sender.
type Config struct {
	// Policy says which addresses deliveries may reach; the zero value is production's.
	Policy Policy
	// Timeout bounds each delivery; zero means DefaultTimeout.
	Timeout time.Duration

	// rootCAs replaces the system's certificate authorities, so tests can trust their own
	// servers.
	rootCAs *x509.CertPool
}

// Sender delivers messages. It keeps connections open between deliveries and is safe for
// concurrent use; build one per process.
type Sender struct {
	policy  Policy
	timeout time.Duration
	client  *http.Client
}

// New returns a Sender for cfg.
func New(cfg Config) *Sender {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	dialer := &net.Dialer{Control: cfg.Policy.control}
	transport := &http.Transport{
		// Never a proxy from the environment: it would connect on Ferry's behalf, out of the
		// dialer's sight.
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: cfg.rootCAs},
		ForceAttemptHTTP2:      true,
		MaxResponseHeaderBytes: MaxAnswerHeaderBytes,
		// The answer is kept as it came; nothing is gained by inflating it.
		DisableCompression: true,
		IdleConnTimeout:    90 * time.Second,
	}
	return &Sender{
		policy:  cfg.Policy,
		timeout: timeout,
		client: &http.Client{
			Transport: transport,
			// A redirect is a URL no check has seen; its answer ends the delivery.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// Send makes one attempt to deliver msg to ep and says what happened. It never retries; the
// Outcome says whether the caller should.
func (s *Sender) Send(ctx context.Context, ep Endpoint, msg Message) Outcome {
	out := s.send(ctx, ep, msg)
	out.Delivered = out.Err == nil
	out.Retryable = retryable(out.Status, out.Err)
	return out
}

func (s *Sender) send(ctx context.Context, ep Endpoint, msg Message) Outcome {
	if problems := CheckURL(ep.URL, s.policy); problems != nil {
		return Outcome{Err: fmt.Errorf("send %s: %w: %s", msg.ID, ErrInvalidURL, strings.Join(problems, "; "))}
	}
	u, err := url.Parse(ep.URL)
	if err != nil {
		return Outcome{Err: fmt.Errorf("send %s: %w: %v", msg.ID, ErrInvalidURL, err)}
	}
	wrap := func(err error) error { return fmt.Errorf("send %s to %s: %w", msg.ID, u.Host, err) }

	if err := checkMessage(msg); err != nil {
		return Outcome{Err: wrap(err)}
	}
	signature, err := sign(ep.Secrets, msg)
	if err != nil {
		return Outcome{Err: wrap(err)}
	}

	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(msg.Body))
	if err != nil {
		return Outcome{Err: wrap(fmt.Errorf("%w: %v", ErrInvalidURL, err))}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	req.Header.Set(standardwebhooks.HeaderWebhookID, msg.ID)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(msg.Timestamp.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, signature)

	resp, err := s.client.Do(req)
	if err != nil {
		// The url.Error that Do returns repeats the whole URL; keep only its cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Outcome{Err: wrap(err)}
	}
	defer resp.Body.Close()

	out := Outcome{Status: resp.StatusCode}
	out.Answer, out.AnswerCut = keepAnswer(resp.Body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		out.Err = wrap(fmt.Errorf("%w: status %d", ErrStatus, resp.StatusCode))
	}
	return out
}

// keepAnswer reads the start of an answer's body for the delivery log: at most MaxAnswerBytes,
// and whether there was more. It reads one byte past the bound, to tell a cut answer from one
// that fits exactly, and nothing beyond it. A failure while reading keeps what arrived: the
// status has already said whether the message was accepted.
func keepAnswer(body io.Reader) (answer []byte, cut bool) {
	answer, _ = io.ReadAll(io.LimitReader(body, MaxAnswerBytes+1))
	if len(answer) > MaxAnswerBytes {
		return answer[:MaxAnswerBytes], true
	}
	return answer, false
}

// checkMessage refuses a message that could not be sent as the caller meant it.
func checkMessage(msg Message) error {
	switch {
	case msg.ID == "":
		return fmt.Errorf("%w: no id", ErrInvalidMessage)
	case len(msg.ID) > MaxIDBytes:
		return fmt.Errorf("%w: id is %d bytes long, over the limit of %d", ErrInvalidMessage, len(msg.ID), MaxIDBytes)
	case strings.IndexFunc(msg.ID, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0:
		return fmt.Errorf("%w: id %q is not printable ASCII without spaces", ErrInvalidMessage, msg.ID)
	case msg.Timestamp.Unix() <= 0:
		return fmt.Errorf("%w: no timestamp", ErrInvalidMessage)
	case !json.Valid(msg.Body):
		return fmt.Errorf("%w: body is not JSON", ErrInvalidMessage)
	}
	return nil
}

// sign returns the webhook-signature header for msg: one "v1,<signature>" entry per secret, in
// the order given, separated by spaces.
func sign(secrets []string, msg Message) (string, error) {
	if len(secrets) == 0 || len(secrets) > MaxSecrets {
		return "", fmt.Errorf("%w: %d secrets, want 1 to %d", ErrInvalidSecret, len(secrets), MaxSecrets)
	}
	entries := make([]string, 0, len(secrets))
	for i, secret := range secrets {
		// The library also takes a secret without the prefix; Ferry's always has it, so a value
		// without one is a mistake (a key pasted from elsewhere), not a secret.
		if !strings.HasPrefix(secret, secretPrefix) {
			return "", fmt.Errorf("%w: secret %d does not start with %q", ErrInvalidSecret, i+1, secretPrefix)
		}
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			return "", fmt.Errorf("%w: secret %d: %v", ErrInvalidSecret, i+1, err)
		}
		entry, err := wh.Sign(msg.ID, msg.Timestamp, msg.Body)
		if err != nil {
			return "", fmt.Errorf("sign with secret %d: %w", i+1, err)
		}
		entries = append(entries, entry)
	}
	return strings.Join(entries, " "), nil
}

// retryable reports whether an attempt that ended with status and err can succeed later. See the
// package comment for why every answer but 2xx is retryable.
func retryable(status int, err error) bool {
	switch {
	case err == nil:
		return false
	case status != 0:
		return true
	case errors.Is(err, ErrInvalidURL),
		errors.Is(err, ErrForbiddenAddress),
		errors.Is(err, ErrInvalidSecret),
		errors.Is(err, ErrInvalidMessage):
		return false
	default:
		// Timeouts, refused and reset connections, DNS and TLS failures.
		return true
	}
}
