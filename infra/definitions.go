package main

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Definitions are what the stack deploys. The app always uses DefaultDefinitions, the lists in
// internal/platform/resources and internal/platform/metrics, so a table, queue, function, route or alarm appended
// there is deployed with no change here. Tests pass extended copies to prove exactly that.
type Definitions struct {
	Tables    []resources.Table
	Queues    []resources.Queue
	Buckets   []resources.Bucket
	Functions []resources.Function
	Routes    []resources.Route
	Alarms    []metrics.Alarm
}

// DefaultDefinitions returns Ferry's resource, route and alarm lists.
func DefaultDefinitions() Definitions {
	return Definitions{
		Tables:    resources.Tables,
		Queues:    resources.Queues,
		Buckets:   resources.Buckets,
		Functions: resources.Functions,
		Routes:    resources.Routes,
		Alarms:    metrics.Alarms,
	}
}

// Limits AWS puts on what the definitions may ask for.
const (
	minFunctionTimeout      = time.Second
	maxFunctionTimeout      = 15 * time.Minute
	minFunctionMemoryMB     = 128
	maxFunctionMemoryMB     = 10240
	maxQueueVisibility      = 12 * time.Hour
	minQueueRetention       = time.Minute
	maxQueueRetention       = 14 * 24 * time.Hour
	visibilityPerTimeout    = 6 // AWS's advice for SQS event sources: visibility >= 6 x timeout
	minScheduleInterval     = time.Minute
	scheduleIntervalQuantum = time.Minute // rate() expressions count whole minutes
)

var httpMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}

// stackSecrets are the secrets the stack can hand a function, by the environment variable that
// carries the secret's ARN: the operator key, which the stack generates, and the Kinde client
// secret, which the kindeClientSecretArn context names (and which exists only with
// limitsSource=kinde).
var stackSecrets = []string{
	resources.EnvAdminKeySecretARN, resources.EnvKindeClientSecretARN,
	// The Stripe endpoint's signing secret, which the stack creates for the operator to fill in,
	// and the Stripe API key (stripeApiKeySecretArn) reporting and the optional re-fetch use.
	resources.EnvStripeWebhookSecretARN, resources.EnvStripeAPIKeySecretARN,
}

// deploymentSettings are the settings a function may list in resources.Function.Settings.
var deploymentSettings = []string{resources.EnvKindeWebhookJWKSURL, resources.EnvStripeRefetch, resources.EnvStripeAPIBase, resources.EnvAPIURL}

