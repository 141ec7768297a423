package azurecs

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stetlabs/stet/processor/processortest"
	"github.com/stetlabs/stet/schema"
)

const (
	quickstartMapping = "../../examples/quickstart/profiles/moderation.azurecs.yaml"
)

// moderation is the record the quickstart mapping writes, in field order.
func moderation(category, severity, action string, labels []string, rationale string) processortest.Moderation {
	return processortest.Moderation{Category: category, Severity: severity, Action: action, Labels: labels, Rationale: rationale}
}

func quickstart(t testing.TB) *Mapping {
	t.Helper()
	m, err := LoadMapping(quickstartMapping)
	if err != nil {
		t.Fatalf("LoadMapping(quickstart) = %v", err)
	}
	return m
}

func TestQuickstartMappingFitsSchema(t *testing.T) {
	t.Parallel()
	m := quickstart(t)
	if err := m.CheckSchema(processortest.ReadFile(t, processortest.QuickstartSchema)); err != nil {
		t.Errorf("CheckSchema(quickstart schema) = %v, want nil", err)
	}
	if m.Profile() != "moderation" || m.OutputType() != FourSeverityLevels {
		t.Errorf("Profile(), OutputType() = %q, %q; want moderation, %s", m.Profile(), m.OutputType(), FourSeverityLevels)
	}
}

// TestQuickstartEveryAnswerIsValid maps every answer the service can give
// (four categories, four levels each) and validates the record against the
// quickstart schema with the JSON Schema library.
func TestQuickstartEveryAnswerIsValid(t *testing.T) {
	t.Parallel()
	m := quickstart(t)
	sch, err := schema.Compile("moderation", processortest.ReadFile(t, processortest.QuickstartSchema))
	if err != nil {
		t.Fatal(err)
	}
	levels := []int{0, 2, 4, 6}
	n := 0
	for _, h := range levels {
		for _, sh := range levels {
			for _, sx := range levels {
				for _, v := range levels {
					s := Severities{Hate: h, SelfHarm: sh, Sexual: sx, Violence: v}
					out := m.Apply(s)
					if problems := sch.Validate(out); problems != nil {
						t.Errorf("Apply(%v) = %s: invalid against the schema: %v", s, out, problems)
					}
					got := processortest.DecodeModeration(t, out)
					// The schema's description: severity none only when
					// category is none, and the other way round.
					if (got.Category == "none") != (got.Severity == "none") {
						t.Errorf("Apply(%v) = %s: category and severity disagree about none", s, out)
					}
					// Labels follow the profile's order, as the rules do, so
					// the category is the first label.
					if got.Category != "none" && (len(got.Labels) == 0 || got.Labels[0] != got.Category) {
						t.Errorf("Apply(%v) = %s: category %q is not the first label", s, out, got.Category)
					}
					if got.Category == "none" && len(got.Labels) > 0 {
						t.Errorf("Apply(%v) = %s: labels without a category", s, out)
					}
					n++
				}
			}
		}
	}
	if n != 256 {
		t.Fatalf("checked %d answers, want 256", n)
	}
}

