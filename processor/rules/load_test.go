package rules

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	const head = `
version: 1
defaults: {kind: none, level: 0, labels: [], why: ""}
labels_field: labels
rationale_field: why
rules:
`
	tests := []struct {
		name   string
		yaml   string
		schema string // testSchema if empty
		want   []string
	}{
		{"bad regex", head + `
  - id: broken
    regex: ['\bstop(\s+taking']
    set: {kind: a}
`, "", []string{`rule "broken"`, "regex[0]", "line 8", "missing closing )"}},
		{"unknown rule key", head + `
  - id: typo
    any: [alpha]
    unles: [beta]
    set: {kind: a}
`, "", []string{`rule "typo" (line 8)`, `line 10: unknown key "unles"`}},
		{"unknown top key", head + `
  - {id: r, any: [a], set: {kind: a}}
labels: x
`, "", []string{`unknown key "labels"`, "top level"}},
		{"duplicate id", head + `
  - {id: same, any: [alpha], set: {kind: a}}
  - {id: same, any: [beta], set: {kind: b}}
`, "", []string{`rule "same" (line 9)`, "duplicate", "first defined at line 8"}},
		{"missing set", head + `
  - id: noset
    any: [alpha]
`, "", []string{`rule "noset"`, `missing key "set"`}},
		{"missing id", head + `
  - any: [alpha]
    set: {kind: a}
`, "", []string{"rules[0]", `missing key "id"`}},
		{"set property not in schema", strings.Replace(head, "why: \"\"}", "why: \"\", mood: calm}", 1) + `
  - id: moody
    any: [alpha]
    set: {mood: angry}
`, "", []string{`rule "moody"`, "set.mood", "not a property of the schema"}},
		{"set value not in enum", head + `
  - id: wrong-enum
    any: [alpha]
    set: {kind: z}
`, "", []string{`rule "wrong-enum"`, "set.kind", `"z" is not one of the schema's enum values`}},
		{"set value of wrong type", head + `
  - id: wrong-type
    any: [alpha]
    set: {level: high}
`, "", []string{`rule "wrong-type"`, "set.level", "is string, the schema wants integer"}},
		{"set names a property without default", head + `
  - id: nodefault
    any: [alpha]
    set: {flag: true}
`, "", []string{`rule "nodefault"`, "set.flag", "not in defaults"}},
		{"set names the labels field", head + `
  - id: setlabels
    any: [alpha]
    set: {labels: [la]}
`, "", []string{`rule "setlabels"`, "set.labels", "filled from the matched rules"}},
		{"label not allowed by items enum", head + `
  - id: badlabel
    any: [alpha]
    set: {kind: a}
    label: lz
`, `{"type":"object","properties":{"kind":{"enum":["none","a"]},"level":{},"labels":{"type":"array","items":{"enum":["la"]}},"why":{}}}`, []string{`rule "badlabel"`, "label", `"lz" is not one of the schema's enum values`}},
		{"required property without default", head + `
  - {id: r, any: [alpha], set: {kind: a}}
`, `{"type":"object","required":["kind","level","labels","why","extra"],"properties":{"kind":{},"level":{},"labels":{},"why":{},"extra":{}}}`,
			[]string{`required property "extra"`, "no default"}},
		{"default not in schema", strings.Replace(head, "why: \"\"}", "why: \"\", mood: calm}", 1) + `
  - {id: r, any: [alpha], set: {kind: a}}
`, "", []string{"defaults.mood", "not a property of the schema"}},
		{"no patterns", head + `
  - id: empty
    unless: [alpha]
    set: {kind: a}
`, "", []string{`rule "empty"`, `"any" or "regex"`}},
		{"empty phrase", head + `
  - id: blank
    any: ["  "]
    set: {kind: a}
`, "", []string{`rule "blank"`, "any[0]", "empty phrase"}},
		{"regex matching empty text", head + `
  - id: greedy
    regex: ['a*']
    set: {kind: a}
`, "", []string{`rule "greedy"`, "regex[0]", "matches empty text"}},
		{"unknown term", head + `
  - id: noterm
    regex: ['\b${drug}\b']
    set: {kind: a}
`, "", []string{`rule "noterm"`, "regex[0]", `unknown term "drug"`}},
		{"negatable without negation", head + `
  - id: neg
    negatable: true
    any: [alpha]
    set: {kind: a}
`, "", []string{`rule "neg"`, "negatable", "no negation section"}},
		{"min_matches too high", head + `
  - id: many
    min_matches: 3
    any: [alpha, beta]
    set: {kind: a}
`, "", []string{`rule "many"`, "min_matches", "between 1 and 2"}},
		{"priority not an integer", head + `
  - id: prio
    priority: high
    any: [alpha]
    set: {kind: a}
`, "", []string{`rule "prio"`, "priority", "must be an integer"}},
		{"bad id", head + `
  - id: Has Spaces
    any: [alpha]
    set: {kind: a}
`, "", []string{"rules[0]", "id", `"Has Spaces"`}},
		{"wrong version", strings.Replace(head, "version: 1", "version: 2", 1) + `
  - {id: r, any: [alpha], set: {kind: a}}
`, "", []string{"version", "2 is not supported"}},
		{"missing rules", "version: 1\ndefaults: {kind: none}\n", "", []string{`missing key "rules"`}},
		{"not yaml", "version: [1\n", "", []string{"yaml"}},
		{"empty", "", "", []string{"empty file"}},
	}
	for _, tt := range tests {
		schema := tt.schema
		if schema == "" {
			schema = testSchema
		}
		_, err := New(Params{ID: "test-rules", RulesPath: "test.rules.yaml", RulesYAML: []byte(tt.yaml), Schema: json.RawMessage(schema)})
		if err == nil {
			t.Errorf("New(%s) = nil error, want one mentioning %q", tt.name, tt.want)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("New(%s) = %q, want it to mention %q", tt.name, err, w)
			}
		}
		if !strings.Contains(err.Error(), "test.rules.yaml") {
			t.Errorf("New(%s) = %q, want it to name the file", tt.name, err)
		}
	}
}

func TestLoadWithoutSchema(t *testing.T) {
	t.Parallel()
	// Without a schema, New checks only the file itself; the first Extract
	// with a schema checks the fit.
	_, err := New(Params{ID: "r", RulesYAML: []byte("version: 1\ndefaults: {kind: none}\nrules:\n  - {id: r, any: [a], set: {kind: zz}}\n")})
	if err != nil {
		t.Errorf("New(no schema) = %v, want nil", err)
	}
	if _, err := New(Params{RulesYAML: []byte("version: 1")}); err == nil {
		t.Error("New(no id) = nil error, want one")
	}
	if _, err := New(Params{ID: "r"}); err == nil {
		t.Error("New(no rules) = nil error, want one")
	}
}

func TestLoadFromPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "r.yaml")
	content := "version: 1\ndefaults: {kind: none}\nrules:\n  - {id: r, any: [alpha], set: {kind: a}}\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	fromPath, err := New(Params{ID: "r", RulesPath: path})
	if err != nil {
		t.Fatalf("New(%s) = %v", path, err)
	}
	inline, err := New(Params{ID: "r", RulesYAML: []byte(content)})
	if err != nil {
		t.Fatal(err)
	}
	if fromPath.Info().Model != inline.Info().Model {
		t.Errorf("Model from path = %q, inline = %q, want equal for equal content", fromPath.Info().Model, inline.Info().Model)
	}
	if _, err := New(Params{ID: "r", RulesPath: filepath.Join(dir, "missing.yaml")}); err == nil {
		t.Error("New(missing file) = nil error, want one")
	}
}
