// Package devstack runs Ferry's local stack: the emulators (minidyn for DynamoDB and gofakes3 for
// S3 in-process, fauxqs for SQS as a child process on 127.0.0.1), the provisioning of every
// resource from the one definition in internal/platform/resources, and the pieces of AWS that glue
// functions together in production: an SQS event source mapping and the schedules.
package devstack

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/truora/minidyn/server"

	"github.com/ferrymeter/ferry/internal/platform/cloud"
)

//go:embed sqs-emulator.mjs
var sqsEmulatorScript []byte

// Environment variables that locate the SQS emulator's runtime.
const (
	EnvNode       = "FERRY_NODE"       // the node binary (default: node on PATH)
	EnvFauxqsDir  = "FERRY_FAUXQS_DIR" // the installed fauxqs package folder
	sqsStartLimit = 30 * time.Second   // how long the emulator may take to print its address
	toolsFolder   = "_tools"           // where make installs npm packages
	fauxqsSubpath = "node_modules/fauxqs"
)

// Emulators are the running local endpoints. Services whose endpoint came from the environment
// are not started.
type Emulators struct {
	Endpoints cloud.Endpoints
	stops     []func()
	once      sync.Once
}

// EmulatorOptions select addresses for the emulators; empty means a free port on 127.0.0.1.
type EmulatorOptions struct {
	// External endpoints to use instead of starting an emulator.
	External cloud.Endpoints
}

// StartEmulators starts an emulator for every service without an external endpoint.
func StartEmulators(opts EmulatorOptions) (*Emulators, error) {
	e := &Emulators{Endpoints: opts.External}
	if e.Endpoints.DynamoDB == "" {
		srv, err := newLoopbackServer(NewDynamoDBHandler())
		if err != nil {
			return nil, err
		}
		e.Endpoints.DynamoDB = srv.URL
		e.stops = append(e.stops, srv.Close)
	}
	if e.Endpoints.S3 == "" {
		faker := gofakes3.New(s3mem.New(), gofakes3.WithLogger(gofakes3.DiscardLog()))
		srv, err := newLoopbackServer(faker.Server())
		if err != nil {
			e.Stop()
			return nil, err
		}
		e.Endpoints.S3 = srv.URL
		e.stops = append(e.stops, srv.Close)
	}
	if e.Endpoints.SQS == "" {
		url, stop, err := startSQSEmulator()
		if err != nil {
			e.Stop()
			return nil, err
		}
		e.Endpoints.SQS = url
		e.stops = append(e.stops, stop)
	}
	return e, nil
}

// Stop stops every emulator this value started. It is safe to call more than once.
func (e *Emulators) Stop() {
	e.once.Do(func() {
		for i := len(e.stops) - 1; i >= 0; i-- {
			e.stops[i]()
		}
	})
}

// newLoopbackServer serves h on a free port of 127.0.0.1 (never on every interface).
func newLoopbackServer(h http.Handler) (*httptest.Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen on 127.0.0.1: %w", err)
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: h}}
	srv.Start()
	return srv, nil
}

// NewDynamoDBHandler is minidyn's DynamoDB server with the calls it lacks answered locally:
// UpdateTimeToLive and DescribeTimeToLive (items simply never expire in the emulator) and
// ListTables.
func NewDynamoDBHandler() http.Handler {
	return &dynamoShim{next: server.NewServer(), ttl: map[string]string{}, tables: map[string]bool{}}
}

type dynamoShim struct {
	next   http.Handler
	mu     sync.Mutex
	ttl    map[string]string // table → TTL attribute
	tables map[string]bool
}

