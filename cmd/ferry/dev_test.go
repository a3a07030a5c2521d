package main

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
)

// Bounds of the process tests.
const (
	devStartLimit = 90 * time.Second
	devStopLimit  = 15 * time.Second
)

var (
	builtOnce sync.Once
	builtPath string
	builtErr  error
	builtDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// ferryBinary builds the CLI once per test binary, as make run does.
func ferryBinary(t *testing.T) string {
	t.Helper()
	builtOnce.Do(func() {
		builtDir, builtErr = os.MkdirTemp("", "ferry-dev-test-")
		if builtErr != nil {
			return
		}
		builtPath = filepath.Join(builtDir, "ferry")
		out, err := exec.Command("go", "build", "-o", builtPath, ".").CombinedOutput()
		if err != nil {
			builtErr = errors.New(string(out))
		}
	})
	if builtErr != nil {
		t.Fatalf("build ferry: %v", builtErr)
	}
	return builtPath
}

// devProcess is a running `ferry dev`.
type devProcess struct {
	cmd    *exec.Cmd
	apiURL string
	sqsURL string
	lines  chan string
}

// startDev starts `ferry dev` on a free port and waits until it answers /healthz.
func startDev(t *testing.T) *devProcess {
	t.Helper()
	if cloud.EndpointsFromEnv().Local() {
		t.Skip("FERRY_*_ENDPOINT is set: ferry dev starts no SQS emulator to watch")
	}
	fauxqs, err := devstack.FauxqsDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ferryBinary(t), "dev", "--addr", "127.0.0.1:0")
	cmd.Dir = t.TempDir() // it writes _dev.env there
	cmd.Env = append(os.Environ(), devstack.EnvFauxqsDir+"="+fauxqs)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &devProcess{cmd: cmd, lines: make(chan string, 64)}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	deadline := time.After(devStartLimit)
	for p.apiURL == "" || p.sqsURL == "" {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatal("ferry dev ended before it printed its addresses")
			}
			if rest, ok := strings.CutPrefix(line, "Ferry is running on "); ok {
				p.apiURL = strings.TrimSpace(rest)
			}
			if _, rest, ok := strings.Cut(line, "SQS "); ok {
				p.sqsURL = strings.Fields(rest)[0]
			}
		case <-deadline:
			t.Fatal("ferry dev did not print its addresses in time")
		}
	}
	for {
		resp, err := http.Get(p.apiURL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-deadline:
			t.Fatal("ferry dev did not become healthy in time")
		case <-time.After(200 * time.Millisecond):
		}
	}
	if !answers(p.sqsURL) {
		t.Fatalf("the SQS emulator at %s does not answer", p.sqsURL)
	}
	return p
}

// answers reports whether something accepts connections at the URL's address.
func answers(rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil {
		return false
	}
	c, err := net.DialTimeout("tcp", u.Host, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// waitSilent waits until nothing answers at the URL.
func waitSilent(t *testing.T, rawURL, what string) {
	t.Helper()
	deadline := time.Now().Add(devStopLimit)
	for answers(rawURL) {
		if time.Now().After(deadline) {
			t.Fatalf("%s at %s still answers %s after its parent ended", what, rawURL, devStopLimit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// SIGKILL gives ferry dev no chance to stop anything: the kernel and the emulator's launcher
// must still end the SQS emulator, so its port stops answering.
func TestDev_SIGKILL_TakesTheSQSEmulatorWithIt(t *testing.T) {
	p := startDev(t)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	waitSilent(t, p.sqsURL, "the SQS emulator")
}

// Ctrl-C (SIGINT), SIGTERM (what make passes on when it is killed) and SIGHUP (a closed
// terminal) stop ferry dev cleanly: it exits 0 and the emulator is gone.
func TestDev_SignalsStopItCleanly_ExitZero(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			p := startDev(t)
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- p.cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("ferry dev ended with %v after %s; want exit status 0", err, sig)
				}
			case <-time.After(devStopLimit):
				t.Fatalf("ferry dev still runs %s after %s", devStopLimit, sig)
			}
			waitSilent(t, p.sqsURL, "the SQS emulator")
			waitSilent(t, p.apiURL, "ferry dev")
		})
	}
}
