package httpapi

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/ferrymeter/ferry/internal/platform/jsonbody"
	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// What route handlers share: reading a request strictly and answering it.

// QueryParam reads an optional query parameter that may be sent once. Sent empty or twice, it
// is refused rather than read as absent or as one of its values.
func QueryParam(q url.Values, name string) (value string, sent bool, err error) {
	values, sent := q[name]
	switch {
	case !sent:
		return "", false, nil
	case len(values) > 1:
		return "", true, BadRequest(fmt.Sprintf("%s is sent %d times; send it once", name, len(values)))
	case values[0] == "":
		return "", true, BadRequest(fmt.Sprintf("%s is empty; leave it out for the default", name))
	}
	return values[0], true, nil
}

// PageLimit reads the limit query parameter: a whole number from 1 to max, or def when absent.
func PageLimit(r *http.Request, def, maxLimit int) (int, error) {
	raw := r.URL.Query().Get("limit")
	if raw == "" {
		return def, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || strconv.Itoa(n) != raw || n < 1 || n > maxLimit {
		return 0, BadRequest(fmt.Sprintf("limit must be a whole number from 1 to %d.", maxLimit))
	}
	return n, nil
}

// NextCursor is a page's cursor as the API shows it: null at the end.
func NextCursor(next string) *string {
	if next == "" {
		return nil
	}
	return &next
}

// StrictQuery refuses a parameter the route does not take, one given twice, or one given
// empty: a misspelt or blank filter must not silently list everything.
func StrictQuery(r *http.Request, allowed []string) error {
	var problems []string
	for name, values := range r.URL.Query() {
		known := false
		for _, a := range allowed {
			known = known || a == name
		}
		takes := "no query parameters"
		if len(allowed) > 0 {
			takes = strings.Join(allowed, ", ")
		}
		switch {
		case !known:
			problems = append(problems, fmt.Sprintf("unknown query parameter %q (this route takes %s)", name, takes))
		case len(values) > 1:
			problems = append(problems, fmt.Sprintf("query parameter %q is given %d times", name, len(values)))
		case values[0] == "":
			problems = append(problems, fmt.Sprintf("query parameter %q is empty; leave it out instead", name))
		}
	}
	sort.Strings(problems)
	return problem.Fields(problems)
}

// CheckJSON refuses a body declared as something other than JSON. A missing Content-Type is
// accepted: curl users forget it, and the body is validated as JSON anyway.
func CheckJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || (mt != "application/json" && mt != "application/cloudevents+json" && mt != "application/cloudevents-batch+json") {
		return Failure(problem.UnsupportedMediaType, fmt.Sprintf("Send JSON (application/json or application/cloudevents+json), not %q.", ct))
	}
	return nil
}

// DecodeOptionalJSON is DecodeJSON for a route whose body may be left out: a body of nothing but
// JSON's whitespace is no body. A body declared as something other than JSON is a 415 either way.
func DecodeOptionalJSON(r *http.Request, into any) error {
	if err := CheckJSON(r); err != nil {
		return err
	}
	body, err := ReadBody(r, MaxJSONBodyBytes)
	if err != nil {
		return err
	}
	if jsonbody.Empty(body) {
		return nil
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return DecodeJSON(r, into)
}

// DecodeOptionalEmpty reads a body that may be absent or an empty JSON object.
func DecodeOptionalEmpty(r *http.Request) error {
	var empty struct{}
	return DecodeOptionalJSON(r, &empty)
}
