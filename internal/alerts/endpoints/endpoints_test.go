package endpoints_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/ferrymeter/ferry/internal/alerts/endpoints"
	"github.com/ferrymeter/ferry/internal/alerts/notify"
	"github.com/ferrymeter/ferry/internal/alerts/send"
	"github.com/ferrymeter/ferry/internal/devkit/testenv"
	"github.com/ferrymeter/ferry/internal/platform/problem"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// production is the URL policy of a deployed stack; dev is ferry dev's.
var (
	production = send.Policy{}
	dev        = send.Policy{AllowLoopback: true}
)

const t0 = int64(1_790_000_000_000) // an instant in 2026, in epoch milliseconds

func newStore(t *testing.T) *endpoints.Store {
	t.Helper()
	env := testenv.New(t)
	return &endpoints.Store{DB: env.Clients.DynamoDB, Table: env.Names.Table(resources.TableWebhookEndpoints)}
}

func register(t *testing.T, s *endpoints.Store, url string) (endpoints.Endpoint, string) {
	t.Helper()
	e, secret, err := s.Create(context.Background(), endpoints.Registration{URL: url}, production, t0)
	if err != nil {
		t.Fatalf("create %s: %v", url, err)
	}
	return e, secret
}

// The limits are part of the contract (the API document and docs/alerts.md state them).
func TestLimits_AreTheDocumentedOnes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"RotationOverlap", int64(endpoints.RotationOverlap), int64(24 * time.Hour)},
		{"SecretBytes", endpoints.SecretBytes, 32},
		{"MaxAccounts", endpoints.MaxAccounts, 100},
		{"MaxDescriptionChars", endpoints.MaxDescriptionChars, 256},
		{"MaxEndpoints", endpoints.MaxEndpoints, 100},
		{"MaxListedKinds", endpoints.MaxListedKinds, 16},
		{"MaxUpdateAttempts", endpoints.MaxUpdateAttempts, 4},
		{"send.MaxSecrets", send.MaxSecrets, 2},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

// A registration hears every problem at once, each named by its field.
func TestRegistration_Validate_NamesEveryProblemAtOnce(t *testing.T) {
	long := strings.Repeat("é", endpoints.MaxDescriptionChars+1)
	many := make([]string, endpoints.MaxAccounts+1)
	for i := range many {
		many[i] = "acct_" + strings.Repeat("x", i%5+1) + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	for _, c := range []struct {
		name   string
		reg    endpoints.Registration
		policy send.Policy
		want   []string // each a substring of one problem, in order
	}{
		{"valid, every kind and account", endpoints.Registration{URL: "https://hooks.example.com/ferry"}, production, nil},
		{"valid, chosen kinds and accounts", endpoints.Registration{URL: "https://hooks.example.com/ferry?tenant=7",
			Kinds: []string{"limit.reached", "threshold.crossed"}, Accounts: []string{"acct_1", "B-2"}, Description: "billing team"}, production, nil},
		{"valid, a description of exactly the bound", endpoints.Registration{URL: "https://h.example.com",
			Description: strings.Repeat("é", endpoints.MaxDescriptionChars)}, production, nil},
		{"loopback http under ferry dev", endpoints.Registration{URL: "http://127.0.0.1:9000/hook"}, dev, nil},
		{"no url", endpoints.Registration{}, production, []string{"url is required"}},
		{"loopback http in AWS", endpoints.Registration{URL: "http://127.0.0.1:9000/hook"}, production,
			[]string{"url uses http to a loopback host", "url has host 127.0.0.1"}},
		{"everything wrong at once", endpoints.Registration{
			URL:         "ftp://user:pw@10.0.0.1/x#frag",
			Kinds:       []string{"threshold.crossed", "invoice.paid", "threshold.crossed"},
			Accounts:    []string{"acct_1", "bad#id", "acct_1", ""},
			Description: long,
		}, production, []string{
			`url uses scheme "ftp"`, "url carries user information", "url carries a fragment", "url has host 10.0.0.1",
			`kinds[1] "invoice.paid" is not a kind Ferry sends (` + everyKind() + `)`, `kinds[2] repeats "threshold.crossed"`,
			`accounts[1] "bad#id" is not an account id`, `accounts[2] repeats "acct_1"`, `accounts[3] "" is not an account id`,
			"description is 257 characters long; at most 256",
		}},
		{"too many accounts", endpoints.Registration{URL: "https://h.example.com", Accounts: many}, production,
			[]string{"accounts lists 101 accounts; at most 100"}},
		{"too many kinds", endpoints.Registration{URL: "https://h.example.com", Kinds: make([]string, endpoints.MaxListedKinds+1)}, production,
			[]string{"kinds lists 17 kinds"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.reg.Validate(c.policy)
			if c.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ie *problem.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("got %v, want an input error", err)
			}
			if len(ie.Problems) != len(c.want) {
				t.Fatalf("%d problems, want %d: %q", len(ie.Problems), len(c.want), ie.Problems)
			}
			for i, w := range c.want {
				if !strings.Contains(ie.Problems[i], w) {
					t.Errorf("problem %d is %q, want it to say %q", i, ie.Problems[i], w)
				}
			}
			if kind, pub := problem.Describe(err); kind != problem.Invalid || !reflect.DeepEqual(pub.Facts["errors"], ie.Problems) {
				t.Errorf("described as %v with facts %v; want invalid, every problem listed", kind, pub.Facts)
			}
		})
	}
}

