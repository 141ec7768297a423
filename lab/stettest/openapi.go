package stettest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/stetlabs/stet/api"
)

// contract is the validator of api.OpenAPI, built once per process; mu
// serializes its use (its caches are filled lazily).
var contract = sync.OnceValues(func() (validator.Validator, error) {
	doc, err := libopenapi.NewDocument(api.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("parse the OpenAPI document: %w", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, fmt.Errorf("build the OpenAPI validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return nil, fmt.Errorf("the OpenAPI document is not valid OpenAPI 3.1: %v", verrs)
	}
	return v, nil
})

var contractMu sync.Mutex

// CheckResponse validates one response of the API against its OpenAPI
// document (api/openapi.yaml): the path and method must be documented, the
// status listed for the operation, the content type declared and the body
// valid against its schema. It returns the problems, none if it conforms.
func CheckResponse(method, path string, status int, header http.Header, body []byte) []string {
	v, err := contract()
	if err != nil {
		return []string{err.Error()}
	}
	req, err := http.NewRequest(method, path, nil)
	if err != nil {
		return []string{err.Error()}
	}
	resp := &http.Response{StatusCode: status, Header: header, Body: io.NopCloser(bytes.NewReader(body)), Request: req}
	contractMu.Lock()
	ok, errs := v.ValidateHttpResponse(req, resp)
	contractMu.Unlock()
	if ok {
		return nil
	}
	var out []string
	for _, e := range errs {
		s := e.Message
		if e.Reason != "" {
			s += ": " + e.Reason
		}
		for _, se := range e.SchemaValidationErrors {
			s += fmt.Sprintf(" [%s: %s]", se.FieldPath, se.Reason)
		}
		out = append(out, s)
	}
	return out
}

// recorder passes a response through and keeps its status and body.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

// validating serves the API and checks every response it gives against the
// OpenAPI document, failing the test on the first one that does not
// conform. Not checked: the review UI (/ui/ and its redirect from /), which
// is HTML and no part of the API contract; the router's not-found fallback
// ("/", a 404 not-found problem for any undocumented path; its body is the
// api tests' business); and answers the router makes itself, with no route
// (405 for a known path with another method).
func (e *Env) validating(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/ui/") || r.URL.Path == "/" {
		e.API.ServeHTTP(w, r)
		return
	}
	rec := &recorder{ResponseWriter: w}
	e.API.ServeHTTP(rec, r)
	if r.Pattern == "" || r.Pattern == "/" {
		return
	}
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if problems := CheckResponse(r.Method, r.URL.RequestURI(), rec.status, w.Header().Clone(), rec.body.Bytes()); len(problems) > 0 {
		e.t.Errorf("%s %s (route %q) answered %d, which the OpenAPI document does not allow:\n  %s\nbody: %.600s",
			r.Method, r.URL.Path, r.Pattern, rec.status, strings.Join(problems, "\n  "), rec.body.Bytes())
	}
}
