package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/apptest"
	"github.com/ferrymeter/ferry/internal/operator/console"
	"github.com/ferrymeter/ferry/internal/operator/session"
)

// signIn exchanges the operator key for a console session and returns its cookie header value
// and its CSRF token.
func signIn(t *testing.T, h *apptest.Harness) (string, string) {
	t.Helper()
	r := h.Do(t, "POST", "/v1/sessions", apptest.AdminKey, nil)
	if r.Status != http.StatusCreated {
		t.Fatalf("sign in: %d %s", r.Status, r.Body)
	}
	var cookie *http.Cookie
	for _, c := range (&http.Response{Header: r.Header}).Cookies() {
		if c.Name == session.SecureCookieName {
			cookie = c
		}
	}
	if cookie == nil {
		t.Fatalf("sign in set no %s cookie: %v", session.SecureCookieName, r.Header.Values("Set-Cookie"))
	}
	csrf, _ := r.JSON(t)["csrfToken"].(string)
	if csrf == "" {
		t.Fatalf("sign in: no CSRF token in %s", r.Body)
	}
	return cookie.Name + "=" + cookie.Value, csrf
}

func TestConsole_PageAndAssetsAreServedWithAStrictPolicy(t *testing.T) {
	h := apptest.New(t)
	page := h.Do(t, "GET", "/console", "", nil)
	if page.Status != http.StatusOK || !strings.HasPrefix(page.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /console: %d %s", page.Status, page.Header.Get("Content-Type"))
	}
	for k, v := range console.SecurityHeaders {
		if got := page.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	csp := page.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "object-src 'none'", "require-trusted-types-for 'script'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "http") {
		t.Errorf("CSP %q allows inline code, eval or another origin", csp)
	}
	if page.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("page Cache-Control %q", page.Header.Get("Cache-Control"))
	}
	body := string(page.Body)
	// No inline script or style, nothing from another origin: the CSP would block it anyway.
	for _, bad := range []string{"<script>", "style=", "onclick", "http://", "https://", "<style"} {
		if strings.Contains(body, bad) {
			t.Errorf("page contains %q", bad)
		}
	}
	js := h.Do(t, "GET", "/console/console.js", "", nil)
	if js.Status != http.StatusOK || js.Header.Get("Content-Type") != "text/javascript; charset=utf-8" || js.Header.Get("Content-Security-Policy") == "" {
		t.Fatalf("console.js: %d %v", js.Status, js.Header)
	}
	// Nothing from another origin: the one absolute URL is the SVG namespace, a name, not a fetch.
	script := strings.ReplaceAll(string(js.Body), `"http://www.w3.org/2000/svg"`, "")
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "localStorage", "sessionStorage", "http://", "https://"} {
		if strings.Contains(script, bad) {
			t.Errorf("console.js uses %q", bad)
		}
	}
	if r := h.Do(t, "GET", "/console/console.js", "", nil, "If-None-Match", js.Header.Get("ETag")); r.Status != http.StatusNotModified {
		t.Errorf("revalidation: %d", r.Status)
	}
	for _, path := range []string{"/console/nothing.js", "/console/index.html", "/console/..%2fgo.mod"} {
		if r := h.Do(t, "GET", path, "", nil); r.Status != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, r.Status)
		}
	}
	// The page is public and changes nothing; a write to it is not a route.
	if r := h.Do(t, "POST", "/console", "", nil); r.Status != http.StatusMethodNotAllowed && r.Status != http.StatusNotFound {
		t.Errorf("POST /console: %d", r.Status)
	}
}

func TestSession_SignInGivesAnHttpOnlyStrictSecureCookie(t *testing.T) {
	h := apptest.New(t)
	acctKey := h.CreateAccount(t, "acct_s1", "free", nil)
	r := h.Do(t, "POST", "/v1/sessions", apptest.AdminKey, nil)
	if r.Status != http.StatusCreated {
		t.Fatalf("sign in: %d %s", r.Status, r.Body)
	}
	raw := r.Header.Get("Set-Cookie")
	for _, want := range []string{session.SecureCookieName + "=fs_", "HttpOnly", "SameSite=Strict", "Secure", "Path=/", "Max-Age=3600"} {
		if !strings.Contains(raw, want) {
			t.Errorf("Set-Cookie %q lacks %q", raw, want)
		}
	}
	if strings.Contains(raw, "Domain=") {
		t.Errorf("Set-Cookie %q names a domain", raw)
	}
	if strings.Contains(string(r.Body), apptest.AdminKey) || r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("sign-in answer %s (Cache-Control %q)", r.Body, r.Header.Get("Cache-Control"))
	}
	// Only the operator key signs in: not an account's key, not a session, not nothing.
	assertProblem(t, h.Do(t, "POST", "/v1/sessions", acctKey, nil), http.StatusUnauthorized, "unauthorized")
	assertProblem(t, h.Do(t, "POST", "/v1/sessions", "", nil), http.StatusUnauthorized, "unauthorized")
	cookie, csrf := signIn(t, h)
	assertProblem(t, h.Do(t, "POST", "/v1/sessions", "", nil, "Cookie", cookie, "X-CSRF-Token", csrf), http.StatusUnauthorized, "unauthorized")
	// The session reads its own CSRF token back (a reloaded page).
	cur := h.Do(t, "GET", "/v1/sessions/current", "", nil, "Cookie", cookie)
	if cur.Status != http.StatusOK || cur.JSON(t)["csrfToken"] != csrf {
		t.Errorf("current session: %d %s", cur.Status, cur.Body)
	}
	// A made-up or tampered cookie is no session.
	assertProblem(t, h.Do(t, "GET", "/v1/accounts", "", nil, "Cookie", cookie+"x"), http.StatusUnauthorized, "unauthorized")
	assertProblem(t, h.Do(t, "GET", "/v1/accounts", "", nil, "Cookie", session.SecureCookieName+"=fs_AAAA"), http.StatusUnauthorized, "unauthorized")
}

