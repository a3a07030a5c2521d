package httpapi

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/accounts/plans"
	"github.com/ferrymeter/ferry/internal/holds"
	"github.com/ferrymeter/ferry/internal/holds/limits"
	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ingest"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/platform/idempotency"
	"github.com/ferrymeter/ferry/internal/platform/jsonbody"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden from what the code answers")

// problemsGolden holds every kind of error's answer as clients see it — status, Retry-After,
// WWW-Authenticate, Content-Type and the exact body — one line per case. It was first written
// from the answers of the switches the error table replaced, so the table answers byte for byte
// what they did.
const problemsGolden = "../../../testdata/golden/problems.golden"

func TestProblems_EveryKindAnswersAsTheGoldenFileSays(t *testing.T) {
	catalog := plans.Default()
	cases := []struct {
		name string
		err  error
	}{
		{"accounts invalid", (accounts.CreateInput{ID: "bad id!", Plan: "gold", Status: "x"}).Validate(catalog)},
		{"event invalid", func() error {
			_, err := event.Parse([]byte(`{"specversion":"1.0","source":"/x","type":"t"}`))
			return err
		}()},
		{"batch not array", func() error {
			_, err := (&ingest.Service{}).AcceptBatch(context.Background(), accounts.Account{}, []byte(`{}`))
			return err
		}()},
		{"idempotency key", idempotency.ValidateKey("")},
		{"idempotency in flight", fmt.Errorf("x: %w", idempotency.ErrInFlight)},
		{"idempotency reused", idempotency.ErrKeyReused},
		{"idempotency unavailable", idempotency.ErrUnavailable},
		{"ingest refused", &ingest.RefusedError{Detail: "The account has used its 3 events for this cycle.", Remaining: 0, Limit: 3}},
		{"ingest too large", fmt.Errorf("%w: the body is over %d bytes", ingest.ErrTooLarge, 65536)},
		{"ingest queue", fmt.Errorf("%w: %v", ingest.ErrQueueUnavailable, errors.New("boom"))},
		{"unauthenticated", accounts.ErrUnauthenticated},
		{"account not found", accounts.ErrNotFound},
		{"ledger not found", ledger.ErrNotFound},
		{"account exists", accounts.ErrExists},
		{"agreement", accounts.ErrAgreementLocked},
		{"holds invalid", (holds.ReserveInput{Key: "", Feature: "nope", Amount: 0}).Validate(catalog)},
		{"holds refused", &holds.RefusedError{Needed: 90000, Remaining: 68800, Limit: 100000}},
		{"holds rate", &holds.RateLimitedError{PerMinute: 120, RetryAfter: 37 * time.Second}},
		{"holds not running", &holds.NotRunningError{HoldID: "hold_x", Status: holds.Settled}},
		{"holds key reused", &holds.KeyReusedError{Detail: "The key \"k\" already names a hold of 5 tokens; a repeated key must repeat the request."}},
		{"limit unknown", &limits.UnknownError{CustomerID: "c", Reason: "The limit source is misconfigured: x"}},
		{"hold not found", holds.ErrNotFound},
		{"busy", holds.ErrBusy},
		{"internal", errors.New("secret cause")},
		{"bad request", BadRequest("The body is not valid JSON.")},
		{"not found handler", NotFound("No route GET /x.")},
		{"unauthorized handler", Unauthorized("This route needs the operator key.")},
		{"link taken", fmt.Errorf("update: %w", &accounts.LinkTakenError{Link: accounts.StripeCustomer, ID: "cus_A1"})},
		{"link contended", accounts.ErrLinkContended},
		{"account inactive", fmt.Errorf("reserve: %w", accounts.ErrInactive)},
		{"ingest outcome unknown", fmt.Errorf("%w: %v", ingest.ErrOutcomeUnknown, errors.New("checksum mismatch"))},
		{"strict body", BadRequest(`"amount" is required`)},
		{"strict body, a route without fields", strictRefusal(`{"all":true}`, &struct{}{})},
		{"strict body, an empty string", strictRefusal(`{"cycle":""}`, &struct {
			Cycle string `json:"cycle"`
		}{})},
		{"strict body, above 2^53-1", strictRefusal(`{"amount":9007199254740992}`, &struct {
			Amount int64 `json:"amount"`
		}{})},
		{"content coding", checkContentEncoding(&http.Request{Header: http.Header{"Content-Encoding": {"gzip"}}})},
		{"gateway request timeout", GatewayProblem(408)},
		{"gateway body unreadable", GatewayProblem(400)},
		{"request head", RequestHeadProblem(400)},
		{"request head too large", RequestHeadProblem(431)},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var got strings.Builder
	for _, c := range cases {
		w := httptest.NewRecorder()
		writeProblem(w, httptest.NewRequest("GET", "/", nil), log, c.err)
		fmt.Fprintf(&got, "%s\t%d\t%q\t%q\t%q\t%s", c.name, w.Code, w.Header().Get("Retry-After"),
			w.Header().Get("WWW-Authenticate"), w.Header().Get("Content-Type"), w.Body.String())
	}
	if *update {
		if err := os.WriteFile(problemsGolden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(problemsGolden)
	if err != nil {
		t.Fatal(err)
	}
	gotLines, wantLines := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(gotLines), len(wantLines)) {
		var g, w string
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, g, w)
		}
	}
}

// strictRefusal is the answer decodeJSON gives to a body the strict decoder refuses.
func strictRefusal(body string, into any) error {
	return BadRequest(jsonbody.Decode([]byte(body), into).Error())
}

// The table answers every kind, and no two kinds share a problem type unless they mean the same
// to a client.
func TestProblems_TheTableAnswersEveryKind(t *testing.T) {
	for _, k := range problem.Kinds() {
		a, ok := answers[k]
		if !ok {
			t.Errorf("kind %s has no row in the error table", k)
			continue
		}
		if a.slug == "" || a.title == "" || a.status < 400 || a.status > 599 {
			t.Errorf("kind %s: row %+v is incomplete", k, a)
		}
	}
	if len(answers) != len(problem.Kinds()) {
		t.Errorf("the table has %d rows for %d kinds", len(answers), len(problem.Kinds()))
	}
}
