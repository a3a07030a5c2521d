package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/idempotency"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// The record store's operations on one record, as a history records them.
type recordOp struct {
	kind       string // claim, takeover, complete, release, get
	token, old string // the claim's token; a takeover's old token
	body       string // what a completion stores
}

type recordOut struct {
	ok bool // the write landed (claim, takeover, complete, release)
	// seen is what a get read.
	seen recordState
}

// recordState is the model of one record: absent, or a claim in flight or completed.
type recordState struct {
	present bool
	token   string
	state   idempotency.State
	body    string
}

// recordModel is the record store's specification, one record per partition: a claim lands only
// on an absent record; a takeover only on the in-flight claim it names (every claim here is past
// its lease, none past its retention); a completion and a release only under the record's own
// token; a read returns the record as it is.
var recordModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Metadata.(string)
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return recordState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(recordState), input.(recordOp), output.(recordOut)
		switch in.kind {
		case "claim":
			if !s.present {
				return out.ok, recordState{present: true, token: in.token, state: idempotency.InFlight}
			}
			return !out.ok, s
		case "takeover":
			if s.present && s.token == in.old && s.state == idempotency.InFlight {
				return out.ok, recordState{present: true, token: in.token, state: idempotency.InFlight}
			}
			return !out.ok, s
		case "complete":
			if s.present && s.token == in.token {
				return out.ok, recordState{present: true, token: in.token, state: idempotency.Completed, body: in.body}
			}
			return !out.ok, s
		case "release":
			if s.present && s.token == in.token {
				return out.ok, recordState{}
			}
			return !out.ok, s
		case "get":
			return out.seen == s, s
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(recordOp), output.(recordOut)
		if in.kind == "get" {
			return fmt.Sprintf("get → %+v", out.seen)
		}
		return fmt.Sprintf("%s(%s, old %s, body %q) → %v", in.kind, in.token, in.old, in.body, out.ok)
	},
}

// linearizabilityClients and linearizabilityOps size one recorded history: enough overlap that
// claims, takeovers, completions and releases of one record race each other.
const (
	linearizabilityClients = 6
	linearizabilityOps     = 12
	linearizabilityKeys    = 2
)

// Concurrent clients claim, take over, complete, release and read two records; the history they
// record, with each call's start and end, is linearizable against the record store's model
// (checked by porcupine).
func TestTable_ConcurrentHistory_IsLinearizable(t *testing.T) {
	env := testenv.New(t)
	store := &idempotency.Table{DB: env.Clients.DynamoDB, Table: env.Names.Table(resources.TableIdempotency)}
	ops := recordHistory(t, store, 1)
	res, info := porcupine.CheckOperationsVerbose(recordModel, ops, time.Minute)
	if res != porcupine.Ok {
		t.Fatalf("the history of %d operations is %s: %v", len(ops), res, info.PartialLinearizationsOperations())
	}
	t.Logf("%d operations on %d records, linearizable", len(ops), linearizabilityKeys)
}

// The checker can fail: a history where two claims of one absent record both land is refused.
func TestRecordModel_TwoClaimsOfOneRecordBothLanding_IsNotLinearizable(t *testing.T) {
	ops := []porcupine.Operation{
		{ClientId: 0, Input: recordOp{kind: "claim", token: "a"}, Output: recordOut{ok: true}, Call: 0, Return: 10, Metadata: "k"},
		{ClientId: 1, Input: recordOp{kind: "claim", token: "b"}, Output: recordOut{ok: true}, Call: 1, Return: 11, Metadata: "k"},
	}
	if porcupine.CheckOperations(recordModel, ops) {
		t.Fatal("two landed claims of one record were accepted as linearizable")
	}
}

// recordHistory runs the clients and returns what they recorded.
func recordHistory(t *testing.T, store *idempotency.Table, seed uint64) []porcupine.Operation {
	t.Helper()
	ctx := context.Background()
	epoch := time.Now()
	var (
		mu     sync.Mutex
		ops    []porcupine.Operation
		tokens = map[string][]string{} // tokens seen per record, for takeovers, completions and releases
		wg     sync.WaitGroup
	)
	farFuture := time.Now().Add(24 * time.Hour).Unix()
	for c := range linearizabilityClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(c)))
			for i := range linearizabilityOps {
				key := fmt.Sprintf("rec-%d", r.IntN(linearizabilityKeys))
				id := idempotency.RecordID("operator", "POST /v1/test", key)
				mu.Lock()
				seen := tokens[key]
				mu.Unlock()
				pick := func() string {
					if len(seen) == 0 {
						return "none"
					}
					return seen[r.IntN(len(seen))]
				}
				mine := fmt.Sprintf("tok-%d-%d", c, i)
				rec := idempotency.Record{ID: id, Scope: "operator", Route: "POST /v1/test", Fingerprint: "f", State: idempotency.InFlight,
					Token: mine, ClaimedAtMs: 1_000, LeaseExpiresAtMs: 0, ExpiresAt: farFuture}
				var in recordOp
				var out recordOut
				call := time.Since(epoch).Nanoseconds()
				var err error
				switch n := r.IntN(10); {
				case n < 3:
					in = recordOp{kind: "claim", token: mine}
					err = store.Claim(ctx, rec)
					out.ok = err == nil
					err = expected(err, idempotency.ErrClaimed)
				case n < 5:
					in = recordOp{kind: "takeover", token: mine, old: pick()}
					err = store.TakeOver(ctx, idempotency.Record{Token: in.old}, rec)
					out.ok = err == nil
					err = expected(err, idempotency.ErrClaimed)
				case n < 7:
					tok := pick()
					in = recordOp{kind: "complete", token: tok, body: fmt.Sprintf("answer-%d-%d", c, i)}
					err = store.Complete(ctx, idempotency.Record{ID: id, Token: tok, State: idempotency.Completed, CompletedAtMs: 2_000,
						ExpiresAt: farFuture, Status: 201, SealedBody: []byte(in.body)})
					out.ok = err == nil
					err = expected(err, idempotency.ErrClaimLost)
				case n < 8:
					in = recordOp{kind: "release", token: pick()}
					err = store.Release(ctx, idempotency.Record{ID: id, Token: in.token})
					out.ok = err == nil
					err = expected(err, idempotency.ErrClaimLost)
				default:
					in = recordOp{kind: "get"}
					got, gerr := store.Get(ctx, id)
					switch {
					case errors.Is(gerr, idempotency.ErrNotFound):
					case gerr != nil:
						err = gerr
					default:
						out.seen = recordState{present: true, token: got.Token, state: got.State, body: string(got.SealedBody)}
					}
				}
				ret := time.Since(epoch).Nanoseconds()
				if err != nil {
					t.Errorf("client %d: %s: %v", c, in.kind, err)
					return
				}
				mu.Lock()
				if in.kind == "claim" || in.kind == "takeover" {
					tokens[key] = append(tokens[key], mine)
				}
				ops = append(ops, porcupine.Operation{ClientId: c, Input: in, Output: out, Call: call, Return: ret, Metadata: key})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ops
}

// expected turns the refusal a write is allowed to meet into no error.
func expected(err, refusal error) error {
	if errors.Is(err, refusal) {
		return nil
	}
	return err
}