func TestSession_EveryChangeNeedsTheCSRFTokenAndTheConsoleOrigin(t *testing.T) {
	h := apptest.New(t)
	cookie, csrf := signIn(t, h)
	// Reads need no token.
	if r := h.Do(t, "GET", "/v1/accounts", "", nil, "Cookie", cookie); r.Status != http.StatusOK {
		t.Fatalf("list accounts with a session: %d %s", r.Status, r.Body)
	}
	create := map[string]any{"id": "acct_csrf", "plan": "free"}
	// No token, a wrong token, another session's token, or another site's request: refused, and
	// nothing stored.
	_, otherCSRF := signIn(t, h)
	for name, headers := range map[string][]string{
		"no token":              {"Cookie", cookie, "Idempotency-Key", "k-1"},
		"wrong token":           {"Cookie", cookie, "Idempotency-Key", "k-2", "X-CSRF-Token", tampered(csrf)},
		"another session's":     {"Cookie", cookie, "Idempotency-Key", "k-3", "X-CSRF-Token", otherCSRF},
		"from another site":     {"Cookie", cookie, "Idempotency-Key", "k-4", "X-CSRF-Token", csrf, "Sec-Fetch-Site", "cross-site"},
		"from a sibling domain": {"Cookie", cookie, "Idempotency-Key", "k-5", "X-CSRF-Token", csrf, "Sec-Fetch-Site", "same-site"},
	} {
		assertProblem(t, h.Do(t, "POST", "/v1/accounts", "", create, headers...), http.StatusForbidden, "forbidden")
		if r := h.Do(t, "GET", "/v1/accounts/acct_csrf", apptest.AdminKey, nil); r.Status != http.StatusNotFound {
			t.Fatalf("%s: the account was created (%d)", name, r.Status)
		}
	}
	// The console's own request: cookie, token, same origin, and an Idempotency-Key like any client.
	r := h.Do(t, "POST", "/v1/accounts", "", create, "Cookie", cookie, "X-CSRF-Token", csrf, "Sec-Fetch-Site", "same-origin", "Idempotency-Key", "k-ok")
	if r.Status != http.StatusCreated {
		t.Fatalf("create with the session: %d %s", r.Status, r.Body)
	}
	// The same middleware: a replay of the key answers the stored answer, a reuse is refused.
	if again := h.Do(t, "POST", "/v1/accounts", "", create, "Cookie", cookie, "X-CSRF-Token", csrf, "Idempotency-Key", "k-ok"); again.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replayed create: %d %v", again.Status, again.Header)
	}
}

func TestSession_SignOutAndExpiryEndIt(t *testing.T) {
	h := apptest.New(t)
	cookie, csrf := signIn(t, h)
	// Signing out changes something: it needs the token too.
	assertProblem(t, h.Do(t, "DELETE", "/v1/sessions/current", "", nil, "Cookie", cookie), http.StatusForbidden, "forbidden")
	out := h.Do(t, "DELETE", "/v1/sessions/current", "", nil, "Cookie", cookie, "X-CSRF-Token", csrf)
	if out.Status != http.StatusNoContent || !strings.Contains(out.Header.Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("sign out: %d %v", out.Status, out.Header.Values("Set-Cookie"))
	}
	// A copied cookie stops working at once.
	assertProblem(t, h.Do(t, "GET", "/v1/accounts", "", nil, "Cookie", cookie), http.StatusUnauthorized, "unauthorized")
	// A session ends an hour after sign-in, even while its item is still in the table.
	cookie, _ = signIn(t, h)
	h.Clock.Advance(session.Lifetime - time.Second)
	if r := h.Do(t, "GET", "/v1/accounts", "", nil, "Cookie", cookie); r.Status != http.StatusOK {
		t.Fatalf("a session a second before its end: %d", r.Status)
	}
	h.Clock.Advance(time.Second)
	assertProblem(t, h.Do(t, "GET", "/v1/accounts", "", nil, "Cookie", cookie), http.StatusUnauthorized, "unauthorized")
	// The operator key itself has no session to show or end.
	assertProblem(t, h.Do(t, "GET", "/v1/sessions/current", apptest.AdminKey, nil), http.StatusNotFound, "not-found")
}