func (s *dynamoShim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	op := target[strings.LastIndex(target, ".")+1:]
	switch op {
	case "UpdateTimeToLive", "DescribeTimeToLive", "ListTables", "CreateTable", "DeleteTable":
	default:
		s.next.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var in struct {
		TableName               string
		TimeToLiveSpecification *struct {
			AttributeName string
			Enabled       bool
		}
	}
	_ = json.Unmarshal(body, &in)
	reply := func(v any) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_ = json.NewEncoder(w).Encode(v)
	}
	switch op {
	case "UpdateTimeToLive":
		if in.TimeToLiveSpecification == nil {
			http.Error(w, "missing TimeToLiveSpecification", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.ttl[in.TableName] = in.TimeToLiveSpecification.AttributeName
		s.mu.Unlock()
		reply(map[string]any{"TimeToLiveSpecification": in.TimeToLiveSpecification})
	case "DescribeTimeToLive":
		s.mu.Lock()
		attr, ok := s.ttl[in.TableName]
		s.mu.Unlock()
		desc := map[string]any{"TimeToLiveStatus": "DISABLED"}
		if ok {
			desc = map[string]any{"TimeToLiveStatus": "ENABLED", "AttributeName": attr}
		}
		reply(map[string]any{"TimeToLiveDescription": desc})
	case "ListTables":
		s.mu.Lock()
		names := make([]string, 0, len(s.tables))
		for name := range s.tables {
			names = append(names, name)
		}
		s.mu.Unlock()
		reply(map[string]any{"TableNames": names})
	case "CreateTable", "DeleteTable":
		rec := httptest.NewRecorder()
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.next.ServeHTTP(rec, r)
		if rec.Code == http.StatusOK {
			s.mu.Lock()
			if op == "CreateTable" {
				s.tables[in.TableName] = true
			} else {
				delete(s.tables, in.TableName)
				delete(s.ttl, in.TableName)
			}
			s.mu.Unlock()
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}
}

// startSQSEmulator runs fauxqs under node and returns its URL and a stop function.
func startSQSEmulator() (string, func(), error) {
	dir, err := FauxqsDir()
	if err != nil {
		return "", nil, err
	}
	nodeBin := os.Getenv(EnvNode)
	if nodeBin == "" {
		nodeBin = "node"
	}
	script, err := os.CreateTemp("", "ferry-sqs-emulator-*.mjs")
	if err != nil {
		return "", nil, fmt.Errorf("write SQS emulator launcher: %w", err)
	}
	if _, err := script.Write(sqsEmulatorScript); err != nil {
		script.Close()
		return "", nil, fmt.Errorf("write SQS emulator launcher: %w", err)
	}
	script.Close()

	cmd := exec.Command(nodeBin, script.Name(), filepath.Join(dir, "dist", "app.js"))
	cmd.Stderr = os.Stderr
	// The emulator must die with this process, however it ends. Three guards, because each has
	// a gap: the kernel's parent-death signal (SIGKILL), the launcher's watch on its stdin
	// (closed by the kernel when this process dies) and on its parent's pid.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	// Pdeathsig fires when the thread that forked the child exits, not when the process does,
	// and Go runs goroutines on threads it may end. So the child is started from a goroutine
	// locked to its thread, which waits for the child and so keeps that thread alive exactly as
	// long as the child lives.
	startErr := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine, after the child
		if err := cmd.Start(); err != nil {
			startErr <- err
			return
		}
		startErr <- nil
		_ = cmd.Wait()
		close(exited)
	}()
	if err := <-startErr; err != nil {
		os.Remove(script.Name())
		return "", nil, fmt.Errorf("start SQS emulator (%s): %w", nodeBin, err)
	}
	stop := func() {
		_ = stdin.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		os.Remove(script.Name())
	}

	type started struct {
		URL string `json:"url"`
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line, ok := <-lines:
		var s started
		if !ok || json.Unmarshal([]byte(line), &s) != nil || s.URL == "" {
			stop()
			return "", nil, fmt.Errorf("SQS emulator did not start (first line %q)", line)
		}
		return s.URL, stop, nil
	case <-time.After(sqsStartLimit):
		stop()
		return "", nil, errors.New("SQS emulator did not print its address in time")
	}
}

// FauxqsDir locates the installed fauxqs package: FERRY_FAUXQS_DIR, or _tools/node_modules/fauxqs
// in the repository that contains the working directory.
func FauxqsDir() (string, error) {
	if dir := os.Getenv(EnvFauxqsDir); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, toolsFolder, fauxqsSubpath)
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		return "", fmt.Errorf("the SQS emulator is not installed at %s: run `make tools` (make run and make test do it)", dir)
	}
	return dir, nil
}

// RepoRoot finds the repository root: the nearest folder above the working directory that holds
// Ferry's go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(data, []byte("module github.com/ferrymeter/ferry")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the Ferry repository (no go.mod found above the working directory); set FERRY_FAUXQS_DIR")
		}
		dir = parent
	}
}
