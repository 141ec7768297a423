package processortest

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stetlabs/stet"
)

// CheckBatchResults checks what an adapter's batch result decoder made of
// input, a results file or answer, as each adapter's batch fuzz target
// does. Every result names a job, once; the job ID is the value of one of
// idKeys somewhere in input, read by a plain JSON decode of the whole input
// or of one of its lines (the decoder attributes no result to a job the
// provider did not name); it carries exactly one of an extraction and an
// error, each as CheckOutcome wants them; and an extraction's Raw is a
// verbatim part of input.
func CheckBatchResults(t *testing.T, input []byte, results []stet.BatchResult, idKeys ...string) {
	t.Helper()
	named := namedIDs(input, idKeys)
	seen := map[string]bool{}
	for _, r := range results {
		switch {
		case r.JobID == "":
			t.Fatalf("a batch result names no job: %+v", r)
		case seen[r.JobID]:
			t.Fatalf("batch results name job %q twice", r.JobID)
		case !named[r.JobID]:
			t.Fatalf("a batch result names job %q, which the input does not name under %v", r.JobID, idKeys)
		case (r.Extraction == nil) == (r.Err == nil):
			t.Fatalf("batch result of %q: extraction %v and error %v, want exactly one", r.JobID, r.Extraction != nil, r.Err)
		}
		seen[r.JobID] = true
		CheckOutcome(t, r.Extraction, r.Err)
		if r.Extraction != nil && (len(r.Extraction.Raw) == 0 || !bytes.Contains(input, r.Extraction.Raw)) {
			t.Fatalf("batch result of %q: Raw (%d bytes) is not a part of the input as received", r.JobID, len(r.Extraction.Raw))
		}
	}
}

// namedIDs returns every string value of a key in keys (in any case), at
// any depth, in
// input read as one JSON document and line by line.
func namedIDs(input []byte, keys []string) map[string]bool {
	// encoding/json matches a struct field's key case-insensitively.
	want := func(k string) bool {
		for _, key := range keys {
			if strings.EqualFold(k, key) {
				return true
			}
		}
		return false
	}
	ids := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				if s, ok := child.(string); ok && want(k) {
					ids[s] = true
				}
				walk(child)
			}
		case []any:
			for _, child := range v {
				walk(child)
			}
		}
	}
	for _, doc := range append([][]byte{input}, bytes.Split(input, []byte("\n"))...) {
		var v any
		if json.Unmarshal(doc, &v) == nil {
			walk(v)
		}
	}
	return ids
}
