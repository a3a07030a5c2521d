package harness

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/platform/dynamo"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/idempotency"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Limits of an idempotency schedule.
const (
	maxKeys        = 4
	maxClients     = 3
	maxKeyAttempts = 3
	maxLastClients = 3 // clients sent once faults are over, for keys still unanswered
	// leaseJumpOneIn is the chance per step that the clock jumps past the claims' lease.
	leaseJumpOneIn = 50
	effectPath     = "/v1/harness/effects"
	effectRoute    = "POST " + effectPath
)

// Idempotency is the Idempotency-Key contract under the harness: several clients send the same
// keyed request at once and retry it; the route's handler (an effect the harness counts, which
// itself writes to DynamoDB) answers 201, 400 or 503; claims outlive their lease when the clock
// jumps, and their owners come back late; every call meets the wire's faults. The route runs
// behind the real authentication and the real idempotency middleware, over the real store.
//
// Invariants, per key: no two executions run within one claim's lease (one effect at a time);
// none starts after the key's answer was stored; every replayed answer is the answer stored;
// the record, held to a model, is claimed only when absent, taken over only from the claim that
// was read, and completed or released only by its current claim's owner (fencing for an owner
// that outlives its lease); once faults are over, every key gets its answer.
type Idempotency struct{}

// Name implements Pipeline.
func (*Idempotency) Name() string { return "idempotency" }

// execution is one run of the route's handler for a key.
type execution struct {
	n     int
	actor *Actor
	// leaseMs is when the claim the execution runs under expires, as written.
	leaseMs int64
	ended   bool
	body    string
}

type idemKey struct {
	key       string
	answer    int // what the handler answers: 201 or 400; 503 once first if fail503
	fail503   bool
	execs     []*execution
	completed bool // an answer was stored (a Complete committed)
	// token is the claim the record holds in the model ("" for none); stored: its answer is
	// stored; storedBody: the answer stored.
	token      string
	stored     bool
	storedBody string
	answered   bool // a client got a final answer
	clients    int
}

type idemState struct {
	acct    accounts.Account
	apiKey  string
	keys    map[string]*idemKey
	order   []string
	byActor map[*Actor]*execution
	// leases are the lease ends of the claims each actor last wrote (a claim or a takeover
	// that committed).
	leases map[*Actor]int64
	last   int
	// pauses: some of the schedule's invocations outlive their deadline; lateOwner: the
	// first client's always do.
	pauses    bool
	lateOwner bool
}

// effects is the route's handler: it counts each execution of a key, writes one item (so that
// an execution spans a scheduling point, and can meet faults), and answers as the key says.
type effects struct{}

func (effects) post(w http.ResponseWriter, r *http.Request) error {
	a := ActorFrom(r.Context())
	if a == nil {
		return fmt.Errorf("the harness's route was called outside a schedule")
	}
	s := a.sched.owner
	st := s.State.(*idemState)
	k := st.keys[r.Header.Get(httpapi.HeaderIdempotencyKey)]
	nowMs := s.Env.Clock.Now().UnixMilli()
	for _, e := range k.execs {
		if !e.ended && nowMs < e.leaseMs {
			s.Violate("idempotency: key %s ran twice at once: execution %d started while execution %d (by %s) ran within its lease", k.key, len(k.execs)+1, e.n, e.actor.Name)
		}
	}
	if k.completed {
		s.Violate("idempotency: key %s ran again (execution %d) after its answer was stored", k.key, len(k.execs)+1)
	}
	e := &execution{n: len(k.execs) + 1, actor: a, leaseMs: st.leases[a]}
	k.execs = append(k.execs, e)
	st.byActor[a] = e
	defer func() { e.ended = true }()
	fn := s.Env.API()
	store := fn.HTTP.Keys.Store.(*idempotency.Table)
	_, err := store.DB.UpdateItem(r.Context(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(store.Table),
		Key:                       map[string]types.AttributeValue{"pk": dynamo.S("harness-effect#" + st.acct.ID + "#" + k.key)},
		UpdateExpression:          aws.String("ADD #n :one"),
		ExpressionAttributeNames:  map[string]string{"#n": "n"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": dynamo.N(1)},
	})
	if err != nil {
		return err
	}
	status := k.answer
	if k.fail503 && e.n == 1 {
		status = http.StatusServiceUnavailable
	}
	e.body = fmt.Sprintf(`{"key":%q,"execution":%d}`, k.key, e.n)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(e.body))
	return nil
}

