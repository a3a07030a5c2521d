package idempotency

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestValidateKey(t *testing.T) {
	cases := []struct {
		name string
		key  string
		ok   bool
	}{
		{"uuid", "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{"one character", "k", true},
		{"longest", strings.Repeat("k", MaxKeyLength), true},
		{"spaces and punctuation", "order 42: retry #3 ~ ok", true},
		{"empty", "", false},
		{"one too long", strings.Repeat("k", MaxKeyLength+1), false},
		{"control character", "abc\tdef", false},
		{"delete character", "abc\x7f", false},
		{"non-ASCII", "clé", false},
		// HTTP joins a header sent twice with commas: "a,b" cannot be told from two keys.
		{"comma", "order-42,retry", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := ValidateKey(c.key)
			if (err == nil) != c.ok {
				t.Fatalf("ValidateKey(%q) = %v; want ok=%v", c.key, err, c.ok)
			}
			var ke *problem.InputError
			if err != nil && !errors.As(err, &ke) {
				t.Errorf("error %v is not refused input (a *problem.InputError)", err)
			}
		})
	}
}

func TestFingerprint_SameDocumentReserialisedMatches_AnyChangeDiffers(t *testing.T) {
	base := Fingerprint("POST", "/v1/accounts", "", []byte(`{"id":"acct_1","plan":"free","limits":{"events":3}}`))
	same := []struct {
		name string
		body string
	}{
		{"members reordered", `{"plan":"free","limits":{"events":3},"id":"acct_1"}`},
		{"whitespace", "{ \"id\" : \"acct_1\",\n \"plan\": \"free\", \"limits\": { \"events\": 3 } }\n"},
	}
	for _, c := range same {
		if got := Fingerprint("POST", "/v1/accounts", "", []byte(c.body)); got != base {
			t.Errorf("%s: fingerprint differs", c.name)
		}
	}
	differ := []struct {
		name                string
		method, path, query string
		body                string
	}{
		{"another value", "POST", "/v1/accounts", "", `{"id":"acct_1","plan":"plus","limits":{"events":3}}`},
		{"another number literal", "POST", "/v1/accounts", "", `{"id":"acct_1","plan":"free","limits":{"events":3.0}}`},
		{"an added member", "POST", "/v1/accounts", "", `{"id":"acct_1","plan":"free","limits":{"events":3},"status":"active"}`},
		{"another path", "POST", "/v1/accounts/acct_1", "", `{"id":"acct_1","plan":"free","limits":{"events":3}}`},
		{"another method", "PATCH", "/v1/accounts", "", `{"id":"acct_1","plan":"free","limits":{"events":3}}`},
		{"a query", "POST", "/v1/accounts", "x=1", `{"id":"acct_1","plan":"free","limits":{"events":3}}`},
	}
	for _, c := range differ {
		if got := Fingerprint(c.method, c.path, c.query, []byte(c.body)); got == base {
			t.Errorf("%s: fingerprint is the same", c.name)
		}
	}
	// A body the strict decoder refuses is compared byte for byte, never after a lenient
	// re-encoding that would merge it with another: the last duplicate winning, a lone surrogate
	// or an invalid byte becoming U+FFFD.
	for _, pair := range [][2]string{
		{`{"key":"s","amount":1,"amount":2}`, `{"key":"s","amount":2}`},
		{`{"key":"\ud800"}`, `{"key":"\udbff"}`},
		{"{\"key\":\"\xff\"}", "{\"key\":\"\xfe\"}"},
		{`{"key":"\ud800"}`, `{"key":"\ufffd"}`},
	} {
		if Fingerprint("POST", "/x", "", []byte(pair[0])) == Fingerprint("POST", "/x", "", []byte(pair[1])) {
			t.Errorf("%s and %s have one fingerprint", pair[0], pair[1])
		}
	}
	// A body that is not JSON is compared byte for byte.
	if Fingerprint("POST", "/x", "", []byte("a b")) == Fingerprint("POST", "/x", "", []byte("a  b")) {
		t.Error("two different non-JSON bodies have one fingerprint")
	}
	// Field boundaries cannot shift: ("/ab", "") and ("/a", "b") differ.
	if Fingerprint("POST", "/ab", "", nil) == Fingerprint("POST", "/a", "b", nil) {
		t.Error("fields run into each other")
	}
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	inFlight := func(leaseLeft time.Duration) *Record {
		return &Record{
			Fingerprint: "fp", State: InFlight, LeaseExpiresAtMs: now.Add(leaseLeft).UnixMilli(),
			ExpiresAt: now.Add(DefaultRetention).Unix(),
		}
	}
	completed := &Record{Fingerprint: "fp", State: Completed, LeaseExpiresAtMs: now.Add(-time.Hour).UnixMilli(), ExpiresAt: now.Add(time.Hour).Unix()}
	retentionOver := &Record{Fingerprint: "fp", State: Completed, ExpiresAt: now.Unix()}
	cases := []struct {
		name        string
		current     *Record
		fingerprint string
		want        Decision
	}{
		{"no record", nil, "fp", Run},
		{"completed, same request", completed, "fp", Replay},
		{"completed, another request", completed, "other", Mismatch},
		{"completed long after the lease: still a replay", completed, "fp", Replay},
		{"in flight within the lease", inFlight(time.Second), "fp", Wait},
		{"in flight, another request", inFlight(time.Second), "other", Mismatch},
		{"in flight, lease ends now", inFlight(0), "fp", TakeOver},
		{"in flight past the lease", inFlight(-time.Second), "fp", TakeOver},
		{"in flight past the lease, another request: the key still belongs to the first", inFlight(-time.Second), "other", Mismatch},
		{"retention over, same request", retentionOver, "fp", TakeOver},
		{"retention over, another request: the key is free again", retentionOver, "other", TakeOver},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Decide(c.current, c.fingerprint, now); got != c.want {
				t.Errorf("Decide = %s; want %s", got, c.want)
			}
		})
	}
}

