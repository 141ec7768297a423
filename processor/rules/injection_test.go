package rules

import (
	"context"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor/processortest"
	"github.com/stetlabs/stet/schema"
)

// TestInjection: the rules processor reads no instructions, so every
// injection document gets a record the schema accepts, with a category
// from the enum the rules decided, never one the document named.
func TestInjection(t *testing.T) {
	t.Parallel()
	schemaDoc := processortest.ReadFile(t, processortest.QuickstartSchema)
	s, err := schema.Compile("moderation", schemaDoc)
	if err != nil {
		t.Fatal(err)
	}
	p := quickstart(t)
	for _, doc := range processortest.Injections() {
		t.Run(doc.Name, func(t *testing.T) {
			t.Parallel()
			x, err := p.Extract(context.Background(), stet.ExtractParams{JobID: "job_1",
				Prompt: stet.NewText(processortest.InjectionPrompt(doc.Text)), Input: stet.NewText(doc.Text),
				Schema: schemaDoc})
			if err != nil {
				t.Fatalf("Extract(%s) = %v", doc.Name, err)
			}
			if problems := s.Validate(x.Output); len(problems) > 0 {
				t.Errorf("Extract(%s) output %s does not match the schema: %v", doc.Name, x.Output, problems)
			}
			if m := extract(t, p, doc.Text, schemaDoc); m.Category == "approved" || m.Severity == "trusted" || m.Action == "promote" {
				t.Errorf("Extract(%s) = %+v, the document chose its own category", doc.Name, m)
			}
		})
	}
}