// A patch is checked like a registration, field by field, and one that sets nothing is refused.
func TestPatch_Validate(t *testing.T) {
	empty, bad, none := "", "http://example.com/x", []string{}
	kinds := []string{"limit.reached", "limit.reached"}
	off := true
	if err := (endpoints.Patch{}).Validate(production); err == nil || !strings.Contains(err.Error(), "sets nothing") {
		t.Errorf("an empty patch: %v, want refused", err)
	}
	if err := (endpoints.Patch{Kinds: &none, Accounts: &none, Description: &empty, Disabled: &off}).Validate(production); err != nil {
		t.Errorf("clearing the lists and the description: %v", err)
	}
	err := (endpoints.Patch{URL: &bad, Kinds: &kinds}).Validate(production)
	var ie *problem.InputError
	if !errors.As(err, &ie) || len(ie.Problems) != 2 || !strings.HasPrefix(ie.Problems[0], `url uses scheme "http"`) || !strings.Contains(ie.Problems[1], "repeats") {
		t.Errorf("a bad url and a repeated kind: %v", err)
	}
	if err := (endpoints.Patch{URL: &empty}).Validate(production); err == nil {
		t.Error("an empty url was taken")
	}
}

// An endpoint wants a notification of a kind it chose (or any kind) for an account it chose (or
// any account); a notification of no account goes only to the endpoints for every account.
func TestWants_KindsAndAccounts(t *testing.T) {
	every := endpoints.Endpoint{}
	deadOnly := endpoints.Endpoint{Kinds: []string{string(notify.BillingEventDead)}}
	forAcct1 := endpoints.Endpoint{Accounts: []string{"acct_1"}}
	off := endpoints.Endpoint{Disabled: true}
	for _, c := range []struct {
		name    string
		e       endpoints.Endpoint
		kind    notify.Kind
		account string
		want    bool
	}{
		{"every kind and account", every, notify.LimitReached, "acct_2", true},
		{"every kind and account, no account", every, notify.BillingEventDead, "", true},
		{"its kind", deadOnly, notify.BillingEventDead, "acct_1", true},
		{"its kind, no account", deadOnly, notify.BillingEventDead, "", true},
		{"another kind", deadOnly, notify.LimitReached, "acct_1", false},
		{"its account", forAcct1, notify.BillingEventDead, "acct_1", true},
		{"another account", forAcct1, notify.BillingEventDead, "acct_2", false},
		{"chosen accounts, no account", forAcct1, notify.BillingEventDead, "", false},
		{"disabled", off, notify.BillingEventDead, "", false},
	} {
		if got := c.e.Wants(c.kind, c.account); got != c.want {
			t.Errorf("%s: Wants(%s, %q) = %v; want %v", c.name, c.kind, c.account, got, c.want)
		}
	}
}

