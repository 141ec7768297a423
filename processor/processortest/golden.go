package processortest

import (
	"net/http"
	"testing"

	"github.com/stetlabs/stet"
)

// GoldenRepair is the repair history request-golden cases send: an answer
// outside the enum with properties missing, then JSON cut short.
var GoldenRepair = []stet.RepairTurn{
	{Output: []byte(`{"category":"maybe"}`), Problems: []string{`/category: value must be one of "ok", "harmful", "medical_advice"`, `/: missing properties "flags", "confidence"`}},
	{Output: []byte(`{"category":"ok","flags":[]`), Problems: []string{"not valid JSON"}},
}

// GoldenCase is one request-golden case: the golden file under testdata
// the request body must match, the repair turns the call carries, and
// With, what else the adapter's harness makes of the case.
type GoldenCase[C any] struct {
	Name   string
	File   string
	Repair []stet.RepairTurn
	With   C
}

// Calls is what ExerciseGolden needs of a fake: its call count.
type Calls interface{ Calls() int }

// GoldenHarness adapts one adapter, whose fake records requests of type R,
// to ExerciseGolden.
type GoldenHarness[C, R any] struct {
	// Open starts a fake whose answers are valid and which Sets each
	// request it receives on last, and returns it with the processor under
	// test configured for the case's With.
	Open func(t *testing.T, with C, last *Last[R]) (Calls, stet.Processor)
	// Params is what every case sends, before its Repair is added.
	Params stet.ExtractParams
	// Request returns a recorded request's header and body.
	Request func(R) (http.Header, []byte)
	// Header is what every request must carry in these headers ("": none).
	Header map[string]string
	// Bytes compares the body byte for byte (Golden) instead of indented
	// (GoldenJSON).
	Bytes bool
	// Check, when set, checks the request further.
	Check func(t *testing.T, tc GoldenCase[C], p stet.ExtractParams, req R)
}

// ExerciseGolden runs each case as a parallel subtest: one Extract that
// must succeed with one call, whose request carries h.Header and whose body
// matches the case's golden file.
func ExerciseGolden[C, R any](t *testing.T, h GoldenHarness[C, R], cases []GoldenCase[C]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			var last Last[R]
			f, proc := h.Open(t, tc.With, &last)
			p := h.Params
			p.Repair = tc.Repair
			if _, err := proc.Extract(t.Context(), p); err != nil {
				t.Fatalf("Extract() = %v, want success", err)
			}
			req := last.Get()
			header, body := h.Request(req)
			for k, want := range h.Header {
				if v := header.Get(k); v != want {
					t.Errorf("header %s = %q, want %q", k, v, want)
				}
			}
			if h.Bytes {
				Golden(t, tc.File, body)
			} else {
				GoldenJSON(t, tc.File, body)
			}
			if n := f.Calls(); n != 1 {
				t.Errorf("fake calls = %d, want 1", n)
			}
			if h.Check != nil {
				h.Check(t, tc, p, req)
			}
		})
	}
}