// server is the route behind the account's authentication and the idempotency middleware.
func (p *Idempotency) server(env *Env) (http.Handler, error) {
	fn := env.API()
	table := []resources.Route{{
		Method: "POST", Path: effectPath, Function: "harness", Auth: resources.Account,
		Idempotency: resources.IdempotencyRetention,
	}}
	handlers := httpapi.Handlers{"POST " + effectPath: effects{}.post}
	srv := httpapi.NewServer("harness", table, handlers, httpapi.Authentication{Accounts: fn.Accounts}, env.Log)
	srv.Use(httpapi.Idempotency(fn.HTTP.Keys, env.Log))
	return srv.Handler()
}

// Start implements Pipeline.
func (p *Idempotency) Start(ctx context.Context, s *Schedule) error {
	r := s.Rand
	st := &idemState{keys: map[string]*idemKey{}, byActor: map[*Actor]*execution{}, leases: map[*Actor]int64{}}
	s.State = st
	acct, apiKey, err := s.Env.API().Accounts.Create(ctx, accounts.CreateInput{
		ID: fmt.Sprintf("acct_i%d", s.Seed), Plan: "free", Status: accounts.Active,
	})
	if err != nil {
		return fmt.Errorf("create account: %w", err)
	}
	st.acct, st.apiKey = acct, apiKey
	st.pauses = r.IntN(2) == 0
	handler, err := p.server(s.Env)
	if err != nil {
		return err
	}
	recordKey := map[string]*idemKey{} // record id → key
	n := 1 + r.IntN(maxKeys)
	// A late-owner schedule is one key whose first client is a process paused past its lease
	// while others take the key over: what the claim's fencing (its token, its expiry) is for.
	st.lateOwner = r.IntN(3) == 0
	jumpOneIn := leaseJumpOneIn
	if st.lateOwner {
		n, st.pauses, jumpOneIn = 1, true, leaseJumpOneIn/5
	}
	s.Note("idempotency: %d keys, late owner %v, pauses %v, fault rate %.2f", n, st.lateOwner, st.pauses, s.FaultRate)
	for i := range n {
		k := &idemKey{key: fmt.Sprintf("key-%d", i), answer: []int{http.StatusCreated, http.StatusCreated, http.StatusBadRequest}[r.IntN(3)], fail503: r.IntN(4) == 0}
		if st.lateOwner {
			k.fail503 = r.IntN(2) == 0
		}
		st.keys[k.key], st.order = k, append(st.order, k.key)
		recordKey[idempotency.RecordID("account:"+acct.ID, effectRoute, k.key)] = k
		for range 2 + r.IntN(maxClients-1) {
			p.client(s, st, handler, k)
		}
	}
	// The record of every key, as a model: who holds its claim (the token of the last claim
	// or takeover that committed), and whether it is completed. Only the current claim's
	// owner may complete or release it, and a takeover replaces only the claim it read.
	s.Observe(func(a *Actor, c Call, params any, committed bool) {
		if !committed || c.Table != resources.TableIdempotency {
			return
		}
		switch in := params.(type) {
		case *dynamodb.PutItemInput:
			k := recordKey[dynamo.Str(in.Item, "pk")]
			if k == nil {
				return
			}
			token := dynamo.Str(in.Item, "token")
			if old := in.ExpressionAttributeValues[":oldToken"]; old != nil {
				s.Count("claim-taken-over")
				if o := dynamo.Str(in.ExpressionAttributeValues, ":oldToken"); o != k.token {
					s.Violate("idempotency: key %s: a takeover by %s replaced claim %s, though it had read %s", k.key, a.Name, short(k.token), short(o))
				}
			} else if k.token != "" {
				s.Violate("idempotency: key %s: a claim by %s overwrote the key's record (claim %s, completed %v)", k.key, a.Name, short(k.token), k.stored)
			}
			k.token, k.stored = token, false
			st.leases[a] = dynamo.Int(in.Item, "leaseExpiresAtMs")
		case *dynamodb.UpdateItemInput:
			k := recordKey[dynamo.Str(in.Key, "pk")]
			if k == nil {
				return
			}
			if t := dynamo.Str(in.ExpressionAttributeValues, ":token"); t != k.token || k.stored {
				s.Violate("idempotency: key %s: %s stored its answer under claim %s; the record's claim is %s (completed %v)", k.key, a.Name, short(t), short(k.token), k.stored)
			}
			k.stored, k.completed = true, true
			if e := st.byActor[a]; e != nil {
				k.storedBody = e.body
			}
		case *dynamodb.DeleteItemInput:
			k := recordKey[dynamo.Str(in.Key, "pk")]
			if k == nil {
				return
			}
			if t := dynamo.Str(in.ExpressionAttributeValues, ":token"); t != k.token || k.stored {
				s.Violate("idempotency: key %s: %s released claim %s; the record's claim is %s (completed %v)", k.key, a.Name, short(t), short(k.token), k.stored)
			}
			k.token, k.stored = "", false
		}
	})
	s.beforeStep = func() {
		if !s.Quiet() && s.rng.IntN(jumpOneIn) == 0 {
			s.Count("lease-expiry")
			s.Env.Clock.Advance(idempotency.Lease + time.Second)
			s.Note("clock +%s", idempotency.Lease+time.Second)
		}
	}
	return nil
}

