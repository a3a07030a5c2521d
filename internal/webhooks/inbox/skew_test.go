package inbox_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Kinde's clocks may differ from Ferry's by five minutes, by value, and no more: a token sent up
// to five minutes in the future, or up to five minutes past its exp or before its nbf, is taken;
// a second further is refused. (A skew of fifty minutes would let a token dated most of an hour
// ahead through.)
func TestKindeWebhook_ClockSkewIsFiveMinutes(t *testing.T) {
	const skew = 5 * time.Minute
	h := newHarness(t)
	h.account(t, "acct_1", "customer_1", "")
	sign := h.Signer(t)
	now := h.Clock.Now()
	n := 0
	token := func(claim string, v any) string {
		n++
		e := kindeEvent{id: fmt.Sprintf("event_%d", n), typ: "customer.payment_failed", at: now.Add(-time.Minute), customer: "customer_1"}
		c := e.claims(now)
		c[claim] = v
		return forge(t, jwt.SigningMethodRS256, sign.PrivateKey(), sign.KeyID(), c)
	}
	for _, c := range []struct {
		name   string
		token  string
		status int
		reason string
	}{
		{"sent just under five minutes ahead", token("timestamp", kindeTime(now.Add(skew-time.Second))), http.StatusOK, ""},
		{"sent a second past five minutes ahead", token("timestamp", kindeTime(now.Add(skew+time.Second))), http.StatusUnauthorized, "future"},
		{"expired just under five minutes ago", token("exp", now.Add(-skew+time.Second).Unix()), http.StatusOK, ""},
		{"expired a second past five minutes ago", token("exp", now.Add(-skew-time.Second).Unix()), http.StatusUnauthorized, "expired"},
		{"valid from just under five minutes on", token("nbf", now.Add(skew-time.Second).Unix()), http.StatusOK, ""},
		{"valid from a second past five minutes on", token("nbf", now.Add(skew+time.Second).Unix()), http.StatusUnauthorized, "not valid yet"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.send(t, http.MethodPost, "/v1/webhooks/kinde", []byte(c.token), "Content-Type", "application/jwt")
			if r.Status != c.status || !strings.Contains(string(r.Body), c.reason) {
				t.Errorf("%d %s; want %d saying %q", r.Status, r.Body, c.status, c.reason)
			}
		})
	}
}
