package httpapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/platform/idempotency"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Idempotency headers.
const (
	// HeaderIdempotencyKey carries the client's key on a mutating request.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderIdempotentReplayed marks an answer that is a replay of a stored one.
	HeaderIdempotentReplayed = "Idempotent-Replayed"
)

// Limits of the idempotency middleware.
const (
	// maxIdempotentBodyBytes bounds the body the middleware reads to fingerprint a request: API
	// Gateway's payload limit. Each handler still applies its own, smaller limit.
	maxIdempotentBodyBytes = 10 << 20
	// finishTimeout bounds storing or releasing the answer. It runs even when the client has
	// gone, so that the claim does not wait out its lease.
	finishTimeout = 5 * time.Second
)

// replayedHeaders are the answer headers stored and replayed with the status and body.
var replayedHeaders = []string{"Content-Type", "Location"}

// Idempotency is the middleware that gives every mutating route the Idempotency-Key contract
// (see package idempotency), keeping answers as long as the route's Idempotency says. Requests
// without the header run as before; other routes are not wrapped. It runs after authentication, so the caller scopes the key, and an unauthenticated
// request never reaches the store.
func Idempotency(svc *idempotency.Service, log *slog.Logger) Middleware {
	return func(route resources.Route, next HandlerFunc) HandlerFunc {
		if !route.Mutating() {
			return next
		}
		routeKey := route.Key()
		return func(w http.ResponseWriter, r *http.Request) error {
			values := r.Header.Values(HeaderIdempotencyKey)
			if len(values) == 0 {
				return next(w, r)
			}
			if len(values) > 1 {
				return idempotency.InvalidKey("send it once, without commas (HTTP joins repeated headers with commas)")
			}
			key := values[0]
			if err := idempotency.ValidateKey(key); err != nil {
				return err
			}
			p, ok := PrincipalFrom(r.Context())
			if !ok {
				return errors.New("idempotency middleware reached without an authenticated caller") // a wiring defect
			}
			body, err := ReadBody(r, maxIdempotentBodyBytes)
			if err != nil {
				return err
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			out, err := svc.Begin(r.Context(), idempotency.Request{
				Scope: p.Scope(), Route: routeKey, Key: key, Retention: route.Idempotency,
				Fingerprint: idempotency.Fingerprint(r.Method, r.URL.Path, r.URL.RawQuery, body, contentHeaders(r.Header)...),
			})
			if err != nil {
				if out.Decision == idempotency.Wait || out.Decision == idempotency.Mismatch {
					log.Info("keyed request not run", "route", routeKey, "scope", p.Scope(), "decision", out.Decision.String())
				}
				return err
			}
			if out.Decision == idempotency.Replay {
				log.Debug("keyed request replayed", "route", routeKey, "scope", p.Scope(), "status", out.Response.Status)
				for k, v := range out.Response.Header {
					w.Header().Set(k, v)
				}
				w.Header().Set(HeaderIdempotentReplayed, "true")
				w.WriteHeader(out.Response.Status)
				_, _ = w.Write(out.Response.Body)
				return nil
			}

			rec := &capture{header: http.Header{}}
			if err := next(rec, r); err != nil {
				writeProblem(rec, r, log, err)
			}
			resp := rec.response()
			// Store (or release) before answering: once the client has this answer, a repeat
			// must find it.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), finishTimeout)
			defer cancel()
			if _, err := svc.Finish(ctx, out.Claim, resp); err != nil {
				// The work is done and its answer is good; only the record is not. The claim
				// stays in flight until its lease ends, then a repeat runs again, which the
				// handlers' own keys (event id, account id) make harmless.
				log.Error("idempotency record not finished", "route", routeKey, "scope", p.Scope(), "status", resp.Status, "err", err)
			}
			rec.copyTo(w)
			return nil
		}
	}
}

// capture records a handler's answer so that it can be stored before it is sent.
type capture struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *capture) Header() http.Header { return c.header }

func (c *capture) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}

func (c *capture) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.body.Write(p)
}

// response is the answer as it is stored: status, the replayed headers and the body.
func (c *capture) response() idempotency.Response {
	status := c.status
	if status == 0 {
		status = http.StatusOK
	}
	header := map[string]string{}
	for _, k := range replayedHeaders {
		if v := c.header.Get(k); v != "" {
			header[k] = v
		}
	}
	return idempotency.Response{Status: status, Header: header, Body: c.body.Bytes()}
}

// copyTo sends the captured answer, every header included.
func (c *capture) copyTo(w http.ResponseWriter) {
	for k, vs := range c.header {
		w.Header()[k] = vs
	}
	status := c.status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(c.body.Bytes())
}

// contentHeaders are the header fields that are part of what a request asks for, for its
// fingerprint: a binary-mode CloudEvent's attributes (every ce-* header) and, with them, its
// Content-Type (the event's datacontenttype). Without ce-* headers there are none: the body is
// the whole request.
func contentHeaders(h http.Header) []string {
	var lines []string
	for name, values := range h {
		if lower := strings.ToLower(name); strings.HasPrefix(lower, "ce-") {
			for _, v := range values {
				lines = append(lines, lower+": "+v)
			}
		}
	}
	if len(lines) == 0 {
		return nil
	}
	sort.Strings(lines)
	for _, v := range h.Values("Content-Type") {
		lines = append(lines, "content-type: "+v)
	}
	return lines
}