// client spawns one client sending the key's request until it gets a final answer (not 409,
// not 5xx) or gives up.
func (p *Idempotency) client(s *Schedule, st *idemState, handler http.Handler, k *idemKey) {
	k.clients++
	body := `{"answer":"as the key says"}`
	pauses := st.pauses
	first := st.lateOwner && k.clients == 1
	s.Spawn(fmt.Sprintf("client %s c%d", k.key, k.clients), "harness", func(ctx context.Context) error {
		for range maxKeyAttempts {
			ictx := s.Invoke(ctx, resources.FunctionAPI)
			if !s.Quiet() && pauses && (first || ActorFrom(ctx).Rand.IntN(3) == 0) {
				s.Pause(ictx)
			}
			req := httptest.NewRequestWithContext(ictx, http.MethodPost, effectPath, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+st.apiKey)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(httpapi.HeaderIdempotencyKey, k.key)
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			if ActorFrom(ctx).Dead() {
				return errKilled
			}
			if rec.Code == http.StatusConflict || rec.Code >= 500 {
				continue
			}
			got := rec.Body.String()
			if rec.Header().Get(httpapi.HeaderIdempotentReplayed) == "true" {
				if got != k.storedBody {
					s.Violate("idempotency: key %s replayed %s; the answer stored was %s", k.key, got, k.storedBody)
				}
			} else if e := st.byActor[ActorFrom(ctx)]; e == nil || got != e.body {
				s.Violate("idempotency: key %s answered %d %s without running it", k.key, rec.Code, got)
			}
			k.answered = true
			return nil
		}
		return fmt.Errorf("key %s: no final answer after %d attempts", k.key, maxKeyAttempts)
	}, nil)
}

// Idle implements Pipeline: once faults are over, keys still without an answer get another
// client, after the clock has moved past every claim's lease.
func (p *Idempotency) Idle(ctx context.Context, s *Schedule) bool {
	st := s.State.(*idemState)
	if !s.Quiet() || st.last >= maxLastClients {
		return false
	}
	handler, err := p.server(s.Env)
	if err != nil {
		s.Violate("harness: %v", err)
		return false
	}
	spawned := false
	for _, key := range st.order {
		if k := st.keys[key]; !k.answered {
			if !spawned {
				s.Env.Clock.Advance(idempotency.Lease + time.Second)
				s.Note("clock +%s (the last clients)", idempotency.Lease+time.Second)
			}
			// Two at once: they race to take over whatever claim was left behind.
			p.client(s, st, handler, k)
			p.client(s, st, handler, k)
			spawned = true
		}
	}
	if spawned {
		st.last++
	}
	return spawned
}

func short(token string) string {
	if len(token) > 6 {
		return token[:6]
	}
	if token == "" {
		return "(none)"
	}
	return token
}

// Check implements Pipeline.
func (p *Idempotency) Check(ctx context.Context, s *Schedule) []string {
	st := s.State.(*idemState)
	var v []string
	for _, key := range st.order {
		k := st.keys[key]
		if !k.answered {
			v = append(v, fmt.Sprintf("idempotency: key %s never got its answer", key))
		}
		if len(k.execs) == 0 && k.answered {
			v = append(v, fmt.Sprintf("idempotency: key %s was answered and never ran", key))
		}
	}
	return v
}
