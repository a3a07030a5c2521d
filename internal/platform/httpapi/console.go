package httpapi

import (
	"context"
	"net/http"
	"strings"

	"github.com/ferrymeter/ferry/internal/operator/console"
	"github.com/ferrymeter/ferry/internal/operator/session"
)

// ConsoleDeps are what the operator console's routes use: its embedded files, the sessions
// signing in creates, the cookie they travel in, and the labs it runs.
type ConsoleDeps struct {
	Assets   *console.Assets
	Sessions *session.Service
	Cookie   session.Cookie
	Labs     LabRunner
}

// LabRunner runs one of the console's labs (console.LabRunner does).
type LabRunner interface {
	Run(ctx context.Context, name string) (console.Run, error)
}

// consoleHeaders sets the headers every console answer carries.
func consoleHeaders(w http.ResponseWriter) {
	for k, v := range console.SecurityHeaders {
		w.Header().Set(k, v)
	}
}

// serveAsset answers with an embedded file, or 304 when the client has this version.
func serveAsset(w http.ResponseWriter, r *http.Request, a console.Asset, cache string) error {
	consoleHeaders(w)
	w.Header().Set("Content-Type", a.ContentType)
	w.Header().Set("Cache-Control", cache)
	w.Header().Set("ETag", a.ETag)
	if r.Header.Get("If-None-Match") == a.ETag {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(a.Body)
	return nil
}

// consolePage is GET /console: the console's one page. It holds no data and no credential, so
// anyone may load it; it shows the sign-in form until a session exists. It is never cached: a
// signed-out page must not come back from a cache.
func (a *API) consolePage(w http.ResponseWriter, r *http.Request) error {
	if err := strictQuery(r, nil); err != nil {
		return err
	}
	return serveAsset(w, r, a.deps.Console.Assets.Page(), "no-store")
}

// consoleAsset is GET /console/{asset}: a script, style sheet or image of the page. Assets are
// revalidated on every load (their ETag is their hash), so a new build is picked up at once.
func (a *API) consoleAsset(w http.ResponseWriter, r *http.Request) error {
	asset, ok := a.deps.Console.Assets.Lookup(r.PathValue("asset"))
	if !ok {
		return notFound("The console has no such file.")
	}
	return serveAsset(w, r, asset, "no-cache")
}

// sessionBody is a console session as the API shows it: its expiry and its CSRF token (which the
// page keeps in memory; the session's own token travels only in the HttpOnly cookie).
type sessionBody struct {
	ExpiresAt string `json:"expiresAt"`
	CSRFToken string `json:"csrfToken"`
}

// createSession is POST /v1/sessions: the operator key, as Authorization: Bearer (the route takes
// nothing else), is exchanged for a session. The answer sets the session's cookie and carries its
// CSRF token; the key itself is kept nowhere. Each sign-in makes a new session.
func (a *API) createSession(w http.ResponseWriter, r *http.Request) error {
	if err := strictQuery(r, nil); err != nil {
		return err
	}
	var none struct{}
	if err := decodeOptionalJSON(r, &none); err != nil {
		return err
	}
	c := a.deps.Console
	token, sess, err := c.Sessions.Create(r.Context())
	if err != nil {
		return err
	}
	http.SetCookie(w, c.Cookie.For(token, sess, a.deps.Now()))
	w.Header().Set("Cache-Control", "no-store")
	return writeJSON(w, http.StatusCreated, sessionBody{ExpiresAt: rfc3339(sess.ExpiresAtMs), CSRFToken: sess.CSRF})
}

// errNoSessionHere: the caller is the operator, by key rather than by a console session.
var errNoSessionHere = notFound("There is no console session here: this request came with the operator key, not a session's cookie.")

// getSession is GET /v1/sessions/current: the live session the cookie names, so that a page
// loaded again picks up its CSRF token (a page of another origin cannot read this answer: no
// CORS header allows it, and the SameSite=Strict cookie is not sent with its requests).
func (a *API) getSession(w http.ResponseWriter, r *http.Request) error {
	if err := strictQuery(r, nil); err != nil {
		return err
	}
	p, _ := PrincipalFrom(r.Context())
	if p.Session == nil {
		return errNoSessionHere
	}
	w.Header().Set("Cache-Control", "no-store")
	return writeJSON(w, http.StatusOK, sessionBody{ExpiresAt: rfc3339(p.Session.ExpiresAtMs), CSRFToken: p.Session.CSRF})
}

// deleteSession is DELETE /v1/sessions/current: signing out. The session's item is deleted, so its
// cookie stops working in every container at once, and the browser is told to drop the cookie.
func (a *API) deleteSession(w http.ResponseWriter, r *http.Request) error {
	if err := strictQuery(r, nil); err != nil {
		return err
	}
	p, _ := PrincipalFrom(r.Context())
	if p.Session == nil {
		return errNoSessionHere
	}
	c := a.deps.Console
	if err := c.Sessions.End(r.Context(), p.SessionToken); err != nil {
		return err
	}
	http.SetCookie(w, c.Cookie.Cleared())
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// labRunBody is one lab run as the console shows it. The lab account's API key is not in it:
// the answer is kept for Idempotency-Key replays, and the operator reaches the account by its id.
type labRunBody struct {
	Lab        string        `json:"lab"`
	OK         bool          `json:"ok"`
	Error      string        `json:"error,omitempty"`
	DurationMs int64         `json:"durationMs"`
	AccountID  string        `json:"accountId,omitempty"`
	Intro      string        `json:"intro"`
	Columns    []string      `json:"columns"`
	Rows       [][]string    `json:"rows"`
	Notes      []string      `json:"notes"`
	Problems   []string      `json:"problems"`
	Failures   []string      `json:"failures"`
	Limit      int64         `json:"limit,omitempty"`
	Jobs       []labJobBody  `json:"jobs,omitempty"`
	Steps      []labStepBody `json:"steps,omitempty"`
}

type labJobBody struct {
	Key        string `json:"key"`
	PlainRan   bool   `json:"plainRan"`
	PlainSpent int64  `json:"plainSpent"`
	Outcome    string `json:"outcome"`
	Spent      int64  `json:"spent"`
	Detail     string `json:"detail,omitempty"`
}

type labStepBody struct {
	N              int          `json:"n"`
	Event          string       `json:"event"`
	Type           string       `json:"type"`
	BillingEventID string       `json:"billingEventId"`
	Duplicate      bool         `json:"duplicate"`
	Note           string       `json:"note"`
	Status         string       `json:"status"`
	Ferry          standingBody `json:"ferry"`
	Naive          standingBody `json:"naive"`
}

type standingBody struct {
	Plan    string `json:"plan"`
	Credits int64  `json:"credits"`
}

func newLabRunBody(run console.Run) labRunBody {
	res := run.Result
	columns := res.Columns
	if len(columns) == 0 {
		columns = []string{"seed (Earmark)", "Ferry"}
	}
	b := labRunBody{
		Lab: run.Lab, OK: run.Err == nil && res.OK(), DurationMs: run.Duration.Milliseconds(), AccountID: res.AccountID,
		Intro: res.Intro, Columns: columns, Rows: [][]string{}, Notes: withoutKey(res.Notes, res.APIKey), Problems: nonNil(res.Problems),
		Failures: nonNil(res.Failures), Limit: res.Limit,
	}
	if run.Err != nil {
		b.Error = run.Err.Error()
	}
	for i, row := range res.Rows {
		cells := []string{row.Name, row.Seed, row.Ferry}
		if i < len(res.More) {
			cells = append(cells, res.More[i]...)
		}
		b.Rows = append(b.Rows, cells)
	}
	for _, j := range res.Jobs {
		b.Jobs = append(b.Jobs, labJobBody{Key: j.Key, PlainRan: j.PlainRan, PlainSpent: j.PlainSpent, Outcome: j.Outcome, Spent: j.Spent, Detail: j.Detail})
	}
	for _, s := range res.Steps {
		b.Steps = append(b.Steps, labStepBody{
			N: s.N, Event: s.Event, Type: s.Type, BillingEventID: s.BillingEventID, Duplicate: s.Duplicate, Note: s.Note, Status: s.Status,
			Ferry: standingBody(s.Ferry), Naive: standingBody(s.Naive),
		})
	}
	return b
}

// withoutKey is the lab's notes with its account's API key withheld.
func withoutKey(notes []string, key string) []string {
	out := make([]string, 0, len(notes))
	for _, n := range notes {
		if key != "" {
			n = strings.ReplaceAll(n, key, "(withheld)")
		}
		out = append(out, n)
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// runLab is POST /v1/labs/{lab}/runs: run one of the console's labs now, against this stack, on a
// fresh account, and answer with what it measured (200 once it ran, whatever its outcome; the
// body says ok or what differs). A lab is bounded in time, and only a few run at once (429).
func (a *API) runLab(w http.ResponseWriter, r *http.Request) error {
	if err := strictQuery(r, nil); err != nil {
		return err
	}
	var none struct{}
	if err := decodeOptionalJSON(r, &none); err != nil {
		return err
	}
	run, err := a.deps.Console.Labs.Run(r.Context(), r.PathValue("lab"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, newLabRunBody(run))
}
