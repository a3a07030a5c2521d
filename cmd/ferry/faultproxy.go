package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/faultproxy"
)

// Environment the fault proxy gives the command it runs.
const (
	// EnvSDKURL is the proxy's base URL: where a client under test sends its requests.
	EnvSDKURL = "FERRY_SDK_URL"
	// EnvSDKStackURL is the stack's own base URL, for the test's set-up and its checks.
	EnvSDKStackURL = "FERRY_SDK_STACK_URL"
)

// runFaultProxy serves the fault-injecting proxy in front of a running stack. With a command
// after "--", it runs the command with FERRY_SDK_URL (the proxy) and FERRY_SDK_STACK_URL (the
// stack) set, prints the proxy's counts when the command ends, and fails when it fails;
// without one, it serves until interrupted and prints its counts then.
func runFaultProxy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("faultproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	upstream := fs.String("upstream", "", "the stack's base URL (default http://$"+EnvAddr+")")
	addr := fs.String("addr", "127.0.0.1:0", "the proxy's listen address")
	seed := fs.Uint64("seed", 1, "seed of every fault decision")
	rate := fs.Float64("rate", 0.2, "share of requests that get a fault (0–1)")
	delay := fs.Duration("delay", 1500*time.Millisecond, "how long a delayed request waits before it is forwarded")
	paths := fs.String("paths", "/v1/", "comma-separated path prefixes that may be faulted")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *upstream == "" {
		a := os.Getenv(EnvAddr)
		if a == "" {
			return errors.New("faultproxy: name the stack with --upstream or " + EnvAddr)
		}
		*upstream = "http://" + a
	}
	p, err := faultproxy.New(faultproxy.Options{
		Upstream: *upstream, Seed: *seed, Rate: *rate, Delay: *delay, Paths: strings.Split(*paths, ","),
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("faultproxy: listen on %s: %w", *addr, err)
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "faultproxy: %s -> %s (seed %d, rate %.2f, delay %s)\n", url, *upstream, *seed, *rate, *delay)

	var runErr error
	if rest := fs.Args(); len(rest) > 0 {
		cmd := exec.CommandContext(ctx, rest[0], rest[1:]...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.Env = append(os.Environ(), EnvSDKURL+"="+url, EnvSDKStackURL+"="+*upstream)
		runErr = cmd.Run()
	} else {
		<-ctx.Done()
	}
	printFaultStats(stdout, p.Stats())
	if runErr != nil {
		return fmt.Errorf("faultproxy: %s: %w", strings.Join(fs.Args(), " "), runErr)
	}
	return nil
}

// printFaultStats prints the proxy's counts, one fault per line, and as one JSON line.
func printFaultStats(w io.Writer, s faultproxy.Stats) {
	names := make([]string, 0, len(s.ByFault))
	for n := range s.ByFault {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "faultproxy: %d requests, %d faulted", s.Requests, s.Faulted)
	for _, n := range names {
		fmt.Fprintf(w, ", %s %d", n, s.ByFault[n])
	}
	fmt.Fprintf(w, ", upstream errors %d\n", s.Upstream)
	b, _ := json.Marshal(s)
	fmt.Fprintf(w, "faultproxy stats: %s\n", b)
}
