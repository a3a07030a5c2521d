package send

import (
	"errors"
	"net/netip"
	"testing"
)

func TestCheckAddr_ForbiddenRangesAndPolicy(t *testing.T) {
	cases := []struct {
		addr string
		// strict is whether the production policy allows the address; dev whether `ferry dev`'s
		// does.
		strict, dev bool
	}{
		{"1.1.1.1", true, true},
		{"8.8.8.8", true, true},
		{"2606:4700::1111", true, true},
		{"2a05:d014::1", true, true},
		{"::ffff:1.1.1.1", true, true},
		{"172.32.0.1", true, true},
		{"100.128.0.1", true, true},
		{"169.253.255.255", true, true},

		{"127.0.0.1", false, true},
		{"127.255.255.254", false, true},
		{"::1", false, true},
		{"::ffff:127.0.0.1", false, true},

		{"169.254.169.254", false, false},
		{"::ffff:169.254.169.254", false, false},
		{"fd00:ec2::254", false, false},
		{"10.0.0.1", false, false},
		{"::ffff:10.0.0.1", false, false},
		{"172.16.0.1", false, false},
		{"172.31.255.255", false, false},
		{"192.168.1.1", false, false},
		{"100.64.0.1", false, false},
		{"100.127.255.255", false, false},
		{"0.0.0.0", false, false},
		{"0.1.2.3", false, false},
		{"::", false, false},
		{"::127.0.0.1", false, false},
		{"224.0.0.1", false, false},
		{"239.255.255.250", false, false},
		{"255.255.255.255", false, false},
		{"240.0.0.1", false, false},
		{"192.0.0.192", false, false},
		{"fc00::1", false, false},
		{"fe80::1", false, false},
		{"fe80::1%eth0", false, false},
		{"ff02::1", false, false},
		{"64:ff9b::a9fe:a9fe", false, false},
	}
	for _, c := range cases {
		addr := netip.MustParseAddr(c.addr)
		for _, p := range []struct {
			name   string
			policy Policy
			want   bool
		}{
			{"strict", Policy{}, c.strict},
			{"dev", Policy{AllowLoopback: true}, c.dev},
		} {
			err := checkAddr(addr, p.policy)
			if got := err == nil; got != p.want {
				t.Errorf("checkAddr(%s, %s) = %v, want allowed=%v", c.addr, p.name, err, p.want)
			}
			if err != nil && !errors.Is(err, ErrForbiddenAddress) {
				t.Errorf("checkAddr(%s, %s) = %v, want ErrForbiddenAddress", c.addr, p.name, err)
			}
		}
	}
}

func TestCheckAddr_InvalidAddressRefused(t *testing.T) {
	if err := checkAddr(netip.Addr{}, Policy{AllowLoopback: true}); !errors.Is(err, ErrForbiddenAddress) {
		t.Fatalf("checkAddr(zero) = %v, want ErrForbiddenAddress", err)
	}
}

// The dialer's control function sees "ip:port" strings as the runtime formats them; it must refuse
// without ever touching the socket (it is given none here).
func TestPolicyControl_RefusesBeforeConnecting(t *testing.T) {
	cases := []struct {
		network, address string
		allowed          bool
	}{
		{"tcp4", "169.254.169.254:80", false},
		{"tcp4", "10.0.0.1:443", false},
		{"tcp4", "127.0.0.1:443", false},
		{"tcp6", "[::1]:443", false},
		{"tcp6", "[::ffff:127.0.0.1]:443", false},
		{"tcp6", "[::ffff:169.254.169.254]:80", false},
		{"tcp6", "[fe80::1%eth0]:443", false},
		{"udp4", "1.1.1.1:53", false},
		{"tcp4", "not-an-address:443", false},
		{"tcp4", "1.1.1.1:443", true},
		{"tcp6", "[2606:4700::1111]:443", true},
	}
	for _, c := range cases {
		err := Policy{}.control(c.network, c.address, nil)
		if got := err == nil; got != c.allowed {
			t.Errorf("control(%s, %s) = %v, want allowed=%v", c.network, c.address, err, c.allowed)
		}
		if err != nil && !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("control(%s, %s) = %v, want ErrForbiddenAddress", c.network, c.address, err)
		}
	}
}

// Every range is stated once, in canonical form, so a typo (172.16.0.0/21) cannot hide.
func TestForbiddenRanges_Canonical(t *testing.T) {
	for _, r := range forbiddenRanges {
		if r.prefix != r.prefix.Masked() {
			t.Errorf("range %s is not canonical; want %s", r.prefix, r.prefix.Masked())
		}
		if r.name == "" {
			t.Errorf("range %s has no name", r.prefix)
		}
	}
}
