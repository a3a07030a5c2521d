package ferry

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// holdScript answers a reservation, any charges and a settlement the way Ferry does.
func holdScript() *script {
	return &script{answers: []func(http.ResponseWriter, *http.Request, []byte){
		func(w http.ResponseWriter, r *http.Request, body []byte) {
			switch r.URL.Path {
			case "/v1/holds":
				jsonAnswer(201, `{"id":"hold_1","key":"job","feature":"tokens","amount":100,"used":0,"status":"RUNNING","leaseExpiresAt":"2026-11-30T00:00:00Z"}`)(w, r, body)
			case "/v1/holds/hold_1/charges":
				var c ChargeRequest
				json.Unmarshal(body, &c)
				jsonAnswer(200, `{"charged":`+itoa(c.Amount)+`,"capped":false,"used":`+itoa(c.Amount)+`,"amount":100,"status":"RUNNING","leaseExpiresAt":"2026-11-30T00:00:00Z"}`)(w, r, body)
			case "/v1/holds/hold_1/settle":
				jsonAnswer(200, `{"id":"hold_1","status":"SETTLED","charged":40,"released":60}`)(w, r, body)
			default:
				problemAnswer(404, "not-found", "")(w, r, body)
			}
		},
	}}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func paths(s *script) []string {
	var out []string
	for _, r := range s.recorded() {
		out = append(out, r.path)
	}
	return out
}

func TestRunUnderHold_ChargesWhatTheJobReportsThenSettles(t *testing.T) {
	s := holdScript()
	c := newTestClient(t, s, Config{})
	st, err := c.RunUnderHold(context.Background(), CreateHoldRequest{Key: "job", Feature: "tokens", Amount: 100},
		func(ctx context.Context, j *Job) (int, error) { return 40, nil })
	if err != nil || st == nil || st.Status != SettlementStatusSETTLED {
		t.Fatalf("settlement %+v, err %v", st, err)
	}
	want := []string{"/v1/holds", "/v1/holds/hold_1/charges", "/v1/holds/hold_1/settle"}
	if got := paths(s); len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("requests %v, want %v", got, want)
	}
}

func TestRunUnderHold_JobFails_StillChargesAndSettles(t *testing.T) {
	s := holdScript()
	c := newTestClient(t, s, Config{})
	boom := errors.New("model crashed")
	st, err := c.RunUnderHold(context.Background(), CreateHoldRequest{Key: "job", Feature: "tokens", Amount: 100},
		func(ctx context.Context, j *Job) (int, error) { return 10, boom })
	if !errors.Is(err, boom) || st == nil {
		t.Fatalf("settlement %+v, err %v; want the job's error and a settlement", st, err)
	}
	if got := paths(s); len(got) != 3 || got[2] != "/v1/holds/hold_1/settle" {
		t.Fatalf("requests %v", got)
	}
}

func TestRunUnderHold_ContextCancelled_StillSettles(t *testing.T) {
	s := holdScript()
	c := newTestClient(t, s, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.RunUnderHold(ctx, CreateHoldRequest{Key: "job", Feature: "tokens", Amount: 100},
		func(ctx context.Context, j *Job) (int, error) {
			if _, err := j.Charge(ctx, "step-1", 40); err != nil {
				return 0, err
			}
			cancel()
			<-ctx.Done()
			return 40, ctx.Err()
		})
	if !errors.Is(err, context.Canceled) || st == nil {
		t.Fatalf("settlement %+v, err %v", st, err)
	}
	got := paths(s)
	// Reserve, the job's own step, and the settlement; nothing more to charge (40 recorded).
	if len(got) != 3 || got[2] != "/v1/holds/hold_1/settle" {
		t.Fatalf("requests %v", got)
	}
}

func TestRunUnderHold_JobPanics_SettlesThenPanics(t *testing.T) {
	s := holdScript()
	c := newTestClient(t, s, Config{})
	defer func() {
		if recover() == nil {
			t.Fatal("the panic was swallowed")
		}
		if got := paths(s); len(got) != 2 || got[1] != "/v1/holds/hold_1/settle" {
			t.Fatalf("requests %v", got)
		}
	}()
	c.RunUnderHold(context.Background(), CreateHoldRequest{Key: "job", Feature: "tokens", Amount: 100},
		func(ctx context.Context, j *Job) (int, error) { panic("bug") })
}

func TestRunUnderHold_Refused_RunsNothing(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request, []byte){problemAnswer(402, "limit-reached", `,"remaining":5,"needed":100`)}}
	c := newTestClient(t, s, Config{})
	ran := false
	_, err := c.RunUnderHold(context.Background(), CreateHoldRequest{Key: "job", Feature: "tokens", Amount: 100},
		func(ctx context.Context, j *Job) (int, error) { ran = true; return 0, nil })
	var lr *LimitReachedError
	if !errors.As(err, &lr) || lr.Remaining != 5 || ran {
		t.Fatalf("err %v, ran %v", err, ran)
	}
}

// Signatures made by the Standard Webhooks library itself verify; a changed body, another
// secret or an old timestamp do not.
func TestWebhookVerifier_LibrarySignatures(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	signer, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"type":"usage.threshold","data":{"account":"acct_1","percent":80}}`)
	sign := func(at time.Time, payload []byte) http.Header {
		sig, err := signer.Sign("msg_1", at, payload)
		if err != nil {
			t.Fatal(err)
		}
		return http.Header{"Webhook-Id": {"msg_1"}, "Webhook-Timestamp": {itoa(int(at.Unix()))}, "Webhook-Signature": {sig}}
	}
	v, err := NewWebhookVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(body, sign(time.Now(), body)); err != nil {
		t.Fatalf("a fresh signature: %v", err)
	}
	if err := v.Verify([]byte(`{"type":"usage.threshold","data":{"account":"acct_2","percent":80}}`), sign(time.Now(), body)); err == nil {
		t.Fatal("a changed body verified")
	}
	if err := v.Verify(body, sign(time.Now().Add(-10*time.Minute), body)); err == nil {
		t.Fatal("a ten-minute-old signature verified")
	}
	other, _ := NewWebhookVerifier("whsec_" + "c2VjcmV0LW9mLWFub3RoZXItZW5kcG9pbnQ=")
	if err := other.Verify(body, sign(time.Now(), body)); err == nil {
		t.Fatal("another endpoint's secret verified")
	}
	if _, err := NewWebhookVerifier(""); err == nil {
		t.Fatal("an empty secret was taken")
	}
}
