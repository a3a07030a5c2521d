package httpapi

import (
	"net/url"

	"github.com/ferrymeter/ferry/internal/accounts"
	"github.com/ferrymeter/ferry/internal/operator/session"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/endpoint"
	"github.com/ferrymeter/ferry/internal/platform/idempotency"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Serve makes fn an HTTP function: its routes of the table, each served by its handler, behind
// auth. A route that takes account keys, and no auth.Accounts, gets a read-only authenticator
// over the granted key and account tables; a route that takes a console session gets the session
// table; a function with a mutating route gets the idempotency middleware over the idempotency
// table. It returns the server, which tests may add middleware to.
func Serve(c *compose.Composer, fn *compose.Function, handlers Handlers, auth Authentication) *Server {
	auth.OperatorKey = c.Config.OperatorKey
	routes := resources.RoutesOf(c.Routes(), c.Entry.Name)
	needs := func(want func(resources.Route) bool) bool {
		for _, r := range routes {
			if want(r) {
				return true
			}
		}
		return false
	}
	if auth.Accounts == nil && needs(func(r resources.Route) bool {
		return r.Auth == resources.Account || r.Auth == resources.AccountOrOperator
	}) {
		auth.Accounts = AccountsReader(c)
	}
	if auth.Sessions == nil && needs(func(r resources.Route) bool { return r.Auth.TakesSession() }) {
		// The operator's console session authenticates the operator routes of every function,
		// as the operator key does: each reads the session table.
		auth.Sessions = Sessions(c, resources.Read)
		auth.Cookie = Cookie(c)
	}
	server := NewServer(c.Entry.Name, c.Routes(), handlers, auth, c.Log)
	if needs(resources.Route.Mutating) {
		keys := &idempotency.Service{
			Store: &idempotency.Table{DB: c.DynamoDB(), Table: c.Table(resources.TableIdempotency, resources.ReadWrite)},
			Now:   c.Now,
		}
		server.Use(Idempotency(keys, c.Log))
		server.Keys = keys
	}
	fn.HTTP = server
	return server
}

// AccountsReader authenticates account keys over the granted key and account tables, read-only.
func AccountsReader(c *compose.Composer) *accounts.Service {
	store := &accounts.Table{
		DB:            c.DynamoDB(),
		AccountsTable: c.Table(resources.TableAccounts, resources.Read),
		KeysTable:     c.Table(resources.TableAPIKeys, resources.Read),
	}
	return &accounts.Service{Store: store, Catalog: c.Config.Catalog, Now: c.Now}
}

// Sessions is the console's session service over the console table at access: the api function
// signs in and out (ReadWrite); every other function with operator routes only checks sessions.
func Sessions(c *compose.Composer, access resources.Access) *session.Service {
	return &session.Service{
		Store: &session.Table{DB: c.DynamoDB(), Table: c.Table(resources.TableConsole, access)},
		Now:   c.Now,
	}
}

// Cookie is how the console session travels: Secure under the __Host- prefix, unless the stack's
// public URL (FERRY_API_URL) is plain http on a loopback address (ferry dev), where a browser
// would drop a Secure cookie.
func Cookie(c *compose.Composer) session.Cookie {
	return session.Cookie{Insecure: LoopbackHTTP(c.Settings().Get(resources.EnvAPIURL))}
}

// LoopbackHTTP reports whether raw is an http:// URL on a loopback host.
func LoopbackHTTP(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" {
		return false
	}
	return endpoint.Loopback(u.Hostname())
}
