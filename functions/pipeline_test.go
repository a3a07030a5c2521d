package functions_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
)

func cloudEvent(id string) map[string]any {
	return map[string]any{"specversion": "1.0", "id": id, "source": "/tests", "type": "api.call", "data": map[string]any{"route": "/v1/things"}}
}

// The acceptance case: a free account with an events limit of 3 is sent 5 distinct events
// plus a repeat of each. Exactly 3 are INSERTED with their checkpoint — the first three of the
// batch, which is one unit claimed in its order — 2 REJECTED with a reason, usage says 3, the
// repeats moved nothing, and every accepted payload reads back from the archive where its entry
// says, byte for byte, while no rejected one names an archive location.
func TestPipeline_FreeLimitOfThree_FiveEventsAndRepeats(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_1", "free", map[string]any{"events": 3})

	var batch []map[string]any
	for i := 1; i <= 5; i++ {
		batch = append(batch, cloudEvent(fmt.Sprintf("evt_%d", i)))
	}
	resp := h.Do(t, http.MethodPost, "/v1/events/batch", key, batch)
	if resp.Status != http.StatusAccepted {
		t.Fatalf("batch: %d %s", resp.Status, resp.Body)
	}
	h.Drain(t, 0)
	// The repeats: every event again, one by one and as a batch.
	for i := 1; i <= 5; i++ {
		r := h.Do(t, http.MethodPost, "/v1/events", key, cloudEvent(fmt.Sprintf("evt_%d", i)))
		if r.Status != http.StatusAccepted {
			t.Errorf("repeat evt_%d: %d %s", i, r.Status, r.Body)
		}
	}
	if r := h.Do(t, http.MethodPost, "/v1/events/batch", key, batch); r.Status != http.StatusAccepted {
		t.Errorf("repeat batch: %d %s", r.Status, r.Body)
	}
	h.Drain(t, 0)

	ctx := context.Background()
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("evt_%d", i)
		got := h.Do(t, http.MethodGet, "/v1/events/"+id, key, nil).JSON(t)
		e, err := h.Worker().Ledger.Get(ctx, "acct_1", id)
		if err != nil {
			t.Fatal(err)
		}
		switch want := map[bool]string{true: "INSERTED", false: "REJECTED"}[i <= 3]; {
		case got["status"] != want:
			t.Errorf("%s: %v; want %s", id, got, want)
		case want == "INSERTED":
			if got["billingAcceptedAt"] == nil {
				t.Errorf("%s INSERTED without billingAcceptedAt: %v", id, got)
			}
			payload, err := h.Worker().Archive.Read(ctx, e.ArchiveLocation())
			if raw, _ := json.Marshal(cloudEvent(id)); err != nil || !bytes.Equal(payload, raw) {
				t.Errorf("%s: archived %s (%v), want %s", id, payload, err, raw)
			}
		default:
			if got["reason"] == nil || got["billingAcceptedAt"] != nil || e.ArchiveKey != "" {
				t.Errorf("%s REJECTED without a reason, with a checkpoint or with an archive location: %v, %q", id, got, e.ArchiveKey)
			}
		}
	}
	u := h.Do(t, http.MethodGet, "/v1/usage?feature=events", key, nil).JSON(t)
	if u["used"] != float64(3) || u["remaining"] != float64(0) || u["limit"] != float64(3) {
		t.Errorf("usage = %v", u)
	}
}
