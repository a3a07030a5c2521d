package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
)

// EmulatorsCommand is the CLI subcommand that runs ServeEmulators: the benchmarks start the
// running binary with it as a child process.
const EmulatorsCommand = "emulators"

// ServeEmulators serves the local emulators alone and prints their endpoints as one JSON line. The
// benchmarks run them in this separate process so that the CPU they measure is Ferry's own. It
// returns when ctx ends or stdin closes (the parent is gone).
func ServeEmulators(ctx context.Context, stdout io.Writer) error {
	emu, err := devstack.StartEmulators(devstack.EmulatorOptions{})
	if err != nil {
		return err
	}
	defer emu.Stop()
	if err := json.NewEncoder(stdout).Encode(emu.Endpoints); err != nil {
		return err
	}
	// Stop when the parent closes stdin (or dies) or on a signal.
	stdinClosed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stdinClosed) }()
	select {
	case <-ctx.Done():
	case <-stdinClosed:
	}
	return nil
}

// emulatorProcess is a running `ferry emulators` child.
type emulatorProcess struct {
	Endpoints cloud.Endpoints
	cmd       *exec.Cmd
	stdin     io.WriteCloser
}

// startEmulatorProcess starts this binary's emulators command as a child process and waits for its
// endpoints.
func startEmulatorProcess() (*emulatorProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, EmulatorsCommand)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &emulatorProcess{cmd: cmd, stdin: stdin}
	line := make(chan []byte, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- append([]byte(nil), sc.Bytes()...)
		}
		close(line)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case l, ok := <-line:
		if !ok || json.Unmarshal(l, &p.Endpoints) != nil || p.Endpoints.DynamoDB == "" {
			p.Stop()
			return nil, fmt.Errorf("the emulator process did not report its endpoints (%q)", l)
		}
		return p, nil
	case <-time.After(time.Minute):
		p.Stop()
		return nil, fmt.Errorf("the emulator process did not start within a minute")
	}
}

// Stop ends the child.
func (p *emulatorProcess) Stop() {
	_ = p.stdin.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}
