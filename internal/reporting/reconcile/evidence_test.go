package reconcile_test

import (
	"context"
	"testing"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/resources"
	"github.com/ferrymeter/ferry/internal/reporting/reconcile"
)

// Evidence is one row per distinct set of numbers, and what Ferry had sent is one of them: a
// match found while the last report was behind (the meter already right) and the same match
// once the report caught up are two facts, and both stay on the record.
func TestEvidence_RowsThatDifferOnlyInWhatWasSent_StayApart(t *testing.T) {
	env := testenv.New(t)
	s := &reconcile.EvidenceStore{DB: env.Clients.DynamoDB, Table: env.Names.Table(resources.TableEvidence)}
	meter := int64(10)
	base := reconcile.Record{Account: "acct_e", Cycle: "2026-11", Feature: "events", Provider: "stripe", Ledger: 10, Meter: &meter,
		Verdict: reconcile.Match, Cause: "The meter equals the ledger."}
	for i, sent := range []int64{8, 10} {
		r := base
		r.Sent, r.AtMs = sent, int64(1_000*(i+1))
		added, err := s.Add(context.Background(), r)
		if err != nil || !added {
			t.Fatalf("sent %d: added %v, %v", sent, added, err)
		}
	}
	recs, err := s.List(context.Background(), "acct_e", "2026-11")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Sent == recs[1].Sent {
		t.Errorf("records %+v; want two, one per value sent", recs)
	}
}
