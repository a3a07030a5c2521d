// Package api holds the contract of Ferry's HTTP API as an OpenAPI 3.1 document, embedded in the
// binary so that ferry dev serves exactly the document the tests validate the handlers against.
package api

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3.1 document of the HTTP API (openapi.yaml).
//
//go:embed openapi.yaml
var OpenAPI []byte

// ContentType is the media type the document is served as (RFC 9512).
const ContentType = "application/yaml"

// Handler serves the document.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ContentType)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(OpenAPI)
	})
}
