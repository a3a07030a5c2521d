package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/alerts/endpoints"
	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// `ferry webhook-endpoints` registers, lists, rotates and reads the delivery log through the
// operator's routes; the secret is printed by create and rotate only.
func TestWebhookEndpoints_CreateListRotateDeliveries(t *testing.T) {
	h := apptest.New(t)
	t.Setenv(resources.EnvAdminKey, apptest.AdminKey)
	ferry := func(args ...string) (string, error) {
		var out, errs bytes.Buffer
		err := run(context.Background(), append([]string{"webhook-endpoints"}, append(args, "--url", h.Server.URL)...), &out, &errs)
		return out.String(), err
	}
	out, err := ferry("create", "--endpoint-url", "https://hooks.example.com/ferry", "--kind", "threshold.crossed", "--account", "acct_1",
		"--description", "billing")
	if err != nil {
		t.Fatal(err)
	}
	var id, secret string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "id:"); ok {
			id = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "secret: "); ok {
			secret = v
		}
	}
	if !endpoints.ValidID(id) || !strings.HasPrefix(secret, "whsec_") || !strings.Contains(out, "Shown once") ||
		!strings.Contains(out, "kinds:     threshold.crossed") || !strings.Contains(out, "note:      billing") {
		t.Fatalf("create printed:\n%s", out)
	}

	out, err = ferry("list")
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, "https://hooks.example.com/ferry") || strings.Contains(out, "whsec_") {
		t.Errorf("list (%v):\n%s", err, out)
	}

	out, err = ferry("rotate", "--id", id)
	if err != nil || !strings.Contains(out, "secret: whsec_") || strings.Contains(out, secret) || !strings.Contains(out, "The previous secret signs too until") {
		t.Errorf("rotate (%v):\n%s", err, out)
	}

	out, err = ferry("deliveries", "--id", id, "--limit", "10")
	if err != nil || !strings.HasPrefix(out, "notification") || strings.Contains(out, "more:") {
		t.Errorf("deliveries (%v):\n%s", err, out)
	}
	out, err = ferry("list", "--json")
	var page struct{ Items []map[string]any }
	if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Items) != 1 || len(page.Items[0]["secrets"].([]any)) != 2 {
		t.Errorf("list --json (%v):\n%s", err, out)
	}
}

// Refusals come back in the API's words, every problem of a registration on a line of its own;
// a missing flag is caught before anything is sent.
func TestWebhookEndpoints_Refusals(t *testing.T) {
	h := apptest.New(t)
	t.Setenv(resources.EnvAdminKey, apptest.AdminKey)
	ferry := func(args ...string) error {
		var out, errs bytes.Buffer
		return run(context.Background(), append([]string{"webhook-endpoints"}, append(args, "--url", h.Server.URL)...), &out, &errs)
	}
	err := ferry("create", "--endpoint-url", "http://10.0.0.1/x", "--kind", "nope")
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "\n  kinds[0] \"nope\"") {
		t.Errorf("a bad registration: %v", err)
	}
	unknown := "we_" + strings.Repeat("a", 26)
	if err := ferry("rotate", "--id", unknown); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("rotate an unknown endpoint: %v", err)
	}
	if err := ferry("replay", "--id", unknown, "--notification", "ntf_x"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("replay on an unknown endpoint: %v", err)
	}
	for _, args := range [][]string{{"create"}, {"rotate"}, {"replay", "--id", unknown}, {"frobnicate"}, {"list", "extra"}} {
		if err := ferry(args...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"webhook-endpoints", "--help"}, &out, &out); err != nil || !strings.Contains(out.String(), "rotate") {
		t.Errorf("help (%v): %s", err, out.String())
	}
}
