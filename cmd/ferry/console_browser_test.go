package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	workerfn "github.com/ferrymeter/ferry/functions/worker"
	"github.com/ferrymeter/ferry/internal/devkit/devstack"
	"github.com/ferrymeter/ferry/internal/metering/analytics"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/compose"
)

// Where the console's browser test finds what it drives.
const (
	// EnvChromium names the Chromium binary; by default, the headless shell `make tools` unpacks
	// from the npm package @sparticuz/chromium into _tools/chromium (scripts/unpack-chromium.mjs).
	EnvChromium     = "FERRY_CHROMIUM"
	defaultChromium = "../../_tools/chromium/chrome"
	// consoleScript drives the browser through every page (playwright-core, under _tools/).
	consoleScript = "testdata/console-browser.mjs"
	// consoleScreenshots is where it writes a screenshot of every page (git-ignored).
	consoleScreenshots = "../../_screenshots/console"
	// browserTestLimit bounds the whole browser run: the Engine Room alone waits out a 30 s lease.
	browserTestLimit = 6 * time.Minute
)

// browserTools returns node, Chromium and the playwright-core module, or why one is missing.
func browserTools() (node, chromium, module string, missing string) {
	chromium = os.Getenv(EnvChromium)
	if chromium == "" {
		chromium, _ = filepath.Abs(defaultChromium)
	}
	if _, err := os.Stat(chromium); err != nil {
		return "", "", "", "no Chromium at " + chromium + " (make tools installs it, or set " + EnvChromium + ")"
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return "", "", "", "no node on PATH"
	}
	module, _ = filepath.Abs("../../_tools/node_modules/playwright-core")
	if _, err := os.Stat(filepath.Join(module, "package.json")); err != nil {
		return "", "", "", "no playwright-core under _tools/ (make tools)"
	}
	return node, chromium, module, ""
}

// The operator console end to end, in headless Chromium against ferry dev's own stack (its
// stand-ins included): sign in, open every page, redrive an UNINSERTABLE event, replay a billing
// event, run the three labs and read their figures off the page, reconcile a drifted account,
// register a webhook endpoint at a receiver the script runs, see a notification delivered to it
// and replay it, sign out. A missing browser fails the test: `make tools` installs everything it
// drives.
func TestConsole_InABrowser(t *testing.T) {
	node, chromium, module, missing := browserTools()
	if missing != "" {
		t.Fatalf("the console's browser test cannot run: %s", missing)
	}
	if cloud.EndpointsFromEnv().Local() {
		t.Skip("FERRY_*_ENDPOINT is set: the browser test runs ferry dev's own emulators and stand-ins")
	}
	ctx, cancel := context.WithTimeout(context.Background(), browserTestLimit)
	defer cancel()
	log := compose.NewLogger(&testLog{t})
	catalog, err := devstack.CatalogFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	env := compose.SettingsFromEnv()
	settings, standIns, err := devstack.ProviderStandIns(env, catalog, log)
	if err != nil {
		t.Fatal(err)
	}
	webhooks, err := devstack.NewInboxDev(env, log)
	if err != nil {
		t.Fatal(err)
	}
	defer webhooks.Close()
	opts := devstack.StackOptions{
		Addr: "127.0.0.1:0", OperatorKey: devstack.DefaultAdminKey, Prefix: "console-" + fmt.Sprint(time.Now().UnixNano()),
		Log: log, Catalog: &catalog, Settings: settings,
		// An analytics table that refuses rows of more than one dimension, at the first refusal:
		// the event the test sends with two ends UNINSERTABLE, billed and archived.
		Adjust: func(fn *compose.Function) {
			if p := workerfn.PartsOf(fn); p != nil {
				p.Worker.Schema = analytics.Schema{MaxDimensions: 1, MaxValueBytes: 1024, MaxDimensionBytes: 1024}
				p.Worker.MaxQuarantines = 1
			}
		},
	}
	webhooks.Apply(&opts)
	stack, err := devstack.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer stack.Close()
	standIns.Mount(stack)
	webhooks.Serve(stack)

	// An account with one UNINSERTABLE event, sent as a client sends it.
	do := func(method, path, key string, body any) (int, map[string]any) {
		t.Helper()
		data, _ := json.Marshal(body)
		req, _ := http.NewRequestWithContext(ctx, method, stack.URL+path, strings.NewReader(string(data)))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("browser-%d", time.Now().UnixNano()))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	status, acct := do("POST", "/v1/accounts", devstack.DefaultAdminKey, map[string]any{"id": "acct_console", "plan": "free"})
	if status != http.StatusCreated {
		t.Fatalf("create account: %d %v", status, acct)
	}
	key, _ := acct["apiKey"].(string)
	event := map[string]any{"specversion": "1.0", "id": "evt_wide", "source": "/console-test", "type": "api.call",
		"data": map[string]any{"region": "eu", "model": "large"}}
	if status, body := do("POST", "/v1/events", key, event); status != http.StatusAccepted {
		t.Fatalf("send event: %d %v", status, body)
	}
	ledgerStore := stack.API().Ledger
	deadline := time.Now().Add(30 * time.Second)
	for {
		e, err := ledgerStore.Get(ctx, "acct_console", "evt_wide")
		if err == nil && e.Status == ledger.Uninsertable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the event did not end UNINSERTABLE: %+v %v", e, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	shots, _ := filepath.Abs(consoleScreenshots)
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, consoleScript)
	cmd.Env = append(os.Environ(),
		"FERRY_CONSOLE_URL="+stack.URL, "FERRY_CONSOLE_KEY="+devstack.DefaultAdminKey,
		"FERRY_CONSOLE_ACCOUNT=acct_console", "FERRY_CONSOLE_EVENT=evt_wide",
		"FERRY_CHROMIUM="+chromium, "FERRY_PLAYWRIGHT="+module, "FERRY_CONSOLE_SHOTS="+shots)
	out, err := cmd.CombinedOutput()
	t.Logf("browser run:\n%s", out)
	if err != nil {
		t.Fatalf("the browser run failed: %v", err)
	}
	// What the page did went through the API: the redrive reopened the event, and the worker ran
	// it again (the analytics table still refuses it, so it is UNINSERTABLE again, reopened once).
	e, err := ledgerStore.Get(ctx, "acct_console", "evt_wide")
	if err != nil || !strings.Contains(string(out), "redrive: queued again (was UNINSERTABLE)") {
		t.Errorf("after the redrive: %+v %v", e, err)
	}
	// The notifications page registered an endpoint, the notifier delivered to it, and the
	// replay the page asked for reached the receiver again under the same webhook-id.
	if !strings.Contains(string(out), "receiver: the replay came with the same webhook-id") {
		t.Errorf("the notifications steps did not end with the replay received")
	}
	t.Logf("screenshots in %s", shots)
}

type testLog struct{ t *testing.T }

func (w *testLog) Write(p []byte) (int, error) {
	if testing.Verbose() {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