func TestConsoleRoutes_AnAccountSeesOnlyItsOwn(t *testing.T) {
	h := apptest.New(t)
	keyA := h.CreateAccount(t, "acct_own_a", "free", nil)
	h.CreateAccount(t, "acct_own_b", "free", nil)
	cookie, csrf := signIn(t, h)
	// The operator's reads, by session.
	for _, path := range []string{
		"/v1/accounts?prefix=acct_own", "/v1/accounts/acct_own_b/standing",
		"/v1/events?account=acct_own_b&status=REJECTED", "/v1/events?account=acct_own_b&status=UNINSERTABLE",
		"/v1/holds?account=acct_own_b&status=RUNNING", "/v1/outbox?account=acct_own_b",
		"/v1/reconcile/review", "/v1/billing-events?status=DEAD",
	} {
		if r := h.Do(t, "GET", path, "", nil, "Cookie", cookie); r.Status != http.StatusOK {
			t.Errorf("GET %s with a session: %d %s", path, r.Status, r.Body)
		}
	}
	list := h.Do(t, "GET", "/v1/accounts?prefix=acct_own", "", nil, "Cookie", cookie).JSON(t)
	if items, _ := list["items"].([]any); len(items) != 2 {
		t.Errorf("prefix search: %v", list)
	}
	// A provider id is looked up only as one: anything else is refused, as the document says.
	for _, bad := range []string{"%20cus_1", "cus%2F1", "-cus"} {
		assertProblem(t, h.Do(t, "GET", "/v1/accounts?linkedId="+bad, "", nil, "Cookie", cookie), http.StatusBadRequest, "invalid-request")
	}
	if r := h.Do(t, "GET", "/v1/accounts?linkedId=cus_none", "", nil, "Cookie", cookie); r.Status != http.StatusOK {
		t.Errorf("a provider id nobody links: %d %s", r.Status, r.Body)
	}
	// An account key: never the operator's routes, never another account's resources.
	assertProblem(t, h.Do(t, "GET", "/v1/accounts", keyA, nil), http.StatusUnauthorized, "unauthorized")
	assertProblem(t, h.Do(t, "GET", "/v1/outbox?account=acct_own_a", keyA, nil), http.StatusUnauthorized, "unauthorized")
	assertProblem(t, h.Do(t, "GET", "/v1/events?account=acct_own_b&status=REJECTED", keyA, nil), http.StatusNotFound, "not-found")
	assertProblem(t, h.Do(t, "GET", "/v1/holds?account=acct_own_b&status=RUNNING", keyA, nil), http.StatusNotFound, "not-found")
	assertProblem(t, h.Do(t, "GET", "/v1/events/evt_x?account=acct_own_b", keyA, nil), http.StatusNotFound, "not-found")
	for _, path := range []string{"/v1/events?account=acct_own_a&status=REJECTED", "/v1/holds?account=acct_own_a&status=RUNNING"} {
		if r := h.Do(t, "GET", path, keyA, nil); r.Status != http.StatusOK {
			t.Errorf("an account naming itself: GET %s: %d %s", path, r.Status, r.Body)
		}
	}
	assertProblem(t, h.Do(t, "POST", "/v1/events/evt_x/redrive", keyA, map[string]any{"account": "acct_own_b"}, "Idempotency-Key", "r-1"), http.StatusUnauthorized, "unauthorized")
	if r := h.Do(t, "GET", "/v1/events?status=REJECTED", keyA, nil); r.Status != http.StatusOK {
		t.Errorf("an account's own failed events: %d %s", r.Status, r.Body)
	}
	// Redrive by session: an unknown event is 404, with nothing queued.
	assertProblem(t, h.Do(t, "POST", "/v1/events/evt_none/redrive", "", map[string]any{"account": "acct_own_b"},
		"Cookie", cookie, "X-CSRF-Token", csrf, "Idempotency-Key", "r-2"), http.StatusNotFound, "not-found")
	// A lab the console does not have, and labs on a stack that does not know its own URL.
	assertProblem(t, h.Do(t, "POST", "/v1/labs/nothing/runs", "", nil, "Cookie", cookie, "X-CSRF-Token", csrf, "Idempotency-Key", "l-1"), http.StatusNotFound, "not-found")
	assertProblem(t, h.Do(t, "POST", "/v1/labs/holds-five/runs", "", nil, "Cookie", cookie, "X-CSRF-Token", csrf, "Idempotency-Key", "l-2"), http.StatusNotImplemented, "unsupported")
}

// tampered is token with its last character changed (never to itself: the token is random, and
// may end in any character).
func tampered(token string) string {
	last := "A"
	if strings.HasSuffix(token, last) {
		last = "B"
	}
	return token[:len(token)-1] + last
}
