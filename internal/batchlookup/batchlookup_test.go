package batchlookup

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stetlabs/stet"
)

// The text printout leads with the provider's batch ID (the ID
// `stet batch reconcile --adopt` takes); --json indents the provider's
// answer as stet's other --json output is, and passes a body that is not
// JSON through as it came.
func TestWriteText(t *testing.T) {
	t.Parallel()
	st := &stet.BatchStatus{ProviderID: "batch_abc", ProviderState: "in_progress", State: stet.BatchInProgress,
		Raw: []byte(`{"id":"batch_abc","status":"in_progress"}`)}
	var b bytes.Buffer
	WriteText(&b, "openai-fake", st, false)
	if first, _, _ := strings.Cut(b.String(), "\n"); first != "provider batch  batch_abc" {
		t.Errorf("first line = %q, want the provider batch ID", first)
	}
	b.Reset()
	WriteText(&b, "openai-fake", st, true)
	if want := "{\n  \"id\": \"batch_abc\",\n  \"status\": \"in_progress\"\n}\n"; b.String() != want {
		t.Errorf("--json = %q, want %q", b.String(), want)
	}
	b.Reset()
	st.Raw = []byte("not json")
	WriteText(&b, "openai-fake", st, true)
	if b.String() != "not json\n" {
		t.Errorf("--json of a non-JSON body = %q", b.String())
	}
}
