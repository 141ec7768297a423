package azurecs

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet/processor/azurecs/azurecsfake"
	"github.com/stetlabs/stet/processor/processortest"
	"github.com/stetlabs/stet/schema"
)

// TestInjection: Content Safety takes the document alone, never a prompt,
// and stet builds the record from severities, so whatever a document
// says, the record is one the schema accepts.
func TestInjection(t *testing.T) {
	t.Parallel()
	v, err := schema.Compile("moderation_v1", processortest.ReadFile(t, processortest.QuickstartSchema))
	if err != nil {
		t.Fatal(err)
	}
	answers := []azurecsfake.Severities{
		{},
		{"Hate": 6, "SelfHarm": 6, "Sexual": 6, "Violence": 6},
		{"Hate": 2, "Violence": 4},
	}
	for _, doc := range processortest.Injections() {
		for i, sev := range answers {
			t.Run(fmt.Sprintf("%s/%d", doc.Name, i), func(t *testing.T) {
				t.Parallel()
				var got processortest.Bodies
				f := newFake(t, azurecsfake.Options{Respond: func(req azurecsfake.Request) azurecsfake.Severities {
					got.Add(req.Body)
					return sev
				}})
				c := newTestClient(t, f, 10*time.Second)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				ext, err := c.Extract(ctx, testParams(t, doc.Text))
				if err != nil {
					t.Fatalf("Extract(%s) = %v", doc.Name, err)
				}
				if problems := v.Validate(ext.Output); len(problems) > 0 {
					t.Errorf("Extract(%s) Output = %s, schema problems %q", doc.Name, ext.Output, problems)
				}
				bodies := got.All()
				if len(bodies) != 1 {
					t.Fatalf("fake received %d requests, want 1", len(bodies))
				}
				var body map[string]json.RawMessage
				if err := json.Unmarshal(bodies[0], &body); err != nil {
					t.Fatal(err)
				}
				var text string
				_ = json.Unmarshal(body["text"], &text)
				if text != doc.Text {
					t.Errorf("request text = %q, want the document", text)
				}
				if strings.Contains(string(bodies[0]), "PROMPT-NOT-SENT") {
					t.Error("request carries the prompt")
				}
				for k := range body {
					if !slices.Contains([]string{"text", "categories", "outputType", "blocklistNames", "haltOnBlocklistHit"}, k) {
						t.Errorf("request has field %q", k)
					}
				}
			})
		}
	}
}
