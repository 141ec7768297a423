package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// The keys stet eval reads: processors[].price and profiles[].acceptance.
func TestLoadEvalKeys(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(readExample(t), "    prompt: profiles/moderation.prompt.tmpl\n",
		"    prompt: profiles/moderation.prompt.tmpl\n"+
			"    acceptance: {fields: {category: {min_accuracy: 0.90}, severity: {min_accuracy: 0.8}}, max_schema_failure_rate: 0.01}\n", 1)
	yaml = strings.Replace(yaml, "concurrency: 16}\n", "concurrency: 16}\n    price: {input_per_mtok: 0.40, output_per_mtok: 1.60}\n", 1)
	dir := writeConfig(t, yaml)
	c, err := Load(filepath.Join(dir, "stet.yaml"), lookup(testEnv()))
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	acc := c.Profiles[0].Acceptance
	if got := acc.Fields["category"].MinAccuracy; got != 0.90 {
		t.Errorf("acceptance.fields.category.min_accuracy = %v, want 0.9", got)
	}
	if got := acc.Fields["severity"].MinAccuracy; got != 0.8 {
		t.Errorf("acceptance.fields.severity.min_accuracy = %v, want 0.8", got)
	}
	if acc.MaxSchemaFailureRate == nil || *acc.MaxSchemaFailureRate != 0.01 {
		t.Errorf("acceptance.max_schema_failure_rate = %v, want 0.01", acc.MaxSchemaFailureRate)
	}
	if got, want := c.Processors[1].Price, (Price{InputPerMTok: 0.40, OutputPerMTok: 1.60}); got != want {
		t.Errorf("processors[1].price = %+v, want %+v", got, want)
	}
	if got := c.Processors[0].Price; got != (Price{}) {
		t.Errorf("processors[0].price = %+v, want zero (free)", got)
	}

	// Without the keys: no rule, no bound, no price.
	c, err = Load(filepath.Join(writeConfig(t, readExample(t)), "stet.yaml"), lookup(testEnv()))
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	if a := c.Profiles[0].Acceptance; len(a.Fields) != 0 || a.MaxSchemaFailureRate != nil {
		t.Errorf("acceptance without the key = %+v, want empty", a)
	}
}

func TestLoadRejectsEvalKeys(t *testing.T) {
	t.Parallel()
	const prompt = "    prompt: profiles/moderation.prompt.tmpl\n"
	tests := []struct {
		name, acceptance, price string
		wantPath, wantReason    string
	}{
		{name: "unknown field", acceptance: "{fields: {categry: {min_accuracy: 0.9}}}", wantPath: "profiles[0].acceptance.fields.categry", wantReason: `"categry" is not a property`},
		{name: "min_accuracy missing", acceptance: "{fields: {category: {}}}", wantPath: "profiles[0].acceptance.fields.category.min_accuracy", wantReason: "required"},
		{name: "min_accuracy over 1", acceptance: "{fields: {category: {min_accuracy: 90}}}", wantPath: "profiles[0].acceptance.fields.category.min_accuracy", wantReason: "share from 0 to 1"},
		{name: "min_accuracy not a number", acceptance: "{fields: {category: {min_accuracy: high}}}", wantPath: "profiles[0].acceptance.fields.category.min_accuracy", wantReason: "must be a number"},
		{name: "unknown key in a field", acceptance: "{fields: {category: {min_acc: 0.9}}}", wantPath: "profiles[0].acceptance.fields.category.min_acc", wantReason: "unknown key"},
		{name: "fields not a mapping", acceptance: "{fields: [category]}", wantPath: "profiles[0].acceptance.fields", wantReason: "must be a mapping"},
		{name: "negative schema failure rate", acceptance: "{max_schema_failure_rate: -0.1}", wantPath: "profiles[0].acceptance.max_schema_failure_rate", wantReason: "share from 0 to 1"},
		{name: "unknown acceptance key", acceptance: "{min_f1: 0.5}", wantPath: "profiles[0].acceptance.min_f1", wantReason: "unknown key"},
		{name: "negative price", price: "{input_per_mtok: -1, output_per_mtok: 1}", wantPath: "processors[1].price.input_per_mtok", wantReason: "must not be negative"},
		{name: "unknown price key", price: "{per_call: 0.01}", wantPath: "processors[1].price.per_call", wantReason: "unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			yaml := readExample(t)
			if tt.acceptance != "" {
				yaml = strings.Replace(yaml, prompt, prompt+"    acceptance: "+tt.acceptance+"\n", 1)
			}
			if tt.price != "" {
				yaml = strings.Replace(yaml, "concurrency: 16}\n", "concurrency: 16}\n    price: "+tt.price+"\n", 1)
			}
			probs := problems(t, yaml, testEnv(), nil)
			for _, p := range probs {
				if p.Path == tt.wantPath && strings.Contains(p.Reason, tt.wantReason) {
					return
				}
			}
			t.Errorf("Load problems = %v, want %s: …%s…", probs, tt.wantPath, tt.wantReason)
		})
	}
}
