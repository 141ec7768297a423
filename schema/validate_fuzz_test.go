package schema

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// fuzzCanary is put in the seeds' keys and values; a problem line must
// never carry it (model output may quote the document).
const fuzzCanary = "Jane Roe"

// FuzzValidate: Validate, the check of model output against a profile's
// schema, never panics on any instance, and agrees with the library and
// with encoding/json: "not valid JSON" exactly when encoding/json finds the
// instance invalid; nil exactly when the library validates the decoded
// instance; otherwise sorted, bounded problem lines, each at a JSON pointer
// location, none carrying the canary the instance holds; the same lines
// again on a second call; and a valid instance stays valid re-encoded.
func FuzzValidate(f *testing.F) {
	for _, seed := range []string{
		`{"category": "none", "severity": 0, "summary": "ok"}`,
		`{"category": "harassment", "severity": 3, "summary": "x", "code": "ABC-12", "tags": ["a"]}`,
		`{"category": "` + fuzzCanary + `", "severity": "` + fuzzCanary + `", "summary": "x"}`,
		`{"category": "none", "severity": 1, "summary": "x", "` + fuzzCanary + `": "y"}`,
		`{"category": "none", "severity": 1, "summary": "x", "extra": {"` + fuzzCanary + `": "` + fuzzCanary + `"}}`,
		`{"category": "none", "severity": 1, "summary": "` + strings.Repeat(fuzzCanary, 9) + `", "code": "` + fuzzCanary + `", "tags": ["` + fuzzCanary + `", 5, null]}`,
		`{"category": `,
		`{} {}`,
		`[1, 2, 3]`,
		`1e999999`,
		`"\ud800"`,
	} {
		f.Add([]byte(seed))
	}
	s, err := Compile("fuzz", []byte(moderation))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, instance []byte) {
		got := s.Validate(instance)
		if !slices.Equal(s.Validate(instance), got) {
			t.Fatalf("Validate(%q) differs between two calls", instance)
		}
		v, decodeErr := jsonschema.UnmarshalJSON(bytes.NewReader(instance))
		if (decodeErr != nil) != !json.Valid(instance) {
			t.Fatalf("Validate(%q): the library decodes it (%v) but encoding/json's Valid = %v", instance, decodeErr, json.Valid(instance))
		}
		if decodeErr != nil {
			if !slices.Equal(got, []string{"not valid JSON"}) {
				t.Fatalf("Validate(%q) = %q, want [not valid JSON]", instance, got)
			}
			return
		}
		libValid := s.compiled.Validate(v) == nil
		if (got == nil) != libValid {
			t.Fatalf("Validate(%q) = %q; the library says valid %v", instance, got, libValid)
		}
		if got == nil {
			var compact bytes.Buffer
			if err := json.Compact(&compact, instance); err != nil {
				t.Fatalf("json.Compact(%q) = %v", instance, err)
			}
			if again := s.Validate(compact.Bytes()); again != nil {
				t.Fatalf("Validate(%q) = nil, but compacted = %q", instance, again)
			}
			return
		}
		if len(got) > maxProblems+1 || !slices.IsSorted(got[:min(len(got), maxProblems)]) {
			t.Fatalf("Validate(%q) = %d lines, want at most %d, sorted", instance, len(got), maxProblems+1)
		}
		for _, line := range got {
			if strings.Contains(line, fuzzCanary) {
				t.Fatalf("Validate(%q): problem %q carries the instance's text", instance, line)
			}
			if !strings.HasPrefix(line, "/") && !strings.HasPrefix(line, "… and ") {
				t.Fatalf("Validate(%q): problem %q does not start at a location", instance, line)
			}
		}
	})
}
