package corrections_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/reporting/corrections"
	"github.com/ferrymeter/ferry/internal/reporting/review"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func apply(t *testing.T, h *apptest.Harness, in corrections.Input) (corrections.Correction, bool, error) {
	t.Helper()
	return h.MeterAPI().Corrections.Apply(context.Background(), in)
}

// A correction is a new row in the corrected cycle; its Idempotency-Key names it, so the same key
// finds the same row, and never writes a second.
func TestApply_AppendsOnceUnderItsKey(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_c", "plus", nil)
	in := corrections.Input{Account: "acct_c", Feature: "events", Units: -2, Reason: "two bot clicks", IdempotencyKey: "k1"}
	c, created, err := apply(t, h, in)
	if err != nil || !created || c.Cycle != "2026-11" || c.Closed {
		t.Fatalf("%+v %v %v", c, created, err)
	}
	again, created, err := apply(t, h, in)
	if err != nil || created || again.ID != c.ID {
		t.Errorf("repeat: %+v %v %v", again, created, err)
	}
	in.Units = -3
	if _, _, err := apply(t, h, in); !errors.Is(err, corrections.ErrKeyReused) {
		t.Errorf("the key with another correction: %v", err)
	}
	tot, err := h.MeterAPI().Usage.Read(context.Background(), "acct_c", "events", "2026-11")
	if err != nil || tot.Corrections != -2 {
		t.Errorf("corrections %d, %v", tot.Corrections, err)
	}
}

// A correction for a closed cycle is kept (the ledger is the record) and goes to the review list:
// no provider is written for a closed cycle.
func TestApply_ClosedCycle_StoredAndListedForReview(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_old", "plus", nil)
	c, created, err := apply(t, h, corrections.Input{Account: "acct_old", Feature: "events", Units: 4, Reason: "a late import", Cycle: "2026-10", IdempotencyKey: "k2"})
	if err != nil || !created || !c.Closed || c.Cycle != "2026-10" {
		t.Fatalf("%+v %v %v", c, created, err)
	}
	entries, err := h.MeterAPI().Review.List(context.Background())
	if err != nil || len(entries) != 1 || entries[0].Reason != review.ClosedCycleChanged || entries[0].Ledger != 4 {
		t.Errorf("review %+v, %v", entries, err)
	}
}

func TestApply_RefusesWhatCannotBeACorrection(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_v", "plus", nil)
	for name, c := range map[string]struct {
		in   corrections.Input
		want string
	}{
		"zero units":   {corrections.Input{Account: "acct_v", Feature: "events", Reason: "x", IdempotencyKey: "k"}, "non-zero"},
		"no reason":    {corrections.Input{Account: "acct_v", Feature: "events", Units: 1, IdempotencyKey: "k"}, "reason is required"},
		"no key":       {corrections.Input{Account: "acct_v", Feature: "events", Units: 1, Reason: "x"}, "Idempotency-Key is required"},
		"feature":      {corrections.Input{Account: "acct_v", Feature: "seats", Units: 1, Reason: "x", IdempotencyKey: "k"}, "unknown"},
		"future cycle": {corrections.Input{Account: "acct_v", Feature: "events", Units: 1, Reason: "x", Cycle: "2027-01", IdempotencyKey: "k"}, "has not started"},
		"bad cycle":    {corrections.Input{Account: "acct_v", Feature: "events", Units: 1, Reason: "x", Cycle: "2026-13", IdempotencyKey: "k"}, "YYYY-MM"},
	} {
		_, _, err := apply(t, h, c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", name, err, c.want)
		}
	}
	if _, _, err := apply(t, h, corrections.Input{Account: "nobody", Feature: "events", Units: 1, Reason: "x", IdempotencyKey: "k"}); err == nil {
		t.Error("a correction for an unknown account")
	}
}

// Through the route, with the Idempotency-Key middleware in front: a repeat is replayed.
func TestRoute_CorrectionReplayedUnderItsKey(t *testing.T) {
	h := apptest.New(t)
	h.CreateAccount(t, "acct_r", "plus", nil)
	body := map[string]any{"account": "acct_r", "feature": "events", "units": 3, "reason": "missed import"}
	first := h.Do(t, http.MethodPost, "/v1/usage/corrections", apptest.AdminKey, body, "Idempotency-Key", "c-1")
	second := h.Do(t, http.MethodPost, "/v1/usage/corrections", apptest.AdminKey, body, "Idempotency-Key", "c-1")
	if first.Status != http.StatusCreated || second.Status != http.StatusCreated || second.Header.Get("Idempotent-Replayed") != "true" ||
		string(first.Body) != string(second.Body) {
		t.Errorf("%d %s / %d %s", first.Status, first.Body, second.Status, second.Body)
	}
}
