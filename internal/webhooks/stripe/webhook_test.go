package stripe_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

const secret = "whsec_test"

var event = []byte(`{"id":"evt_1","object":"event","api_version":"2019-02-19","created":1763208000,"type":"invoice.paid","data":{"object":{"id":"in_1","object":"invoice","customer":"cus_1"}}}`)

// A signature's future is bounded as a Kinde token's is.
func TestMaxClockSkew_IsFiveMinutes(t *testing.T) {
	if stripewebhook.MaxClockSkew != 5*time.Minute {
		t.Errorf("MaxClockSkew %s, want 5m (Kinde's)", stripewebhook.MaxClockSkew)
	}
}

func TestVerify_AcceptsWhatSignVerifies_AnyAPIVersion(t *testing.T) {
	got, err := stripewebhook.Verifier{Secret: secret}.Verify(event, stripewebhook.Sign(event, secret, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if got.EventID != "evt_1" || got.Type != "invoice.paid" || got.APIVersion != "2019-02-19" || got.Created.Ms() != 1763208000000 {
		t.Errorf("verified %+v", got)
	}
}

func TestVerify_RefusesEveryBadSignature(t *testing.T) {
	now := time.Now()
	for name, header := range map[string]string{
		"no header":         "",
		"malformed header":  "t=abc,v1=00",
		"another secret":    stripewebhook.Sign(event, "whsec_other", now),
		"stale timestamp":   stripewebhook.Sign(event, secret, now.Add(-stripewebhook.Tolerance-time.Second)),
		"no v1 signature":   "t=1763208000",
		"v0 signature only": "t=1763208000,v0=deadbeef",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := stripewebhook.Verifier{Secret: secret}.Verify(event, header)
			var u *stripewebhook.UnverifiableError
			if !errors.As(err, &u) {
				t.Errorf("err %v; want unverifiable", err)
			}
		})
	}
	// stripe-go refuses only signatures that are too old; one dated ahead by more than clocks
	// differ is refused here, as Kinde's tokens are, and one within the skew is taken.
	for name, c := range map[string]struct {
		at time.Duration
		ok bool
	}{
		"an hour ahead":             {time.Hour, false},
		"a year ahead":              {365 * 24 * time.Hour, false},
		"just past the skew":        {stripewebhook.MaxClockSkew + time.Second, false},
		"within the skew":           {stripewebhook.MaxClockSkew - time.Second, true},
		"now":                       {0, true},
		"a signature rolled: ahead": {time.Hour, false},
	} {
		t.Run(name, func(t *testing.T) {
			header := stripewebhook.Sign(event, secret, now.Add(c.at))
			if name == "a signature rolled: ahead" {
				// Two v1 signatures while a secret rolls; the timestamp is the same one.
				header += ",v1=" + strings.Repeat("ab", 32)
			}
			_, err := stripewebhook.Verifier{Secret: secret, Now: func() time.Time { return now }}.Verify(event, header)
			var u *stripewebhook.UnverifiableError
			if c.ok && err != nil || !c.ok && (!errors.As(err, &u) || !strings.Contains(u.Reason, "in the future")) {
				t.Errorf("err %v; want accepted %v", err, c.ok)
			}
		})
	}
	tampered := append([]byte(nil), event...)
	tampered[len(tampered)-3] = 'X'
	if _, err := (stripewebhook.Verifier{Secret: secret}).Verify(tampered, stripewebhook.Sign(event, secret, now)); err == nil {
		t.Error("a tampered body verified")
	}
}
