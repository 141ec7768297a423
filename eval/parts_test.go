package eval

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/config"
)

// A profile with parts is evaluated as it runs in production: the part
// that names its processor ("specialist", priced) extracts its fields in
// every run, the asked processor the rest; each is sent only its fields'
// schema, the fields are scored on the merged record, and the cost adds
// each processor's tokens at its own price.
func TestRunEvaluatesPartsAsInProduction(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	prof, err := filepath.Abs(filepath.Join("..", "examples", "quickstart", "profiles"))
	if err != nil {
		t.Fatal(err)
	}
	yaml := `database: sqlite://prod.db
tenants: [{id: demo, tokens: [{name: ops, role: operator, token_env: T}]}]
sources: [{id: s, tenant: demo, secret_env: S, profile: moderation, policy: standard}]
profiles:
  - id: moderation
    version: 1
    schema: ` + prof + `/moderation.schema.json
    prompt: ` + prof + `/moderation.prompt.tmpl
    parts:
      - {id: triage, fields: [category, severity, action], processors: [specialist]}
      - {id: notes, fields: "*"}
processors:
  - {id: oracle, kind: rules, rules: ` + prof + `/moderation.rules.yaml, region: local, retention: none}
  - {id: specialist, kind: openai, base_url: "http://127.0.0.1:1/v1", api_key_env: K, model: m, region: us, retention: none, price: {input_per_mtok: 1, output_per_mtok: 2}}
policies:
  - {id: standard, processors: [oracle, specialist], minimize: [email, phone]}
workers: {concurrency: 4}
`
	path := filepath.Join(dir, "stet.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadWithoutSecrets(path, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	items := testItems(10)
	rest, spec := &oracle{items: items}, &oracle{id: "specialist", items: items}
	rep, err := Run(context.Background(), Params{Config: cfg, Profile: "moderation", Items: items, Processors: []string{"oracle"},
		Out: t.TempDir(), New: func(pc *config.Processor) (stet.Processor, error) {
			if pc.ID == "specialist" {
				return spec, nil
			}
			return rest, nil
		}})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if a, b := rest.calls.Load(), spec.calls.Load(); a != 10 || b != 10 {
		t.Errorf("calls = %d (oracle) and %d (specialist), want 10 and 10: one per part and document", a, b)
	}
	for name, o := range map[string]*oracle{"oracle": rest, "specialist": spec} {
		want := map[string][]string{"oracle": {"labels", "rationale"}, "specialist": {"category", "severity", "action"}}[name]
		for _, got := range o.schemas {
			if !slices.Equal(got, want) {
				t.Errorf("%s was sent a schema of %v, want %v", name, got, want)
				break
			}
		}
	}
	if len(rep.Processors) != 1 {
		t.Fatalf("report processors = %d, want 1", len(rep.Processors))
	}
	o := rep.Processors[0]
	// The specialist answers category wrong on document 3 of 0..9.
	if o.Fields[0].Name != "category" || o.Fields[0].Accuracy != 0.9 {
		t.Errorf("field %s accuracy = %v, want category 0.9", o.Fields[0].Name, o.Fields[0].Accuracy)
	}
	if o.ManualRate != 0 || o.Tokens.Calls != 20 || o.Tokens.Input != 2000 || o.Tokens.Output != 400 {
		t.Errorf("manual rate %v, tokens %+v; want 0, 20 calls, 2000 in, 400 out", o.ManualRate, o.Tokens)
	}
	// The specialist's 1000 input and 200 output tokens at 1 and 2 per
	// million; the rules processor is free.
	if !o.Cost.Priced || o.Cost.Total < 0.0013999 || o.Cost.Total > 0.0014001 {
		t.Errorf("cost = %+v, want priced, 0.0014", o.Cost)
	}
}
