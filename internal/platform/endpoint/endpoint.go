// Package provider holds what Ferry's billing-provider adapters (kinde, stripe) share: the rule
// for which endpoints they may be pointed at.
package endpoint

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Loopback reports whether host is a loopback name or address.
func Loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckEndpoint refuses a provider endpoint that is not https, except http to a loopback host (a
// local stand-in): what is fetched from or sent to it in the clear could be read or swapped by
// anyone on the path. what names the endpoint in the error.
func CheckEndpoint(what, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%s %q is not an absolute URL", what, raw)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if Loopback(u.Hostname()) {
			return nil
		}
		return fmt.Errorf("%s %q: http is allowed only for loopback hosts; use https", what, raw)
	}
	return fmt.Errorf("%s %q: the scheme must be https", what, raw)
}
