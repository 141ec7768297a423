package processortest

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
)

// Faults maps each of the suite's Fault kinds onto the provider fake's
// own fault of type F: an adapter's conformance file states, as a table,
// which of its fake's faults answers each kind. Script applies a Script
// to it.
type Faults[F any] map[Fault]F

// Script returns the entry for s.Fault with what s carries copied into
// the entry's fields of the same names, where F has them: Message
// (after the entry's own message, when it has one, so a provider's
// fixed wording stays), and for RateLimit RetryAfter and RetryAfterMS.
// It panics when s.Fault has no entry: a harness that maps a kind must
// map all it does not list in Lacks.
func (m Faults[F]) Script(s Script) F {
	ft, ok := m[s.Fault]
	if !ok {
		panic(fmt.Sprintf("processortest: no fake fault for %q", s.Fault))
	}
	v := reflect.ValueOf(&ft).Elem()
	if s.Message != "" {
		if f := v.FieldByName("Message"); f.IsValid() {
			f.SetString(strings.TrimSpace(f.String() + " " + s.Message))
		}
	}
	if s.Fault == RateLimit {
		if f := v.FieldByName("RetryAfter"); f.IsValid() {
			f.SetString(s.RetryAfter)
		}
		if f := v.FieldByName("RetryAfterMS"); f.IsValid() {
			f.SetInt(int64(s.RetryAfterMS))
		}
	}
	return ft
}

// Reads says where a provider's successful answer carries what the
// Extraction must report: a header or a JSON path (dotted, as JSONField
// takes it) for the request ID, JSON paths for the model and the token
// counts (OutputTokens sums its paths), and the output the fake answers.
type Reads struct {
	RequestIDHeader string
	RequestID       string // used when RequestIDHeader is ""
	Model           string
	InputTokens     string
	OutputTokens    []string
	Output          string
}

// Answer reads header and body as r says; it is a Harness.Answer.
func (r Reads) Answer(header http.Header, body []byte) Answer {
	a := Answer{Model: JSONString(body, r.Model), InputTokens: JSONInt(body, r.InputTokens), Output: r.Output}
	if r.RequestIDHeader != "" {
		a.RequestID = header.Get(r.RequestIDHeader)
	} else {
		a.RequestID = JSONString(body, r.RequestID)
	}
	for _, p := range r.OutputTokens {
		a.OutputTokens += JSONInt(body, p)
	}
	return a
}
