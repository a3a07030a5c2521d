package stripe_test

import (
	"errors"
	"testing"
	"time"

	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

const secret = "whsec_test"

var event = []byte(`{"id":"evt_1","object":"event","api_version":"2019-02-19","created":1763208000,"type":"invoice.paid","data":{"object":{"id":"in_1","object":"invoice","customer":"cus_1"}}}`)

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
	tampered := append([]byte(nil), event...)
	tampered[len(tampered)-3] = 'X'
	if _, err := (stripewebhook.Verifier{Secret: secret}).Verify(tampered, stripewebhook.Sign(event, secret, now)); err == nil {
		t.Error("a tampered body verified")
	}
}