// Validate reports every definition the stack cannot deploy as written: references to unknown
// resources, access levels that make no sense for the resource kind, settings AWS refuses, and a
// queue whose visibility timeout is shorter than six times its consumer's timeout (which would
// let SQS redeliver a message while the first delivery is still being worked on).
func (d Definitions) Validate() error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	tables := map[string]bool{}
	for _, t := range d.Tables {
		if tables[t.Logical] {
			fail("table %q is defined twice", t.Logical)
		}
		tables[t.Logical] = true
		if t.PartitionKey.Name == "" {
			fail("table %q has no partition key", t.Logical)
		}
		for _, ix := range t.Indexes {
			if ix.Name == "" || ix.PartitionKey.Name == "" {
				fail("table %q: every index needs a name and a partition key", t.Logical)
			}
		}
	}
	queues := map[string]resources.Queue{}
	for _, q := range d.Queues {
		if _, dup := queues[q.Logical]; dup {
			fail("queue %q is defined twice", q.Logical)
		}
		queues[q.Logical] = q
		if q.VisibilityTimeout <= 0 || q.VisibilityTimeout > maxQueueVisibility {
			fail("queue %q: visibility timeout %s outside (0, %s]", q.Logical, q.VisibilityTimeout, maxQueueVisibility)
		}
		for _, r := range []time.Duration{q.Retention, q.DLQRetention} {
			if r < minQueueRetention || r > maxQueueRetention {
				fail("queue %q: retention %s outside [%s, %s]", q.Logical, r, minQueueRetention, maxQueueRetention)
			}
		}
		if q.MaxReceiveCount < 1 {
			fail("queue %q: maxReceiveCount %d must be at least 1", q.Logical, q.MaxReceiveCount)
		}
	}
	buckets := map[string]bool{}
	for _, b := range d.Buckets {
		if buckets[b.Logical] {
			fail("bucket %q is defined twice", b.Logical)
		}
		buckets[b.Logical] = true
	}

	functions := map[string]bool{}
	for _, f := range d.Functions {
		if functions[f.Name] {
			fail("function %q is defined twice", f.Name)
		}
		functions[f.Name] = true
		if f.Timeout < minFunctionTimeout || f.Timeout > maxFunctionTimeout || f.Timeout%time.Second != 0 {
			fail("function %q: timeout %s must be whole seconds in [%s, %s]", f.Name, f.Timeout, minFunctionTimeout, maxFunctionTimeout)
		}
		if f.MemoryMB < minFunctionMemoryMB || f.MemoryMB > maxFunctionMemoryMB {
			fail("function %q: memory %d MB outside [%d, %d]", f.Name, f.MemoryMB, minFunctionMemoryMB, maxFunctionMemoryMB)
		}
		if f.ReservedConcurrency < 0 {
			fail("function %q: reserved concurrency %d is negative", f.Name, f.ReservedConcurrency)
		}
		if f.Every != 0 && (f.Every < minScheduleInterval || f.Every%scheduleIntervalQuantum != 0) {
			fail("function %q: schedule every %s must be a whole number of minutes", f.Name, f.Every)
		}
		listed := map[string]bool{}
		for _, env := range f.Secrets {
			if listed[env] {
				fail("function %q: secret %q is listed twice", f.Name, env)
			}
			listed[env] = true
			if !contains(stackSecrets, env) {
				fail("function %q: unknown secret %q; the stack provides %s", f.Name, env, strings.Join(stackSecrets, ", "))
			}
		}
		for _, name := range f.Settings {
			if !contains(deploymentSettings, name) {
				fail("function %q: unknown setting %q; the stack provides %s", f.Name, name, strings.Join(deploymentSettings, ", "))
			}
		}
		// A function that reads limits from Kinde needs the client secret, and only such a
		// function, or one that reports usage (to Kinde), has any use for it. Only a function
		// that reports usage, or re-fetches Stripe objects (EnvStripeRefetch), has any use for
		// the Stripe API key.
		switch kindeSecret := listed[resources.EnvKindeClientSecretARN]; {
		case f.ReadsLimits && !kindeSecret:
			fail("function %q reads limits but does not list secret %s, which limitsSource kinde needs", f.Name, resources.EnvKindeClientSecretARN)
		case !f.ReadsLimits && !f.ReportsUsage && kindeSecret:
			fail("function %q lists secret %s but does not read limits; only functions that read limits may read it", f.Name, resources.EnvKindeClientSecretARN)
		}
		switch stripeSecret := listed[resources.EnvStripeAPIKeySecretARN]; {
		case f.ReportsUsage && !stripeSecret:
			fail("function %q reports usage but does not list secret %s, which Stripe reporting needs", f.Name, resources.EnvStripeAPIKeySecretARN)
		case !f.ReportsUsage && !contains(f.Settings, resources.EnvStripeRefetch) && stripeSecret:
			fail("function %q lists secret %s but neither reports usage nor re-fetches Stripe objects; only those may read it", f.Name, resources.EnvStripeAPIKeySecretARN)
		}
		for logical, access := range f.Tables {
			if !tables[logical] {
				fail("function %q: unknown table %q", f.Name, logical)
			}
			if access != resources.Read && access != resources.ReadWrite {
				fail("function %q: table %q access %q; tables take read or read-write", f.Name, logical, access)
			}
		}
		for logical, access := range f.Buckets {
			if !buckets[logical] {
				fail("function %q: unknown bucket %q", f.Name, logical)
			}
			if access != resources.Read && access != resources.ReadWrite {
				fail("function %q: bucket %q access %q; buckets take read or read-write", f.Name, logical, access)
			}
		}
		for logical, access := range f.Queues {
			q, ok := queues[logical]
			if !ok {
				fail("function %q: unknown queue %q", f.Name, logical)
				continue
			}
			switch access {
			case resources.Send:
			case resources.Consume, resources.ConsumeAndSend:
				if q.VisibilityTimeout < visibilityPerTimeout*f.Timeout {
					fail("queue %q: visibility timeout %s is less than %d x the timeout %s of its consumer %q", logical, q.VisibilityTimeout, visibilityPerTimeout, f.Timeout, f.Name)
				}
			default:
				fail("function %q: queue %q access %q; queues take send, consume or consume-send", f.Name, logical, access)
			}
		}
	}

	routes := map[string]bool{}
	for _, r := range d.Routes {
		key := r.Method + " " + r.Path
		if routes[key] {
			fail("route %q is defined twice", key)
		}
		routes[key] = true
		if !contains(httpMethods, r.Method) {
			fail("route %q: method must be one of %s", key, strings.Join(httpMethods, ", "))
		}
		if !strings.HasPrefix(r.Path, "/") {
			fail("route %q: path must start with /", key)
		}
		if !functions[r.Function] {
			fail("route %q: unknown function %q", key, r.Function)
		}
	}

	alarms := map[string]bool{}
	for _, a := range d.Alarms {
		if a.Metric == "" || a.Threshold <= 0 {
			fail("alarm on %q: needs a metric and a positive threshold", a.Metric)
		}
		if alarms[a.Metric] {
			fail("alarm on %q is defined twice", a.Metric)
		}
		alarms[a.Metric] = true
	}
	return errors.Join(errs...)
}

// consumers returns the functions that consume a queue, in definition order.
func (d Definitions) consumers(queue string) []resources.Function {
	var out []resources.Function
	for _, f := range d.Functions {
		if f.Queues[queue].Consumes() {
			out = append(out, f)
		}
	}
	return out
}

// pascal turns a logical name into a construct id part: "events-dlq" → "EventsDlq".
func pascal(s string) string {
	var b strings.Builder
	upper := true
	for _, r := range s {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			upper = true
			continue
		}
		if upper {
			r = unicode.ToUpper(r)
			upper = false
		}
		b.WriteRune(r)
	}
	return b.String()
}
