package send

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode"
)

// MaxURLBytes bounds an endpoint URL, in bytes. Real webhook URLs are far shorter; the bound
// keeps a stored URL, and every log line that names its host, small.
const MaxURLBytes = 2048

// ErrInvalidURL says an endpoint URL fails CheckURL. It is not retryable.
var ErrInvalidURL = errors.New("invalid endpoint URL")

// CheckURL returns every reason Ferry would refuse to deliver to raw under p, or nil if there is
// none. It is meant for registration, where a platform should hear all its mistakes at once, and
// Send runs it again before every delivery.
//
// CheckURL never rewrites the URL (what is stored is what the platform typed) and never resolves
// the host: a name is judged when a delivery connects, by the dialer, against the addresses it
// resolves to then.
func CheckURL(raw string, p Policy) []string {
	var problems []string
	if len(raw) > MaxURLBytes {
		problems = append(problems, fmt.Sprintf("is %d bytes long, over the limit of %d", len(raw), MaxURLBytes))
	}
	if strings.IndexFunc(raw, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		problems = append(problems, "contains whitespace or control characters")
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return append(problems, fmt.Sprintf("cannot be parsed: %v", err))
	}

	host := u.Hostname()
	loopback := isLoopbackHTTPHost(host)
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && loopback && p.AllowLoopback:
	case u.Scheme == "http" && loopback:
		problems = append(problems, "uses http to a loopback host, which only `ferry dev` allows; use https")
	case u.Scheme == "http" && p.AllowLoopback:
		problems = append(problems, "uses http to a host that is not loopback; use https")
	case u.Scheme == "":
		problems = append(problems, "has no scheme; use https")
	default:
		problems = append(problems, fmt.Sprintf("uses scheme %q; use https", u.Scheme))
	}
	if u.User != nil {
		problems = append(problems, "carries user information (user:password@); put credentials in the path or rely on the signature")
	}
	if strings.Contains(raw, "#") {
		problems = append(problems, "carries a fragment (#…), which is never sent")
	}
	if u.Opaque != "" || host == "" {
		problems = append(problems, "has no host")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			problems = append(problems, fmt.Sprintf("has port %q, outside 1 to 65535", port))
		}
	}
	if host != "" {
		problems = append(problems, hostProblems(host, p)...)
	}
	return problems
}

// hostProblems judges a host as written: an IP literal against the forbidden ranges, a name
// only by its spelling.
func hostProblems(host string, p Policy) []string {
	if addr, err := netip.ParseAddr(host); err == nil {
		if reason := refusal(addr, p); reason != "" {
			return []string{fmt.Sprintf("has host %s %s", host, reason)}
		}
		return nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if (name == "localhost" || strings.HasSuffix(name, ".localhost")) && !p.AllowLoopback {
		// Names under localhost stay on this machine (RFC 6761).
		return []string{fmt.Sprintf("has host %q, which is loopback", host)}
	}
	// No top-level domain is numeric, so a name whose last label is a number is an address in
	// one of the older spellings (127.1, 2130706433, 0x7f.0.0.1) that some resolvers accept.
	last := name[strings.LastIndexByte(name, '.')+1:]
	if last != "" && (strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x")) {
		return []string{fmt.Sprintf("has host %q, which reads as an IP address in a non-standard form", host)}
	}
	return nil
}

// isLoopbackHTTPHost reports whether plain http may go to host when loopback is allowed: a
// loopback IP literal, or localhost itself, which the hosts file keeps on loopback. Names under
// localhost are left out: a resolver may send them to DNS, and http must not leave the machine.
func isLoopbackHTTPHost(host string) bool {
	if addr, err := netip.ParseAddr(host); err == nil {
		return addr.Zone() == "" && addr.Unmap().IsLoopback()
	}
	return strings.TrimSuffix(strings.ToLower(host), ".") == "localhost"
}