func TestQuickstartRules(t *testing.T) {
	t.Parallel()
	m := quickstart(t)
	tests := []struct {
		name string
		in   Severities
		want processortest.Moderation
	}{
		{
			name: "all zero: the defaults",
			in:   Severities{},
			want: moderation("none", "none", "allow", []string{}, "azure content safety: every category 0"),
		},
		{
			name: "acute self-harm escalates",
			in:   Severities{SelfHarm: 4},
			want: moderation("self_harm", "high", "escalate", []string{"self_harm"}, "azure content safety: SelfHarm=4; rule self-harm-acute"),
		},
		{
			name: "self-harm ranks above higher hate (first match)",
			in:   Severities{SelfHarm: 4, Hate: 6},
			want: moderation("self_harm", "high", "escalate", []string{"self_harm", "harassment"}, "azure content safety: Hate=6, SelfHarm=4; rule self-harm-acute"),
		},
		{
			name: "low self-harm in a severe post escalates (all conditions of a when)",
			in:   Severities{SelfHarm: 2, Violence: 6},
			want: moderation("self_harm", "high", "escalate", []string{"self_harm", "harassment"}, "azure content safety: Violence=6, SelfHarm=2; rule self-harm-with-severe"),
		},
		{
			name: "low self-harm is reviewed ahead of medium hate",
			in:   Severities{SelfHarm: 2, Hate: 4},
			want: moderation("self_harm", "medium", "review", []string{"self_harm", "harassment"}, "azure content safety: Hate=4, SelfHarm=2; rule self-harm"),
		},
		{
			name: "severe hate is removed",
			in:   Severities{Hate: 6},
			want: moderation("harassment", "high", "remove", []string{"harassment"}, "azure content safety: Hate=6; rule hate-high"),
		},
		{
			name: "severe violence is removed",
			in:   Severities{Violence: 6, Hate: 2},
			want: moderation("harassment", "high", "remove", []string{"harassment"}, "azure content safety: Violence=6, Hate=2; rule violence-high"),
		},
		{
			name: "explicit sexual content is removed",
			in:   Severities{Sexual: 6},
			want: moderation("harassment", "high", "remove", []string{"harassment"}, "azure content safety: Sexual=6; rule sexual-high"),
		},
		{
			name: "medium hate",
			in:   Severities{Hate: 4},
			want: moderation("harassment", "medium", "review", []string{"harassment"}, "azure content safety: Hate=4; rule hate-medium"),
		},
		{
			name: "medium violence",
			in:   Severities{Violence: 4, Sexual: 2},
			want: moderation("harassment", "medium", "review", []string{"harassment"}, "azure content safety: Violence=4, Sexual=2; rule violence-medium"),
		},
		{
			name: "medium sexual",
			in:   Severities{Sexual: 4},
			want: moderation("harassment", "medium", "review", []string{"harassment"}, "azure content safety: Sexual=4; rule sexual-medium"),
		},
		{
			name: "low hate",
			in:   Severities{Hate: 2},
			want: moderation("harassment", "low", "review", []string{"harassment"}, "azure content safety: Hate=2; rule hate-low"),
		},
		{
			name: "low violence and sexual alone are allowed, scores recorded",
			in:   Severities{Violence: 2, Sexual: 2},
			want: moderation("none", "none", "allow", []string{}, "azure content safety: Sexual=2, Violence=2; no rule matched"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := processortest.DecodeModeration(t, m.Apply(tt.in))
			if got.Category != tt.want.Category || got.Severity != tt.want.Severity || got.Action != tt.want.Action ||
				!slices.Equal(got.Labels, tt.want.Labels) || got.Rationale != tt.want.Rationale {
				t.Errorf("Apply(%v) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestApplyKeyOrderIsDefaultsOrder(t *testing.T) {
	t.Parallel()
	out := string(quickstart(t).Apply(Severities{Hate: 4}))
	want := `{"category":"harassment","severity":"medium","action":"review","labels":["harassment"],"rationale":"azure content safety: Hate=4; rule hate-medium"}`
	if out != want {
		t.Errorf("Apply = %s, want %s", out, want)
	}
}

// rationalePattern is everything a rationale may say: the prefix, category
// names with numbers, a rule reference.
var rationalePattern = regexp.MustCompile(`^azure content safety: (every category 0|((Hate|SelfHarm|Sexual|Violence)=[0-7](, )?)+)(; (no rule matched|rule [a-z0-9._-]+|rules\[[0-9]+\]))?$`)

func TestRationaleNamesCategoriesAndNumbersOnly(t *testing.T) {
	t.Parallel()
	m := quickstart(t)
	levels := []int{0, 2, 4, 6}
	for _, h := range levels {
		for _, sh := range levels {
			for _, sx := range levels {
				for _, v := range levels {
					s := Severities{Hate: h, SelfHarm: sh, Sexual: sx, Violence: v}
					got := processortest.DecodeModeration(t, m.Apply(s))
					if !rationalePattern.MatchString(got.Rationale) {
						t.Errorf("Apply(%v).rationale = %q: says more than categories, numbers and a rule", s, got.Rationale)
					}
				}
			}
		}
	}
}

const smallMapping = `
version: 1
output_type: EightSeverityLevels
defaults: {flag: false, level: 0, tags: [azure], why: nothing found}
labels_field: tags
rationale_field: why
category_labels:
  Violence: {label: violent, min: 3}
  Hate: {label: hateful, min: 1}
  Sexual: {label: hateful, min: 5}
rules:
  - when: {any: ">=6"}
    set: {flag: true, level: 3}
  - id: two-together
    when: {Hate: ">=2", Violence: ">=2"}
    set: {level: 2}
  - when: {SelfHarm: "==1"}
    set: {level: 1}
`

func TestApplySmallMapping(t *testing.T) {
	t.Parallel()
	m, err := ParseMapping([]byte(smallMapping))
	if err != nil {
		t.Fatalf("ParseMapping = %v", err)
	}
	tests := []struct {
		in   Severities
		want string
	}{
		{Severities{}, `{"flag":false,"level":0,"tags":["azure"],"why":"nothing found"}`},
		// any: one category is enough.
		{Severities{Sexual: 7}, `{"flag":true,"level":3,"tags":["azure","hateful"],"why":"azure content safety: Sexual=7; rules[0]"}`},
		// All conditions of a when must hold.
		{Severities{Hate: 2}, `{"flag":false,"level":0,"tags":["azure","hateful"],"why":"azure content safety: Hate=2; no rule matched"}`},
		{Severities{Hate: 2, Violence: 3}, `{"flag":false,"level":2,"tags":["azure","violent","hateful"],"why":"azure content safety: Violence=3, Hate=2; rule two-together"}`},
		{Severities{Hate: 5, Violence: 3}, `{"flag":false,"level":2,"tags":["azure","violent","hateful"],"why":"azure content safety: Hate=5, Violence=3; rule two-together"}`},
		// The first matching rule wins, even when a later one also matches.
		{Severities{Hate: 6, Violence: 2, SelfHarm: 1}, `{"flag":true,"level":3,"tags":["azure","hateful"],"why":"azure content safety: Hate=6, Violence=2, SelfHarm=1; rules[0]"}`},
		{Severities{SelfHarm: 1}, `{"flag":false,"level":1,"tags":["azure"],"why":"azure content safety: SelfHarm=1; rules[2]"}`},
		// Labels follow category_labels, not severity; two categories with
		// one label give it once.
		{Severities{Sexual: 5, Hate: 1, Violence: 4}, `{"flag":false,"level":0,"tags":["azure","violent","hateful"],"why":"azure content safety: Sexual=5, Violence=4, Hate=1; no rule matched"}`},
		{Severities{Sexual: 5}, `{"flag":false,"level":0,"tags":["azure","hateful"],"why":"azure content safety: Sexual=5; no rule matched"}`},
	}
	for _, tt := range tests {
		if got := string(m.Apply(tt.in)); got != tt.want {
			t.Errorf("Apply(%v) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestParseMappingErrors(t *testing.T) {
	t.Parallel()
	const head = "version: 1\ndefaults: {category: none, labels: [], rationale: none}\nlabels_field: labels\nrationale_field: rationale\n"
	tests := []struct {
		name string
		yaml string
		want []string // substrings the error must hold
	}{
		{"empty", "", []string{"empty file"}},
		{"unknown top key", head + "rulez: []\nrules: [{when: {Hate: '>=2'}, set: {category: x}}]", []string{"line 5", `unknown key "rulez"`}},
		{"missing rules", head, []string{`missing key "rules"`}},
		{"bad version", "version: 2\ndefaults: {a: 1}\nrules: [{when: {Hate: '>=2'}, set: {a: 2}}]", []string{"version", "2 is not supported"}},
		{"bad output type", head + "output_type: TwoLevels\nrules: [{when: {Hate: '>=2'}, set: {category: x}}]", []string{"output_type", "TwoLevels"}},
		{"unknown category in when", head + "rules:\n  - when: {SelfHarmm: '>=4'}\n    set: {category: x}", []string{"line 6", "rules[0].when.SelfHarmm", "unknown category"}},
		{"unknown category in labels", head + "category_labels:\n  Hatred: {label: h, min: 2}\nrules: [{when: {Hate: '>=2'}, set: {category: x}}]", []string{"category_labels.Hatred", "unknown category"}},
		{"unknown key in rule", head + "rules:\n  - id: r1\n    when: {Hate: '>=2'}\n    then: {category: x}", []string{"rules[0]", `unknown key "then"`}},
		{"unquoted number", head + "rules:\n  - when: {Hate: 4}\n    set: {category: x}", []string{"rules[0].when.Hate", "must be a comparison"}},
		{"bad operator", head + "rules:\n  - when: {Hate: '=>4'}\n    set: {category: x}", []string{"rules[0].when.Hate", "must be a comparison"}},
		{"beyond the scale", head + "rules:\n  - when: {Hate: '>=8'}\n    set: {category: x}", []string{"rules[0].when.Hate", "beyond the highest severity"}},
		{"never holds on four levels", head + "rules:\n  - id: odd\n    when: {Hate: '==3'}\n    set: {category: x}", []string{"rules[0] (odd).when.Hate", "never holds", "FourSeverityLevels"}},
		{"never holds above six", head + "rules:\n  - when: {any: '>6'}\n    set: {category: x}", []string{"rules[0].when.any", "never holds"}},
		{"empty when", head + "rules:\n  - when: {}\n    set: {category: x}", []string{"rules[0].when", "empty"}},
		{"missing set", head + "rules:\n  - when: {Hate: '>=2'}", []string{"rules[0]", `missing key "set"`}},
		{"set without default", head + "rules:\n  - when: {Hate: '>=2'}\n    set: {action: remove}", []string{"rules[0].set.action", "not in defaults"}},
		{"set labels field", head + "rules:\n  - when: {Hate: '>=2'}\n    set: {labels: [x]}", []string{"rules[0].set.labels", "cannot be set"}},
		{"set rationale field", head + "rules:\n  - when: {Hate: '>=2'}\n    set: {rationale: x}", []string{"rules[0].set.rationale", "cannot be set"}},
		{"duplicate id", head + "rules:\n  - {id: a, when: {Hate: '>=2'}, set: {category: x}}\n  - {id: a, when: {Hate: '>=4'}, set: {category: y}}", []string{"rules[1].id", `"a" already used`}},
		{"bad id", head + "rules:\n  - {id: 'Bad Id', when: {Hate: '>=2'}, set: {category: x}}", []string{"rules[0].id", "lowercase"}},
		{"key given twice", head + "rules:\n  - when: {Hate: '>=2', Hate: '>=4'}\n    set: {category: x}", []string{"rules[0].when", `"Hate" given twice`}},
		{"labels field without default", "version: 1\ndefaults: {category: none}\nlabels_field: labels\nrules: [{when: {Hate: '>=2'}, set: {category: x}}]", []string{"labels_field", "not in defaults"}},
		{"labels default not a list", "version: 1\ndefaults: {labels: none}\nlabels_field: labels\nrules: [{when: {Hate: '>=2'}, set: {labels: x}}]", []string{"defaults.labels", "list of strings"}},
		{"rationale default not a string", "version: 1\ndefaults: {why: [a]}\nrationale_field: why\nrules: [{when: {Hate: '>=2'}, set: {why: x}}]", []string{"defaults.why", "must be a string"}},
		{"same field twice", "version: 1\ndefaults: {x: []}\nlabels_field: x\nrationale_field: x\nrules: [{when: {Hate: '>=2'}, set: {x: 1}}]", []string{"labels_field and rationale_field"}},
		{"label threshold zero", head + "category_labels:\n  Hate: {label: h, min: 0}\nrules: [{when: {Hate: '>=2'}, set: {category: x}}]", []string{"category_labels.Hate.min", "between 1 and 6"}},
		{"label without min", head + "category_labels:\n  Hate: {label: h}\nrules: [{when: {Hate: '>=2'}, set: {category: x}}]", []string{"category_labels.Hate", "label and min"}},
		{"labels without labels_field", "version: 1\ndefaults: {a: 1}\ncategory_labels:\n  Hate: {label: h, min: 2}\nrules: [{when: {Hate: '>=2'}, set: {a: 2}}]", []string{"category_labels", "needs labels_field"}},
		{"empty rules", head + "rules: []", []string{"rules", "empty list"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseMapping([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("ParseMapping(%s) = nil error, want one naming %q", tt.name, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ParseMapping(%s) = %q, want it to contain %q", tt.name, err, w)
				}
			}
		})
	}
}

func TestLoadMappingNamesTheFile(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/broken.azurecs.yaml"
	if err := os.WriteFile(path, []byte("version: 1\ndefaults: {a: 1}\nrules: [{when: {Hat: '>=2'}, set: {a: 2}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadMapping(path)
	if err == nil || !strings.Contains(err.Error(), "broken.azurecs.yaml") || !strings.Contains(err.Error(), "when.Hat") {
		t.Errorf("LoadMapping(broken) = %v, want an error naming the file and when.Hat", err)
	}
	if _, err := LoadMapping(t.TempDir() + "/missing.yaml"); err == nil {
		t.Errorf("LoadMapping(missing file) = nil error, want one")
	}
}

func TestCheckSchema(t *testing.T) {
	t.Parallel()
	schema := processortest.ReadFile(t, processortest.QuickstartSchema)
	const rules = "\nrules:\n  - {id: r, when: {Hate: '>=2'}, set: {category: harassment, severity: low, action: review}}\n"
	const fields = "labels_field: labels\nrationale_field: rationale\n"
	tests := []struct {
		name string
		yaml string
		want string // "" for fits
	}{
		{"fits", "version: 1\ndefaults: {category: none, severity: none, action: allow, labels: [], rationale: x}\n" + fields + rules, ""},
		{"default not in enum", "version: 1\ndefaults: {category: nothing, severity: none, action: allow, labels: [], rationale: x}\n" + fields + rules, `defaults.category: "nothing" is not one of the schema's enum values`},
		{"unknown property", "version: 1\ndefaults: {category: none, severity: none, action: allow, labels: [], rationale: x, score: 1}\n" + fields + rules, "defaults.score: not a property of the schema"},
		{"wrong type", "version: 1\ndefaults: {category: none, severity: 0, action: allow, labels: [], rationale: x}\n" + fields + rules, "defaults.severity: is integer, the schema wants string"},
		{"missing required", "version: 1\ndefaults: {category: none, severity: none, labels: [], rationale: x}\n" + fields + "rules: [{when: {Hate: '>=2'}, set: {category: harassment}}]", `required property "action": no default`},
		{"set value not allowed", "version: 1\ndefaults: {category: none, severity: none, action: allow, labels: [], rationale: x}\n" + fields + "rules:\n  - {id: r, when: {Hate: '>=2'}, set: {action: ban}}", `rules[0] (r).set.action: "ban" is not one of the schema's enum values`},
		{"label not allowed", "version: 1\ndefaults: {category: none, severity: none, action: allow, labels: [], rationale: x}\n" + fields + "category_labels:\n  Hate: {label: hate, min: 2}" + rules, `category_labels.Hate.label: [0]: "hate" is not one of the schema's enum values`},
		// severity is a string enum: the rationale's text is not one of its values.
		{"rationale field not free text", "version: 1\ndefaults: {category: none, severity: none, action: allow, labels: [], rationale: x}\nlabels_field: labels\nrationale_field: severity\nrules: [{when: {Hate: '>=2'}, set: {category: harassment}}]", `rationale_field "severity"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := ParseMapping([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("ParseMapping = %v", err)
			}
			err = m.CheckSchema(schema)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckSchema = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("CheckSchema = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	m, err := ParseMapping([]byte(smallMapping))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`[]`, `{"type":"object"}`, `not json`} {
		if err := m.CheckSchema([]byte(bad)); err == nil {
			t.Errorf("CheckSchema(%s) = nil, want an error", bad)
		}
	}
}

func ExampleMapping_Apply() {
	m, err := ParseMapping([]byte(`
version: 1
defaults: {category: none, action: allow, labels: [], rationale: "azure content safety: every category 0"}
labels_field: labels
rationale_field: rationale
category_labels:
  SelfHarm: {label: self_harm, min: 2}
  Hate: {label: harassment, min: 2}
rules:
  - id: self-harm
    when: {SelfHarm: ">=4"}
    set: {category: self_harm, action: escalate}
  - when: {any: ">=2"}
    set: {action: review}
`))
	if err != nil {
		panic(err)
	}
	fmt.Println(string(m.Apply(Severities{SelfHarm: 4, Hate: 2})))
	fmt.Println(string(m.Apply(Severities{Violence: 2})))
	// Output:
	// {"category":"self_harm","action":"escalate","labels":["self_harm","harassment"],"rationale":"azure content safety: SelfHarm=4, Hate=2; rule self-harm"}
	// {"category":"none","action":"review","labels":[],"rationale":"azure content safety: Violence=2; rules[1]"}
}
