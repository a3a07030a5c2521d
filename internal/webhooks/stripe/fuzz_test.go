package stripe_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	stripewebhook "github.com/ferrymeter/ferry/internal/webhooks/stripe"
)

// seedDir holds the readable seeds of FuzzStripeSignature: one Stripe-Signature header per file,
// where {t} stands for the current Unix time and {v1} for the valid signature at that time.
const seedDir = "../../../testdata/fuzz/stripe-signature"

// FuzzStripeSignature reads fuzzed Stripe-Signature headers over a valid event. Whatever the
// header, Verify answers without panicking; a header it refuses is an UnverifiableError (the
// body is a valid event, so the signature is what failed); and a header it accepts carries, by a
// reading independent of stripe-go's, a t element no older than Tolerance and a v1 element that
// is the HMAC-SHA256 of "t.body" under the secret. The same holds with the genuine header
// appended after the fuzzed one, as a proxy joining two header lines would send it.
func FuzzStripeSignature(f *testing.F) {
	entries, err := os.ReadDir(seedDir)
	if err != nil || len(entries) == 0 {
		f.Fatalf("seeds in %s: %v", seedDir, err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(seedDir, e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(bytes.TrimRight(data, "\n")))
	}
	v := stripewebhook.Verifier{Secret: secret}
	f.Fuzz(func(t *testing.T, header string) {
		now := time.Now()
		ts := strconv.FormatInt(now.Unix(), 10)
		header = strings.NewReplacer("{t}", ts, "{v1}", signature(ts, event)).Replace(header)
		for _, h := range []string{header, header + "," + stripewebhook.Sign(event, secret, now)} {
			got, err := v.Verify(event, h)
			if err != nil {
				var u *stripewebhook.UnverifiableError
				if !errors.As(err, &u) {
					t.Fatalf("header %q: %v; want an unverifiable delivery", h, err)
				}
				continue
			}
			if !genuine(h, event, now) {
				t.Fatalf("header %q verified, but it carries no valid recent v1 signature", h)
			}
			if got.EventID != "evt_1" || !bytes.Equal(got.Payload, event) {
				t.Fatalf("header %q verified as %+v", h, got)
			}
		}
	})
}

// signature is the hex HMAC-SHA256 of "ts.body" under the secret: Stripe's v1 scheme.
func signature(ts string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// genuine reports whether header has a t element within Tolerance of now (or after it) and a v1
// element that signs body at that t.
func genuine(header string, body []byte, now time.Time) bool {
	var stamps, sigs []string
	for _, pair := range strings.Split(header, ",") {
		name, value, _ := strings.Cut(pair, "=")
		switch name {
		case "t":
			stamps = append(stamps, value)
		case "v1":
			sigs = append(sigs, strings.ToLower(value))
		}
	}
	for _, st := range stamps {
		n, err := strconv.ParseInt(st, 10, 64)
		if err != nil || now.Sub(time.Unix(n, 0)) > stripewebhook.Tolerance {
			continue
		}
		want := signature(strconv.FormatInt(n, 10), body)
		for _, s := range sigs {
			if s == want {
				return true
			}
		}
	}
	return false
}
