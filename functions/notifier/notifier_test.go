package notifier_test

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/functions/notifier"
	"github.com/ferrymeter/ferry/internal/alerts/send"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func build(t *testing.T, settings compose.Settings) (*compose.Function, error) {
	t.Helper()
	names := resources.Names{Tables: map[string]string{
		resources.TableNotifications: "notifications", resources.TableWebhookEndpoints: "webhookendpoints",
	}}
	return compose.NewDefinitions([]compose.Builder{notifier.Builder}).Build(resources.FunctionNotifier, compose.Env{
		Names: names, Config: compose.DefaultConfig(), Settings: settings,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics.NewCounter(), Now: time.Now,
	})
}

// The notifier's sender refuses loopback addresses unless FERRY_ALERTS_ALLOW_LOOPBACK=true, which
// only ferry dev sets; a value that is not true or false refuses to build, naming the setting.
func TestBuild_LoopbackOnlyWhenTheSettingAllowsIt(t *testing.T) {
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(rcv.Close)
	ep := send.Endpoint{URL: rcv.URL + "/hooks", Secrets: []string{"whsec_" + base64.StdEncoding.EncodeToString([]byte("ferry-notifier-test-key-01234567"))}}
	msg := send.Message{ID: "ntf_test", Timestamp: time.Now(), Body: []byte(`{"type":"threshold.crossed"}`)}

	cases := []struct {
		name      string
		settings  compose.Settings
		delivered bool
	}{
		{"unset: production's policy", nil, false},
		{"false", compose.Settings{resources.EnvAlertsAllowLoopback: "false"}, false},
		{"true: ferry dev", compose.Settings{resources.EnvAlertsAllowLoopback: "true"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fn, err := build(t, c.settings)
			if err != nil {
				t.Fatal(err)
			}
			p := notifier.PartsOf(fn)
			if p == nil || p.Drainer == nil || fn.Run == nil {
				t.Fatalf("parts %+v; want a scheduled drainer", p)
			}
			out := p.Sender.Send(context.Background(), ep, msg)
			if out.Delivered != c.delivered {
				t.Errorf("delivered %v (%v); want %v", out.Delivered, out.Err, c.delivered)
			}
			if !c.delivered && !errors.Is(out.Err, send.ErrForbiddenAddress) && !errors.Is(out.Err, send.ErrInvalidURL) {
				t.Errorf("refused with %v; want a forbidden address or URL", out.Err)
			}
		})
	}
	if _, err := build(t, compose.Settings{resources.EnvAlertsAllowLoopback: "yes please"}); err == nil || !strings.Contains(err.Error(), resources.EnvAlertsAllowLoopback) {
		t.Errorf("build with an unreadable setting: %v; want it refused, naming %s", err, resources.EnvAlertsAllowLoopback)
	}
}
