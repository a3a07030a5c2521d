package app

import (
	"net/url"

	"github.com/ferrymeter/ferry/internal/operator/console"
	"github.com/ferrymeter/ferry/internal/operator/session"
	provider "github.com/ferrymeter/ferry/internal/platform/endpoint"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// sessions is the console's session service over the console table at access: the api function
// signs in and out (ReadWrite); every other function with operator routes only checks sessions.
func (c *Composer) sessions(access resources.Access) *session.Service {
	return &session.Service{
		Store: &session.DynamoStore{DB: c.DynamoDB(), Table: c.Table(resources.TableConsole, access)},
		Now:   c.Now,
	}
}

// cookie is how the session travels: Secure under the __Host- prefix, unless the stack's public
// URL is plain http on a loopback address (ferry dev), where a browser would drop a Secure cookie.
func (c *Composer) cookie() session.Cookie {
	return session.Cookie{Insecure: LoopbackHTTP(c.Config.APIURL)}
}

// LoopbackHTTP reports whether raw is an http:// URL on a loopback host.
func LoopbackHTTP(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" {
		return false
	}
	return provider.Loopback(u.Hostname())
}

// console is what the api function's console routes use: the embedded page, its sessions, and
// the labs, run against the stack's own public URL with the operator key, as ferry lab runs them.
func (c *Composer) console() httpapi.ConsoleDeps {
	return httpapi.ConsoleDeps{
		Assets:   console.MustLoad(),
		Sessions: c.sessions(resources.ReadWrite),
		Cookie:   c.cookie(),
		Labs: &console.LabRunner{
			Labs: console.Labs,
			Slots: &console.Slots{
				DB: c.DynamoDB(), Table: c.Table(resources.TableConsole, resources.ReadWrite),
				Count: resources.ConsoleLabSlots, Now: c.Now, Log: c.Log,
			},
			BaseURL: c.Config.APIURL, OperatorKey: c.Config.OperatorKey, Log: c.Log, Now: c.Now,
		},
	}
}
