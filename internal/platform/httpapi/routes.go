package httpapi

import (
	"net/http"
)

// HandlerFunc is a route handler: it writes a success answer or returns an error, which the
// server turns into a problem document.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Handlers are a function's route handlers by route key ("POST /v1/holds"). A function's builder
// gives its server the handlers of exactly the routes the table gives the function: the server
// refuses to build with a route left without one, or with one for a route it does not serve.
type Handlers map[string]HandlerFunc
