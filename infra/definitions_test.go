package main

import (
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestDefaultDefinitions_Valid(t *testing.T) {
	if err := DefaultDefinitions().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestDefinitions_RefusesWhatCannotBeDeployed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Definitions)
		want   string
	}{
		{"unknown table", func(d *Definitions) {
			d.Functions[0].Tables = map[string]resources.Access{"nope": resources.Read}
		}, `unknown table "nope"`},
		{"send to a table", func(d *Definitions) {
			d.Functions[0].Tables = map[string]resources.Access{resources.TableLedger: resources.Send}
		}, "tables take read or read-write"},
		{"consume a bucket", func(d *Definitions) {
			d.Functions[0].Buckets = map[string]resources.Access{resources.BucketArchive: resources.Consume}
		}, "buckets take read or read-write"},
		{"read a queue", func(d *Definitions) {
			d.Functions[0].Queues = map[string]resources.Access{resources.QueueEvents: resources.Read}
		}, "queues take send, consume or consume-send"},
		{"visibility under six timeouts", func(d *Definitions) {
			d.Queues[0].VisibilityTimeout = time.Minute
		}, "less than 6 x the timeout"},
		{"schedule not in minutes", func(d *Definitions) {
			d.Functions[0].Every = 90 * time.Second
		}, "whole number of minutes"},
		{"route to unknown function", func(d *Definitions) {
			d.Routes = append(d.Routes, resources.Route{Method: "GET", Path: "/v1/x", Function: "nope"})
		}, `unknown function "nope"`},
		{"duplicate route", func(d *Definitions) {
			d.Routes = append(d.Routes, d.Routes[0])
		}, "defined twice"},
		{"bad method", func(d *Definitions) {
			d.Routes = append(d.Routes, resources.Route{Method: "FETCH", Path: "/v1/x", Function: resources.FunctionAPI})
		}, "method must be one of"},
		{"unknown secret", func(d *Definitions) {
			d.Functions[0].Secrets = []string{"FERRY_NOPE_SECRET_ARN"}
		}, `unknown secret "FERRY_NOPE_SECRET_ARN"`},
		{"secret listed twice", func(d *Definitions) {
			d.Functions[0].Secrets = []string{resources.EnvAdminKeySecretARN, resources.EnvAdminKeySecretARN}
		}, "listed twice"},
		{"reads limits without the Kinde client secret", func(d *Definitions) {
			d.Functions[0].ReadsLimits, d.Functions[0].Secrets = true, nil
		}, "reads limits but does not list secret FERRY_KINDE_CLIENT_SECRET_ARN"},
		{"Kinde client secret without reading limits", func(d *Definitions) {
			d.Functions[0].ReadsLimits, d.Functions[0].Secrets = false, []string{resources.EnvKindeClientSecretARN}
		}, "but does not read limits"},
		{"alarm without threshold", func(d *Definitions) {
			d.Alarms = append(d.Alarms, metrics.Alarm{Metric: "Dead"})
		}, "positive threshold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := copyDefinitions(DefaultDefinitions())
			tc.change(&d)
			err := d.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want one containing %q", err, tc.want)
			}
		})
	}
}

// copyDefinitions copies the lists (and each function's access maps) so a test can change them
// without touching the package-level definitions.
func copyDefinitions(d Definitions) Definitions {
	out := Definitions{
		Tables:    append([]resources.Table(nil), d.Tables...),
		Queues:    append([]resources.Queue(nil), d.Queues...),
		Buckets:   append([]resources.Bucket(nil), d.Buckets...),
		Functions: append([]resources.Function(nil), d.Functions...),
		Routes:    append([]resources.Route(nil), d.Routes...),
		Alarms:    append([]metrics.Alarm(nil), d.Alarms...),
	}
	for i, f := range out.Functions {
		out.Functions[i].Tables = copyAccess(f.Tables)
		out.Functions[i].Queues = copyAccess(f.Queues)
		out.Functions[i].Buckets = copyAccess(f.Buckets)
		out.Functions[i].Secrets = append([]string(nil), f.Secrets...)
	}
	return out
}

func copyAccess(m map[string]resources.Access) map[string]resources.Access {
	if m == nil {
		return nil
	}
	out := make(map[string]resources.Access, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestPascal(t *testing.T) {
	for in, want := range map[string]string{"events-dlq": "EventsDlq", "apikeys": "Apikeys", "a_b c": "ABC"} {
		if got := pascal(in); got != want {
			t.Errorf("pascal(%q) = %q; want %q", in, got, want)
		}
	}
}
