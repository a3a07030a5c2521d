package kinde_test

import (
	"testing"

	kindewebhook "github.com/ferrymeter/ferry/internal/webhooks/kinde"
)

func TestCheckURL_HTTPSOrLoopbackOnly(t *testing.T) {
	for url, ok := range map[string]bool{
		"https://acme.kinde.com/.well-known/jwks": true,
		"http://127.0.0.1:9000/.well-known/jwks":  true,
		"http://[::1]:9000/.well-known/jwks":      true,
		"http://localhost:9000/.well-known/jwks":  true,
		"http://acme.kinde.com/.well-known/jwks":  false,
		"http://10.0.0.1/.well-known/jwks":        false,
		"ftp://acme.kinde.com/jwks":               false,
		"acme.kinde.com/.well-known/jwks":         false,
	} {
		if err := kindewebhook.CheckURL(url); (err == nil) != ok {
			t.Errorf("CheckURL(%q) = %v; want ok=%v", url, err, ok)
		}
	}
	if _, err := kindewebhook.New(kindewebhook.Config{JWKSURL: "http://acme.kinde.com/.well-known/jwks"}); err == nil {
		t.Error("a verifier was built on a JWKS URL in the clear")
	}
}

func TestJWKSURLFor_TheBusinessDomainsKeys(t *testing.T) {
	for domain, want := range map[string]string{
		"acme.kinde.com":          "https://acme.kinde.com/.well-known/jwks",
		"https://acme.kinde.com/": "https://acme.kinde.com/.well-known/jwks",
		"https://auth.acme.com":   "https://auth.acme.com/.well-known/jwks",
	} {
		if got := kindewebhook.JWKSURLFor(domain); got != want {
			t.Errorf("JWKSURLFor(%q) = %q; want %q", domain, got, want)
		}
	}
}
