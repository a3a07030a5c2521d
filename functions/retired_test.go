package functions_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/functions"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// FERRY_BATCH_MODE chose between two worker designs in earlier releases, on the ingest and
// worker functions. There is one design now. A deployment that still sets it true asked for that
// design: both functions start, and each logs that the setting is ignored. One that sets it to
// anything else asked for the per-event worker, or for nothing a release understood: both refuse
// to start, naming the setting and what replaced it, rather than silently running another design.
func TestRetiredBatchMode_TrueIsIgnoredWithALogLine_AnythingElseRefusesToStart(t *testing.T) {
	cases := []struct {
		value   string
		refused bool
	}{
		{"", false}, {"true", false}, {"1", false}, {"TRUE", false},
		{"false", true}, {"0", true}, {"yes", true},
	}
	for _, c := range cases {
		for _, function := range []string{resources.FunctionIngest, resources.FunctionWorker} {
			t.Run(function+"/"+c.value, func(t *testing.T) {
				var logged bytes.Buffer
				settings := compose.Settings{}
				if c.value != "" {
					settings[resources.EnvRetiredBatchMode] = c.value
				}
				_, err := functions.Definitions().Build(function, compose.Env{
					Names: allNames(), Config: compose.DefaultConfig(), Settings: settings,
					Log: slog.New(slog.NewTextHandler(&logged, nil)), Metrics: metrics.NewCounter(), Now: time.Now,
				})
				if c.refused {
					if err == nil || !strings.Contains(err.Error(), resources.EnvRetiredBatchMode) || !strings.Contains(err.Error(), "per-event worker was retired") {
						t.Fatalf("%s=%q: %v; want the function refused, naming the setting and why", resources.EnvRetiredBatchMode, c.value, err)
					}
					return
				}
				if err != nil {
					t.Fatalf("%s=%q: %v; want the function built", resources.EnvRetiredBatchMode, c.value, err)
				}
				if warned := strings.Contains(logged.String(), "retired setting ignored"); warned != (c.value != "") {
					t.Errorf("%s=%q: logged %q; want one line saying it is ignored exactly when it is set", resources.EnvRetiredBatchMode, c.value, logged.String())
				}
			})
		}
	}
}