func TestRetain_StoresAnswersButNotFailuresToRun(t *testing.T) {
	for status, want := range map[int]bool{
		200: true, 201: true, 202: true, 400: true, 402: true, 404: true, 409: true, 413: true, 415: true, 422: true,
		429: false, 500: false, 502: false, 503: false,
	} {
		if got := Retain(status); got != want {
			t.Errorf("Retain(%d) = %v; want %v", status, got, want)
		}
	}
}

func TestRecordID_DistinctPerScopeRouteAndKey_AndHidesTheKey(t *testing.T) {
	key := "my-secret-key-123"
	ids := map[string]string{
		"base":      RecordID("account:a", "POST /v1/events", key),
		"scope":     RecordID("account:b", "POST /v1/events", key),
		"route":     RecordID("account:a", "POST /v1/events/batch", key),
		"key":       RecordID("account:a", "POST /v1/events", key+"x"),
		"operator":  RecordID("operator", "POST /v1/events", key),
		"shifted":   RecordID("account:aP", "OST /v1/events", key),
		"unchanged": RecordID("account:a", "POST /v1/events", key),
	}
	seen := map[string]string{}
	for name, id := range ids {
		if strings.Contains(id, key) {
			t.Errorf("%s: the id holds the key", name)
		}
		if name == "unchanged" {
			continue
		}
		if other, dup := seen[id]; dup {
			t.Errorf("%s and %s share an id", name, other)
		}
		seen[id] = name
	}
	if ids["unchanged"] != ids["base"] {
		t.Error("the id is not stable")
	}
}

func TestSeal_RoundTripsAndOpensOnlyUnderTheSameKeyAndRecord(t *testing.T) {
	body := []byte(`{"id":"acct_1","apiKey":"fk_live_secret"}`)
	s, err := newSealer("operator", "POST /v1/accounts", "k1")
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := s.seal(body)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("fk_live_secret")) {
		t.Fatal("the sealed answer holds the secret in the clear")
	}
	got, err := s.open(sealed)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("open = %q, %v", got, err)
	}
	for name, other := range map[string][3]string{
		"another key":   {"operator", "POST /v1/accounts", "k2"},
		"another scope": {"account:a", "POST /v1/accounts", "k1"},
		"another route": {"operator", "PATCH /v1/accounts/{id}", "k1"},
	} {
		o, err := newSealer(other[0], other[1], other[2])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.open(sealed); err == nil {
			t.Errorf("%s opens the answer", name)
		}
	}
	if _, err := s.open(sealed[:5]); err == nil {
		t.Error("a truncated answer opens")
	}
	empty, _ := s.seal(nil)
	if got, err := s.open(empty); err != nil || len(got) != 0 {
		t.Errorf("empty body: %q, %v", got, err)
	}
}

func TestExpressions_NameTheDeclaredTTLAttribute(t *testing.T) {
	table, ok := resources.TableByLogical(resources.TableIdempotency)
	if !ok || table.TTLAttribute != attrExpiresAt {
		t.Fatalf("the idempotency table's TTL attribute is %q; records write %q", table.TTLAttribute, attrExpiresAt)
	}
	for _, expr := range []string{takeOverCondition, completeUpdate} {
		if !strings.Contains(expr, "#"+attrExpiresAt) {
			t.Errorf("%q does not use the TTL attribute", expr)
		}
	}
}

func TestExpiresAt_NeverEarly(t *testing.T) {
	now := time.Date(2026, 11, 15, 12, 0, 0, 500_000_000, time.UTC)
	got := expiresAt(now, time.Hour)
	if time.Unix(got, 0).Before(now.Add(time.Hour)) {
		t.Errorf("expiresAt %d is before %s", got, now.Add(time.Hour))
	}
}
