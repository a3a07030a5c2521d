package operate_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/metering/archive"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/operator/operate"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// stackOf is the operator's view of a harness's resources, through clients no function's grant
// limits (an operator's).
func stackOf(h *apptest.Harness) *operate.Stack {
	c, n := h.Env.Clients, h.Env.Names
	return &operate.Stack{
		Names:   n,
		Ledger:  &ledger.Table{DB: c.DynamoDB, Table: n.Table(resources.TableLedger), Usage: usage.Table{DB: c.DynamoDB, Name: n.Table(resources.TableUsage)}},
		Archive: &archive.S3{Client: c.S3, Bucket: n.Bucket(resources.BucketArchive)},
		Now:     time.Now,
	}
}

// The summary counts each entry as its readers see it — a unit's members INSERTED once the unit
// is recorded done, though their items still say INSERTING — and each INSERTED event archived
// where its entry says. A unit whose every member another unit claimed first (a client resending
// a batch Ferry has finished) leaves an object no entry points into: counted, and listed as
// unreferenced, not as a disagreement.
func TestSummarize_UnitsResolvedAndEveryAcceptedEventArchived(t *testing.T) {
	h := apptest.New(t)
	key := h.CreateAccount(t, "acct_sum", "free", map[string]any{"events": 4})
	var evs []map[string]any
	for i := range 5 {
		evs = append(evs, map[string]any{"specversion": "1.0", "id": fmt.Sprintf("evt_%d", i), "source": "/tests", "type": "api.call"})
	}
	if r := h.Do(t, "POST", "/v1/events/batch", key, evs); r.Status != 202 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	h.Drain(t, 0)
	h.Clock.Advance(time.Second)
	if r := h.Do(t, "POST", "/v1/events/batch", key, evs[:2]); r.Status != 202 && r.Status != 402 {
		t.Fatalf("the resend: %d %s", r.Status, r.Body)
	}
	h.Drain(t, 0)
	sum, err := stackOf(h).Summarize(context.Background(), "acct_sum")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"INSERTED": 4, "REJECTED": 1}; !reflect.DeepEqual(sum.Ledger, want) {
		t.Errorf("ledger %v, want %v", sum.Ledger, want)
	}
	if sum.Archived != 4 || len(sum.InsertedNotArchived) != 0 {
		t.Errorf("archived %d, not archived %v; want the 4 accepted events archived", sum.Archived, sum.InsertedNotArchived)
	}
	if sum.Objects != 2 || len(sum.Unreferenced) != 1 {
		t.Errorf("%d objects, unreferenced %v; want the unit's object and the resend's, which nothing points into", sum.Objects, sum.Unreferenced)
	}
}
