// Package console is Ferry's operator console: a small set of pages, plain HTML, CSS and
// JavaScript modules with no framework and nothing fetched from anywhere else, embedded in the
// binary, and the labs it runs live. The page itself holds no data and no credential: signing
// in exchanges the operator key for a session cookie the page cannot read (package session),
// and everything the page shows or does goes through Ferry's own HTTP API, with the same
// authentication, idempotency keys and checks a client gets.
package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
)

//go:embed assets
var assets embed.FS

// ContentSecurityPolicy is sent with every console answer. Scripts, styles, images and requests
// come from the console's own origin only; no inline script or style and no eval run (the page
// builds its DOM with createElement and textContent, never from HTML strings, which Trusted Types
// enforces); the page cannot be framed, cannot post forms elsewhere, and has no base URL or
// plugin to hijack.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; " +
	"frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types 'none'"

// SecurityHeaders are sent with every console answer, beside the Content-Security-Policy.
var SecurityHeaders = map[string]string{
	"Content-Security-Policy":      ContentSecurityPolicy,
	"X-Content-Type-Options":       "nosniff",
	"X-Frame-Options":              "DENY",
	"Referrer-Policy":              "no-referrer",
	"Cross-Origin-Opener-Policy":   "same-origin",
	"Cross-Origin-Resource-Policy": "same-origin",
	"Permissions-Policy":           "camera=(), microphone=(), geolocation=(), payment=()",
}

// Asset is one embedded file as it is served.
type Asset struct {
	Name        string
	Body        []byte
	ContentType string
	// ETag is a strong validator of the body (its SHA-256).
	ETag string
}

// Assets are the console's embedded files.
type Assets struct {
	page  Asset
	files map[string]Asset
}

// contentTypes are the media types of the console's files, by extension; a file of any other
// extension is not served.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
}

// assetName is what the name of a served asset looks like: one path segment.
var assetName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,63}$`)

// pageFile is the console's one page; every view of it is a fragment of its URL (/console#/…).
const pageFile = "index.html"

// Load reads the embedded files.
func Load() (*Assets, error) {
	a := &Assets{files: map[string]Asset{}}
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := path.Base(p)
		ct, ok := contentTypes[path.Ext(name)]
		if !ok || !assetName.MatchString(name) {
			return fmt.Errorf("console asset %s: not a name or type the console serves", p)
		}
		body, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		asset := Asset{Name: name, Body: body, ContentType: ct, ETag: `"` + hex.EncodeToString(sum[:16]) + `"`}
		if name == pageFile {
			a.page = asset
			return nil
		}
		a.files[name] = asset
		return nil
	})
	if err != nil {
		return nil, err
	}
	if a.page.Body == nil {
		return nil, fmt.Errorf("console: no %s", pageFile)
	}
	return a, nil
}

// MustLoad is Load for a composition root: the files are compiled in, so a failure is a build
// defect.
func MustLoad() *Assets {
	a, err := Load()
	if err != nil {
		panic(err)
	}
	return a
}

// Page is the console's page.
func (a *Assets) Page() Asset { return a.page }

// Lookup returns a served asset by name.
func (a *Assets) Lookup(name string) (Asset, bool) {
	if !assetName.MatchString(name) || strings.Contains(name, "..") {
		return Asset{}, false
	}
	f, ok := a.files[name]
	return f, ok
}

// Names lists the served assets (not the page), for tests.
func (a *Assets) Names() []string {
	var names []string
	for n := range a.files {
		names = append(names, n)
	}
	return names
}
