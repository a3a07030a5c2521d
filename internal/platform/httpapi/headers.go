package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/ferrymeter/ferry/internal/platform/problem"
)

// The answers given before any route runs — to a request whose head HTTP itself refuses, and
// the gateway's own — are problem documents like every other answer, so a client parses one
// shape whatever it sent and whoever refused it.

// headDetail explains every refusal of a request head: Go's HTTP server words the same refusals
// differently (or not at all), and an answer must not depend on which check saw it first.
const headDetail = "The request's head is not valid HTTP: a header holds a character HTTP does not allow " +
	"(a control character — for example in Idempotency-Key, which takes 1–255 printable ASCII characters), " +
	"or a header name, the Host header or the request line is malformed. Nothing was done."

// RequestHeadProblem is the answer to a request whose head HTTP refuses, with the status Go's
// HTTP server chose for it (400 for a control character in a header; 431 for headers too
// large; 501, 505 for what it does not implement). Every one is of kind InvalidHeader.
func RequestHeadProblem(status int) *Problem {
	p := Failure(problem.InvalidHeader, headDetail)
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		p.Detail = "The request's headers are too large. Nothing was done."
	case http.StatusNotImplemented:
		p.Detail = "The request's transfer encoding is not supported. Nothing was done."
	case http.StatusHTTPVersionNotSupported:
		p.Detail = "The request's HTTP version is not supported. Nothing was done."
	default:
		return p
	}
	p.Status, p.Title = status, http.StatusText(status)
	return p
}

// GatewayProblem is an answer the gateway gives on its own: 404 for a path no route can have,
// 408 for a body that did not arrive in time, 413 for a body over API Gateway's payload limit,
// 400 for a body that could not be read otherwise, 500 for a function that failed to answer.
func GatewayProblem(status int) *Problem {
	switch status {
	case http.StatusNotFound:
		return NotFound("No route has this path: it is not in its clean form (no empty, . or .. segments).")
	case http.StatusRequestTimeout:
		return Failure(problem.RequestTimeout, "The request's body did not arrive in time: it stalled, or came too slowly. Nothing was done; send it again.")
	case http.StatusRequestEntityTooLarge:
		return Failure(problem.TooLarge, "The body is over the gateway's payload limit.")
	case http.StatusBadRequest:
		return Failure(problem.Invalid, "The request's body could not be read to its end (the connection broke, or the body is shorter than its Content-Length). Nothing was done.")
	}
	return Failure(problem.Internal, "")
}

// Document renders the problem as the body of an answer.
func (p *Problem) Document() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		// Extras are plain values set by this package; a marshalling failure is a programming error.
		panic("httpapi: problem document: " + err.Error())
	}
	return append(b, '\n')
}

// validHeaders reports whether every header is one HTTP allows: a token for a name (RFC 9110
// §5.1) and no control character but HTAB in a value (§5.5). Go's HTTP server refuses any other
// request before a handler runs; API Gateway hands them to a function, which refuses them the
// same way.
func validHeaders(headers map[string]string) bool {
	for name, value := range headers {
		if name == "" {
			return false
		}
		for i := 0; i < len(name); i++ {
			if !isTokenChar(name[i]) {
				return false
			}
		}
		for i := 0; i < len(value); i++ {
			if c := value[i]; c < 0x20 && c != '\t' || c == 0x7f {
				return false
			}
		}
	}
	return true
}

// isTokenChar reports whether c may appear in an HTTP token (a header name).
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}
