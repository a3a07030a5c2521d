package functions_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func cloudEvent(id string) map[string]any {
	return map[string]any{"specversion": "1.0", "id": id, "source": "/tests", "type": "api.call", "data": map[string]any{"route": "/v1/things"}}
}

// The acceptance case: a free account with an events limit of 3 is sent 5 distinct events
// plus a repeat of each. Exactly 3 are INSERTED with their checkpoint, 2 REJECTED with a reason,
// usage says 3, the repeats moved nothing and the archive holds exactly the 3 accepted payloads.
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

	inserted, rejected := 0, 0
	for i := 1; i <= 5; i++ {
		got := h.Do(t, http.MethodGet, fmt.Sprintf("/v1/events/evt_%d", i), key, nil).JSON(t)
		switch got["status"] {
		case "INSERTED":
			inserted++
			if got["billingAcceptedAt"] == nil {
				t.Errorf("evt_%d INSERTED without billingAcceptedAt: %v", i, got)
			}
		case "REJECTED":
			rejected++
			if got["reason"] == nil || got["billingAcceptedAt"] != nil {
				t.Errorf("evt_%d REJECTED without a reason or with a checkpoint: %v", i, got)
			}
		default:
			t.Errorf("evt_%d: %v", i, got)
		}
	}
	if inserted != 3 || rejected != 2 {
		t.Errorf("inserted %d, rejected %d; want 3 and 2", inserted, rejected)
	}
	u := h.Do(t, http.MethodGet, "/v1/usage?feature=events", key, nil).JSON(t)
	if u["used"] != float64(3) || u["remaining"] != float64(0) || u["limit"] != float64(3) {
		t.Errorf("usage = %v", u)
	}
	objects, err := h.Env.Clients.S3.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(h.Env.Names.Bucket(resources.BucketArchive))})
	if err != nil {
		t.Fatal(err)
	}
	if len(objects.Contents) != 3 {
		t.Errorf("archive holds %d objects, want 3", len(objects.Contents))
	}
}
