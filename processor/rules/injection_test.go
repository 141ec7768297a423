package rules

import (
	"bytes"
	"context"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor/processortest"
)

// TestInjection: the rules processor reads no instructions, so every
// injection document gets a record the schema accepts, with a category
// from the enum the rules decided, never one the document named.
func TestInjection(t *testing.T) {
	t.Parallel()
	s := compileSchema(t)
	p := quickstart(t)
	for _, doc := range processortest.Injections() {
		t.Run(doc.Name, func(t *testing.T) {
			t.Parallel()
			x, err := p.Extract(context.Background(), stet.ExtractParams{JobID: "job_1",
				Prompt: stet.NewText(processortest.InjectionPrompt(doc.Text)), Input: stet.NewText(doc.Text),
				Schema: readFile(t, quickstartSchema)})
			if err != nil {
				t.Fatalf("Extract(%s) = %v", doc.Name, err)
			}
			v, err := jsonschema.UnmarshalJSON(bytes.NewReader(x.Output))
			if err != nil {
				t.Fatalf("Extract(%s) output %s: %v", doc.Name, x.Output, err)
			}
			if err := s.Validate(v); err != nil {
				t.Errorf("Extract(%s) output %s does not match the schema: %v", doc.Name, x.Output, err)
			}
			if m := extract(t, p, doc.Text, readFile(t, quickstartSchema)); m.Category == "approved" || m.Severity == "trusted" || m.Action == "promote" {
				t.Errorf("Extract(%s) = %+v, the document chose its own category", doc.Name, m)
			}
		})
	}
}
