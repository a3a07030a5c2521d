package devstack_test

import (
	"net"
	"net/url"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
)

// The kernel's parent-death signal fires when the thread that started the child ends, not the
// process. A goroutine locked to its thread that ends takes its thread with it: starting the
// emulators from one must not take the SQS emulator down while this process still runs.
func TestStartEmulators_TheSQSEmulatorOutlivesTheThreadThatStartedIt(t *testing.T) {
	if cloud.EndpointsFromEnv().Local() {
		t.Skip("FERRY_*_ENDPOINT is set: no SQS emulator is started")
	}
	var emu *devstack.Emulators
	var err error
	started := false
	// The process's main thread is never ended (a locked goroutine that exits on it wedges it
	// instead), so the emulators are started from a goroutine on any other thread; locking this
	// goroutine keeps its own thread from being handed to it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for try := 0; try < 50 && !started; try++ {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
			if syscall.Gettid() == syscall.Getpid() {
				runtime.UnlockOSThread()
				return
			}
			// Never unlocked: the thread ends when this goroutine does.
			started = true
			emu, err = devstack.StartEmulators(devstack.EmulatorOptions{})
		}()
		<-done
	}
	if !started {
		t.Fatal("no goroutine ran on a thread other than the main one")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Stop()
	u, err := url.Parse(emu.Endpoints.SQS)
	if err != nil {
		t.Fatal(err)
	}
	// Give the kernel time to deliver a parent-death signal, had it been tied to that thread.
	for range 10 {
		time.Sleep(200 * time.Millisecond)
		c, err := net.DialTimeout("tcp", u.Host, time.Second)
		if err != nil {
			t.Fatalf("the SQS emulator stopped answering after the starting thread ended: %v", err)
		}
		c.Close()
	}
}