// The secret is "whsec_" and the base64 of 32 random bytes; the Standard Webhooks library takes
// it and verifies what it signs. The secret is in the returned endpoint and stored for the
// notifier, and only Create ever returns it to a caller.
func TestCreate_MintsAnIDAndASecretTheLibrariesTake(t *testing.T) {
	s := newStore(t)
	reg := endpoints.Registration{URL: "https://Hooks.Example.com:8443/a/../Ferry?x=1&x=2", Kinds: []string{"limit.reached", "threshold.crossed"},
		Accounts: []string{"zeta", "alpha"}, Description: "  as typed  "}
	e, secret, err := s.Create(context.Background(), reg, production, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !endpoints.ValidID(e.ID) || !strings.HasPrefix(e.ID, "we_") {
		t.Errorf("id %q", e.ID)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if !strings.HasPrefix(secret, "whsec_") || err != nil || len(key) != endpoints.SecretBytes {
		t.Fatalf("secret %q: %d bytes (%v)", secret, len(key), err)
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatalf("the Go library refuses the secret: %v", err)
	}
	at := time.Now()
	sig, err := wh.Sign("ntf_x", at, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", "ntf_x")
	h.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
	h.Set("webhook-signature", sig)
	if err := wh.Verify([]byte(`{}`), h); err != nil {
		t.Errorf("verify: %v", err)
	}
	got, err := s.Get(context.Background(), e.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Stored as given: the URL, the lists' order, the description's spaces.
	want := endpoints.Endpoint{ID: e.ID, URL: reg.URL, Kinds: reg.Kinds, Accounts: reg.Accounts, Description: reg.Description,
		Secrets: []endpoints.Secret{{Value: secret, CreatedAtMs: t0}}, CreatedAtMs: t0, UpdatedAtMs: t0, Rev: 1}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(e, want) {
		t.Errorf("stored %+v\nreturned %+v\nwant %+v", got, e, want)
	}
	if other, second := register(t, s, "https://hooks.example.com/two"); other.ID == e.ID || second == secret {
		t.Error("two registrations got the same id or secret")
	}
}

// A refused registration stores nothing.
func TestCreate_RefusedInput_StoresNothing(t *testing.T) {
	s := newStore(t)
	_, secret, err := s.Create(context.Background(), endpoints.Registration{URL: "http://hooks.example.com", Kinds: []string{"nope"}}, production, t0)
	if !problem.IsInvalid(err) || secret != "" {
		t.Fatalf("got %v and a secret %q; want refused", err, secret)
	}
	if all, err := s.All(context.Background()); err != nil || len(all) != 0 {
		t.Errorf("stored %d endpoints (%v)", len(all), err)
	}
}

// Past MaxEndpoints, a registration is refused and nothing is stored.
func TestCreate_AtTheBound_IsRefused(t *testing.T) {
	s := newStore(t)
	for range endpoints.MaxEndpoints {
		register(t, s, "https://hooks.example.com")
	}
	if _, _, err := s.Create(context.Background(), endpoints.Registration{URL: "https://hooks.example.com"}, production, t0); !errors.Is(err, endpoints.ErrTooMany) {
		t.Fatalf("the %dth: %v, want ErrTooMany", endpoints.MaxEndpoints+1, err)
	}
	if all, _ := s.All(context.Background()); len(all) != endpoints.MaxEndpoints {
		t.Errorf("%d stored", len(all))
	}
}

// A rotation makes the new secret current; the old one signs for the overlap, then stops; a
// second rotation drops the secret the first left behind, so there are never more than two.
func TestRotate_TheOldSecretOverlapsADay_AndTwoAtMost(t *testing.T) {
	s, ctx := newStore(t), context.Background()
	e, first := register(t, s, "https://hooks.example.com")
	t1 := t0 + time.Hour.Milliseconds()
	rotated, second, err := s.Rotate(ctx, e.ID, t1)
	if err != nil {
		t.Fatal(err)
	}
	if second == first || !strings.HasPrefix(second, "whsec_") {
		t.Fatalf("new secret %q", second)
	}
	end := t1 + endpoints.RotationOverlap.Milliseconds()
	for _, c := range []struct {
		at   int64
		want []string
	}{
		{t1, []string{second, first}},
		{end - 1, []string{second, first}},
		{end, []string{second}},
	} {
		if got := rotated.SigningSecrets(c.at); !reflect.DeepEqual(got, c.want) {
			t.Errorf("at overlap end %+d ms: signs with %d secrets, want %d", c.at-end, len(got), len(c.want))
		}
	}
	stored, err := s.Get(ctx, e.ID)
	if err != nil || !reflect.DeepEqual(stored, rotated) || stored.Rev != 2 || stored.UpdatedAtMs != t1 {
		t.Fatalf("stored %+v (%v), want %+v at rev 2", stored, err, rotated)
	}
	// Within the first overlap: the first secret goes at once.
	t2 := t1 + time.Minute.Milliseconds()
	again, third, err := s.Rotate(ctx, e.ID, t2)
	if err != nil {
		t.Fatal(err)
	}
	if got := again.SigningSecrets(t2); !reflect.DeepEqual(got, []string{third, second}) || len(again.Secrets) != send.MaxSecrets {
		t.Errorf("after the second rotation: %d secrets, signing with %d", len(again.Secrets), len(got))
	}
	if again.Secrets[1].ExpiresAtMs != t2+endpoints.RotationOverlap.Milliseconds() {
		t.Errorf("the replaced secret expires at %d, want %d", again.Secrets[1].ExpiresAtMs, t2+endpoints.RotationOverlap.Milliseconds())
	}
	if _, _, err := s.Rotate(ctx, "we_"+strings.Repeat("a", 26), t2); !errors.Is(err, endpoints.ErrNotFound) {
		t.Errorf("rotating an unknown endpoint: %v", err)
	}
}

// Rotated, the pure step: whatever secrets the endpoint had, the result has the new one current
// and at most the one current before it, expiring after the overlap.
func TestRotated(t *testing.T) {
	overlap := endpoints.RotationOverlap.Milliseconds()
	cur := endpoints.Secret{Value: "whsec_cur", CreatedAtMs: 5}
	old := endpoints.Secret{Value: "whsec_old", CreatedAtMs: 1, ExpiresAtMs: 9}
	for _, c := range []struct {
		name string
		had  []endpoints.Secret
		want []endpoints.Secret
	}{
		{"one secret", []endpoints.Secret{cur}, []endpoints.Secret{{Value: "whsec_new", CreatedAtMs: 100}, {Value: "whsec_cur", CreatedAtMs: 5, ExpiresAtMs: 100 + overlap}}},
		{"during an overlap", []endpoints.Secret{cur, old}, []endpoints.Secret{{Value: "whsec_new", CreatedAtMs: 100}, {Value: "whsec_cur", CreatedAtMs: 5, ExpiresAtMs: 100 + overlap}}},
		{"no current secret", []endpoints.Secret{old}, []endpoints.Secret{{Value: "whsec_new", CreatedAtMs: 100}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := endpoints.Endpoint{ID: "we_x", Secrets: c.had, Rev: 3}
			got := endpoints.Rotated(e, "whsec_new", 100)
			if !reflect.DeepEqual(got.Secrets, c.want) || got.UpdatedAtMs != 100 || got.Rev != 3 {
				t.Errorf("got %+v, want secrets %+v", got, c.want)
			}
			if len(e.Secrets) != len(c.had) || e.Secrets[0] != c.had[0] {
				t.Error("Rotated changed its argument")
			}
		})
	}
}

// An update changes what it sets and nothing else; the secrets are never its business.
func TestUpdate_ChangesWhatItSets(t *testing.T) {
	s, ctx := newStore(t), context.Background()
	e, secret := register(t, s, "https://hooks.example.com")
	url, kinds, accts, desc, off := "https://other.example.com/x", []string{"limit.reached"}, []string{"acct_1"}, "moved", true
	t1 := t0 + 1
	got, err := s.Update(ctx, e.ID, endpoints.Patch{URL: &url, Kinds: &kinds, Accounts: &accts, Description: &desc, Disabled: &off}, production, t1)
	if err != nil {
		t.Fatal(err)
	}
	want := e
	want.URL, want.Kinds, want.Accounts, want.Description, want.Disabled, want.UpdatedAtMs, want.Rev = url, kinds, accts, desc, true, t1, 2
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if got.Wants(notify.LimitReached, "acct_1") {
		t.Error("a disabled endpoint wants notifications")
	}
	// Clearing: every kind and account again, no description; the URL and the secret stay.
	none, empty, on := []string{}, "", false
	got, err = s.Update(ctx, e.ID, endpoints.Patch{Kinds: &none, Accounts: &none, Description: &empty, Disabled: &on}, production, t1+1)
	if err != nil {
		t.Fatal(err)
	}
	if got.URL != url || len(got.Kinds) != 0 || len(got.Accounts) != 0 || got.Description != "" || !got.Wants(notify.ThresholdCrossed, "anyone") ||
		!reflect.DeepEqual(got.SigningSecrets(t1), []string{secret}) {
		t.Errorf("after clearing: %+v", got)
	}
	stored, err := s.Get(ctx, e.ID)
	if err != nil || !reflect.DeepEqual(stored, got) {
		t.Errorf("stored %+v (%v), returned %+v", stored, err, got)
	}
	// Refused: nothing changes.
	bad := "https://10.1.2.3/"
	if _, err := s.Update(ctx, e.ID, endpoints.Patch{URL: &bad}, production, t1+2); !problem.IsInvalid(err) {
		t.Errorf("a private address: %v", err)
	}
	if after, _ := s.Get(ctx, e.ID); !reflect.DeepEqual(after, stored) {
		t.Error("a refused update changed the endpoint")
	}
	if _, err := s.Update(ctx, "we_"+strings.Repeat("b", 26), endpoints.Patch{Disabled: &on}, production, t1); !errors.Is(err, endpoints.ErrNotFound) {
		t.Errorf("an unknown endpoint: %v", err)
	}
}

// Delete removes the endpoint; a second delete, and any id of the wrong shape, is not found.
func TestDelete(t *testing.T) {
	s, ctx := newStore(t), context.Background()
	e, _ := register(t, s, "https://hooks.example.com")
	keep, _ := register(t, s, "https://hooks.example.com/keep")
	if err := s.Delete(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, e.ID); !errors.Is(err, endpoints.ErrNotFound) {
		t.Errorf("a second delete: %v", err)
	}
	if _, err := s.Get(ctx, e.ID); !errors.Is(err, endpoints.ErrNotFound) {
		t.Errorf("read after delete: %v", err)
	}
	if all, _ := s.List(ctx); len(all) != 1 || all[0].ID != keep.ID {
		t.Errorf("left %+v", all)
	}
	for _, id := range []string{"", "we_", "acct_1", "we_" + strings.Repeat("A", 26), "we_" + strings.Repeat("a", 1000)} {
		if _, err := s.Get(ctx, id); !errors.Is(err, endpoints.ErrNotFound) {
			t.Errorf("get %q: %v", id, err)
		}
		if err := s.Delete(ctx, id); !errors.Is(err, endpoints.ErrNotFound) {
			t.Errorf("delete %q: %v", id, err)
		}
	}
}

// The list is oldest first, whatever order the ids fall in.
func TestList_OldestFirst(t *testing.T) {
	s, ctx := newStore(t), context.Background()
	var want []string
	for i := range 5 {
		e, _, err := s.Create(ctx, endpoints.Registration{URL: "https://hooks.example.com"}, production, t0+int64(5-i)*1000)
		if err != nil {
			t.Fatal(err)
		}
		want = append([]string{e.ID}, want...)
	}
	all, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range all {
		got = append(got, e.ID)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// repeatReader gives the same bytes on every read: a random source that repeats itself.
type repeatReader struct{}

func (repeatReader) Read(p []byte) (int, error) { return copy(p, bytes.Repeat([]byte{7}, len(p))), nil }

// The list index this package queries is the one the table declares: keys only, every endpoint
// in one partition (ListKeyValue), by id.
func TestResources_DeclareTheListIndex(t *testing.T) {
	table, ok := resources.TableByLogical(resources.TableWebhookEndpoints)
	if !ok {
		t.Fatal("no webhook endpoints table")
	}
	want := resources.Index{Name: endpoints.ListIndex, PartitionKey: resources.Attribute{Name: endpoints.ListKeyAttr, Type: resources.String},
		SortKey: &resources.Attribute{Name: "pk", Type: resources.String}}
	for _, x := range table.Indexes {
		if x.Name == want.Name {
			if !reflect.DeepEqual(x, want) {
				t.Errorf("index %+v (sort key %+v), want %+v (sort key %+v)", x, x.SortKey, want, want.SortKey)
			}
			return
		}
	}
	t.Errorf("the table declares no index %q: the endpoints cannot be listed", endpoints.ListIndex)
}

// Every endpoint as it is stored carries the list index's key, however it was written.
func TestEndpoint_IsStoredWithTheListKey(t *testing.T) {
	item, err := attributevalue.MarshalMap(endpoints.Endpoint{ID: "we_x", URL: "https://h.example.com", Rev: 1})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := item[endpoints.ListKeyAttr].(*types.AttributeValueMemberS); !ok || v.Value != endpoints.ListKeyValue {
		t.Errorf("list key %v", item[endpoints.ListKeyAttr])
	}
	if v, ok := item["pk"].(*types.AttributeValueMemberS); !ok || v.Value != "we_x" {
		t.Errorf("pk %v", item["pk"])
	}
	var back endpoints.Endpoint
	if err := attributevalue.UnmarshalMap(item, &back); err != nil || back.ID != "we_x" || back.Rev != 1 {
		t.Errorf("read back %+v (%v)", back, err)
	}
}

// everyKind is the kinds Ferry sends, as a refusal lists them.
func everyKind() string {
	names := make([]string, len(notify.Kinds))
	for i, k := range notify.Kinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}
