package api

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"go.yaml.in/yaml/v3"
)

// openapiYAML is the API's contract, hand-written (api/openapi.yaml).
//
//go:embed openapi.yaml
var openapiYAML []byte

// OpenAPI returns the OpenAPI 3.1 document of every route and problem type,
// as JSON: the body of GET /v1/openapi.json.
var OpenAPI = sync.OnceValue(func() []byte {
	var doc any
	if err := yaml.Unmarshal(openapiYAML, &doc); err != nil {
		panic(fmt.Sprintf("api/openapi.yaml: %v", err)) // a test parses it on every run
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(fmt.Sprintf("api/openapi.yaml as JSON: %v", err))
	}
	return b
})

// Routes returns the patterns registered on the server's router, in
// registration order ("GET /v1/jobs/{job_id}", "/" for the not-found
// fallback, "/ui/" once the UI is mounted).
func (s *Server) Routes() []string { return append([]string(nil), s.patterns...) }

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(OpenAPI())
}
