package send

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
)

// ErrForbiddenAddress says a delivery would have connected to an address Ferry never sends to
// (loopback outside `ferry dev`, private, link-local, metadata, …). It is not retryable.
var ErrForbiddenAddress = errors.New("forbidden address")

// Policy says where deliveries may go beyond the public internet. The zero value is the
// production policy: https only, public addresses only.
type Policy struct {
	// AllowLoopback lets deliveries reach loopback addresses (127.0.0.0/8, ::1), over http as
	// well as https. Only `ferry dev` sets it, so a developer's receiver on 127.0.0.1 works;
	// everything else in forbiddenRanges stays forbidden even then.
	AllowLoopback bool
}

// addressRange is one range of addresses Ferry never connects to.
type addressRange struct {
	prefix netip.Prefix
	name   string
	// loopback marks the ranges that Policy.AllowLoopback lets through.
	loopback bool
}

// forbiddenRanges are the addresses a delivery may not connect to. They are addresses of this
// host, of Ferry's own network, or of no single public host. Addresses are compared after
// unmapping, so ::ffff:169.254.169.254 falls in 169.254.0.0/16.
var forbiddenRanges = []addressRange{
	{prefix: netip.MustParsePrefix("0.0.0.0/8"), name: "this-network"},
	{prefix: netip.MustParsePrefix("10.0.0.0/8"), name: "private"},
	{prefix: netip.MustParsePrefix("100.64.0.0/10"), name: "shared (CGNAT)"},
	{prefix: netip.MustParsePrefix("127.0.0.0/8"), name: "loopback", loopback: true},
	// 169.254.169.254 is the instance metadata service (credentials, on EC2 and elsewhere).
	{prefix: netip.MustParsePrefix("169.254.0.0/16"), name: "link-local"},
	{prefix: netip.MustParsePrefix("172.16.0.0/12"), name: "private"},
	// 192.0.0.0/24 holds protocol assignments, some clouds' metadata among them (192.0.0.192).
	{prefix: netip.MustParsePrefix("192.0.0.0/24"), name: "protocol assignments"},
	{prefix: netip.MustParsePrefix("192.0.2.0/24"), name: "documentation"},
	{prefix: netip.MustParsePrefix("192.168.0.0/16"), name: "private"},
	{prefix: netip.MustParsePrefix("198.18.0.0/15"), name: "benchmarking"},
	{prefix: netip.MustParsePrefix("198.51.100.0/24"), name: "documentation"},
	{prefix: netip.MustParsePrefix("203.0.113.0/24"), name: "documentation"},
	{prefix: netip.MustParsePrefix("224.0.0.0/4"), name: "multicast"},
	{prefix: netip.MustParsePrefix("255.255.255.255/32"), name: "broadcast"},
	{prefix: netip.MustParsePrefix("240.0.0.0/4"), name: "reserved"},

	{prefix: netip.MustParsePrefix("::/128"), name: "unspecified"},
	{prefix: netip.MustParsePrefix("::1/128"), name: "loopback", loopback: true},
	// The deprecated IPv4-compatible form (::a.b.c.d); no public host uses it.
	{prefix: netip.MustParsePrefix("::/96"), name: "IPv4-compatible"},
	// A NAT64 address carries an IPv4 address that the translator reaches from inside the
	// network, so it could reach a private IPv4 host; Ferry has IPv4 egress and needs neither.
	{prefix: netip.MustParsePrefix("64:ff9b::/96"), name: "NAT64"},
	{prefix: netip.MustParsePrefix("64:ff9b:1::/48"), name: "NAT64"},
	{prefix: netip.MustParsePrefix("100::/64"), name: "discard-only"},
	{prefix: netip.MustParsePrefix("2001:db8::/32"), name: "documentation"},
	// fc00::/7 includes the IPv6 instance metadata service, fd00:ec2::254.
	{prefix: netip.MustParsePrefix("fc00::/7"), name: "unique local (private)"},
	{prefix: netip.MustParsePrefix("fe80::/10"), name: "link-local"},
	{prefix: netip.MustParsePrefix("fec0::/10"), name: "site-local"},
	{prefix: netip.MustParsePrefix("ff00::/8"), name: "multicast"},
}

// checkAddr returns nil if a delivery may connect to addr under p, and an error wrapping
// ErrForbiddenAddress that names the range otherwise.
func checkAddr(addr netip.Addr, p Policy) error {
	if reason := refusal(addr, p); reason != "" {
		return fmt.Errorf("%w: %s %s", ErrForbiddenAddress, addr, reason)
	}
	return nil
}

// refusal says why a delivery may not connect to addr under p ("in the private range
// 10.0.0.0/8"), or returns "" if it may.
func refusal(addr netip.Addr, p Policy) string {
	if !addr.IsValid() {
		return "not a valid address"
	}
	// A zone scopes an address to one interface of this host: only link-local and multicast
	// addresses take one, and both are forbidden. Prefix.Contains never matches a zoned address,
	// so it is refused here rather than let through below.
	if addr.Zone() != "" {
		return "scoped to an interface"
	}
	a := addr.Unmap()
	for _, r := range forbiddenRanges {
		if !r.prefix.Contains(a) {
			continue
		}
		if r.loopback && p.AllowLoopback {
			return ""
		}
		return fmt.Sprintf("in the %s range %s", r.name, r.prefix)
	}
	return ""
}

// control is the dialer's last word on every connection: it runs after DNS resolution, once per
// address tried, before the socket connects. address is the "ip:port" about to be dialled.
func (p Policy) control(network, address string, _ syscall.RawConn) error {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return fmt.Errorf("%w: network %q", ErrForbiddenAddress, network)
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse %q: %v", ErrForbiddenAddress, address, err)
	}
	return checkAddr(ap.Addr(), p)
}
