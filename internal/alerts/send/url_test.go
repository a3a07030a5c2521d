package send

import (
	"slices"
	"strings"
	"testing"
)

func TestCheckURL(t *testing.T) {
	strict, dev := Policy{}, Policy{AllowLoopback: true}
	long := "https://hooks.example.com/" + strings.Repeat("a", MaxURLBytes)
	cases := []struct {
		name   string
		raw    string
		policy Policy
		want   []string
	}{
		{"https", "https://hooks.example.com/ferry", strict, nil},
		{"https with port and query", "https://hooks.example.com:8443/ferry?team=7", strict, nil},
		{"public IPv4 literal", "https://1.1.1.1/ferry", strict, nil},
		{"public IPv6 literal", "https://[2606:4700::1111]/ferry", strict, nil},
		{"trailing dot", "https://hooks.example.com./ferry", strict, nil},
		{"dev http to 127.0.0.1", "http://127.0.0.1:8080/hook", dev, nil},
		{"dev http to localhost", "http://localhost:3000/hook", dev, nil},
		{"dev http to ::1", "http://[::1]:3000/hook", dev, nil},
		{"dev https to localhost", "https://localhost:3000/hook", dev, nil},
		{"dev https to a name", "https://hooks.example.com/ferry", dev, nil},

		{"http", "http://hooks.example.com/ferry", strict, []string{
			`uses scheme "http"; use https`,
		}},
		{"loopback http outside dev", "http://127.0.0.1:8080/hook", strict, []string{
			"uses http to a loopback host, which only `ferry dev` allows; use https",
			"has host 127.0.0.1 in the loopback range 127.0.0.0/8",
		}},
		{"localhost outside dev", "https://localhost:8443/hook", strict, []string{
			`has host "localhost", which is loopback`,
		}},
		{"name under localhost outside dev", "https://api.localhost/hook", strict, []string{
			`has host "api.localhost", which is loopback`,
		}},
		{"dev http to a name", "http://hooks.example.com/ferry", dev, []string{
			"uses http to a host that is not loopback; use https",
		}},
		{"dev http to a name under localhost", "http://api.localhost/hook", dev, []string{
			"uses http to a host that is not loopback; use https",
		}},
		{"dev http to a private address", "http://10.0.0.1/hook", dev, []string{
			"uses http to a host that is not loopback; use https",
			"has host 10.0.0.1 in the private range 10.0.0.0/8",
		}},
		{"ftp", "ftp://hooks.example.com/ferry", strict, []string{
			`uses scheme "ftp"; use https`,
		}},
		{"no scheme", "hooks.example.com/ferry", strict, []string{
			"has no scheme; use https",
			"has no host",
		}},
		{"empty", "", strict, []string{
			"has no scheme; use https",
			"has no host",
		}},
		{"no host", "https:///ferry", strict, []string{"has no host"}},
		{"opaque", "https:hooks.example.com", strict, []string{"has no host"}},
		{"userinfo", "https://user:secret@hooks.example.com/ferry", strict, []string{
			"carries user information (user:password@); put credentials in the path or rely on the signature",
		}},
		{"fragment", "https://hooks.example.com/ferry#top", strict, []string{
			"carries a fragment (#…), which is never sent",
		}},
		{"empty fragment", "https://hooks.example.com/ferry#", strict, []string{
			"carries a fragment (#…), which is never sent",
		}},
		{"port zero", "https://hooks.example.com:0/ferry", strict, []string{
			`has port "0", outside 1 to 65535`,
		}},
		{"port too high", "https://hooks.example.com:70000/ferry", strict, []string{
			`has port "70000", outside 1 to 65535`,
		}},
		{"too long", long, strict, []string{
			"is 2074 bytes long, over the limit of 2048",
		}},
		{"space", "https://hooks.example.com/a b", strict, []string{
			"contains whitespace or control characters",
		}},
		{"newline", "https://hooks.example.com/ferry\n", strict, []string{
			"contains whitespace or control characters",
			"cannot be parsed: net/url: invalid control character in URL",
		}},
		{"no-break space", "https://hooks.example.com/a\u00a0b", strict, []string{
			"contains whitespace or control characters",
		}},
		{"metadata service", "https://169.254.169.254/latest/meta-data/", strict, []string{
			"has host 169.254.169.254 in the link-local range 169.254.0.0/16",
		}},
		{"metadata service in dev", "https://169.254.169.254/latest/meta-data/", dev, []string{
			"has host 169.254.169.254 in the link-local range 169.254.0.0/16",
		}},
		{"private", "https://10.0.0.1/hook", strict, []string{
			"has host 10.0.0.1 in the private range 10.0.0.0/8",
		}},
		{"CGNAT", "https://100.64.0.1/hook", strict, []string{
			"has host 100.64.0.1 in the shared (CGNAT) range 100.64.0.0/10",
		}},
		{"IPv6 loopback", "https://[::1]/hook", strict, []string{
			"has host ::1 in the loopback range ::1/128",
		}},
		{"IPv4-mapped loopback", "https://[::ffff:127.0.0.1]/hook", strict, []string{
			"has host ::ffff:127.0.0.1 in the loopback range 127.0.0.0/8",
		}},
		{"IPv4-mapped metadata", "https://[::ffff:169.254.169.254]/hook", strict, []string{
			"has host ::ffff:169.254.169.254 in the link-local range 169.254.0.0/16",
		}},
		{"unspecified", "https://0.0.0.0/hook", strict, []string{
			"has host 0.0.0.0 in the this-network range 0.0.0.0/8",
		}},
		{"zoned link-local", "https://[fe80::1%25eth0]/hook", strict, []string{
			"has host fe80::1%eth0 scoped to an interface",
		}},
		{"decimal IPv4", "https://2130706433/hook", strict, []string{
			`has host "2130706433", which reads as an IP address in a non-standard form`,
		}},
		{"short IPv4", "https://127.1/hook", strict, []string{
			`has host "127.1", which reads as an IP address in a non-standard form`,
		}},
		{"hex IPv4", "https://0x7f000001/hook", strict, []string{
			`has host "0x7f000001", which reads as an IP address in a non-standard form`,
		}},
		{"every problem at once", "http://user:pw@10.0.0.1:0/hook#frag", strict, []string{
			`uses scheme "http"; use https`,
			"carries user information (user:password@); put credentials in the path or rely on the signature",
			"carries a fragment (#…), which is never sent",
			`has port "0", outside 1 to 65535`,
			"has host 10.0.0.1 in the private range 10.0.0.0/8",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := CheckURL(c.raw, c.policy)
			if !slices.Equal(got, c.want) {
				t.Errorf("CheckURL(%q) =\n\t%q\nwant\n\t%q", c.raw, got, c.want)
			}
		})
	}
}
