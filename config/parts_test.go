package config

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// withParts is the design example with parts on its profile and both
// processors in its policy.
func withParts(t *testing.T, parts string) string {
	t.Helper()
	yaml := readExample(t)
	for _, r := range []struct{ old, new string }{
		{"    prompt: profiles/moderation.prompt.tmpl\n", "    prompt: profiles/moderation.prompt.tmpl\n" + parts},
		{"    processors: [local-rules]\n", "    processors: [local-rules, openai-us]\n"},
	} {
		if !strings.Contains(yaml, r.old) {
			t.Fatalf("the example lacks %q", r.old)
		}
		yaml = strings.Replace(yaml, r.old, r.new, 1)
	}
	return yaml
}

const twoParts = `    parts:
      - {id: triage, fields: [category, severity], processors: [openai-us]}
      - {id: rest, fields: "*"}
`

// A profile with two parts loads; "*" takes the fields no other part
// names, in the schema's order, and the domain profile carries them.
func TestLoadParts(t *testing.T) {
	t.Parallel()
	dir := writeConfig(t, withParts(t, twoParts))
	c, err := Load(filepath.Join(dir, "stet.yaml"), lookup(testEnv()))
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	d := c.Profiles[0].Domain()
	if len(d.Parts) != 2 || d.Parts[0].ID != "triage" || !slices.Equal(d.Parts[0].Fields, []string{"category", "severity"}) ||
		!slices.Equal(d.Parts[0].Processors, []string{"openai-us"}) || d.Parts[1].ID != "rest" ||
		!slices.Equal(d.Parts[1].Fields, []string{"rationale"}) || len(d.Parts[1].Processors) != 0 {
		t.Errorf("parts = %+v", d.Parts)
	}
}

// Every way a profile's parts can be wrong is refused at load, at its path.
func TestLoadPartProblems(t *testing.T) {
	t.Parallel()
	const p = "profiles[0].parts"
	tests := []struct {
		name, parts, wantPath, wantReason string
		policy                            string // replaces the policy's processors line
	}{
		{name: "one part", parts: "    parts:\n      - {id: all, fields: \"*\"}\n", wantPath: p, wantReason: "two or more"},
		{name: "duplicate ids", parts: "    parts:\n      - {id: a, fields: [category]}\n      - {id: a, fields: \"*\"}\n",
			wantPath: p + "[1].id", wantReason: "duplicate id"},
		{name: "unknown field", parts: "    parts:\n      - {id: a, fields: [diagnosis]}\n      - {id: b, fields: \"*\"}\n",
			wantPath: p + "[0].fields[0]", wantReason: "not a top-level property"},
		{name: "a field twice in one part", parts: "    parts:\n      - {id: a, fields: [category, category]}\n      - {id: b, fields: \"*\"}\n",
			wantPath: p + "[0].fields[1]", wantReason: `"category" is listed twice`},
		{name: "a field in two parts", parts: "    parts:\n      - {id: a, fields: [category]}\n      - {id: b, fields: [category, severity, rationale]}\n",
			wantPath: p + "[1].fields[0]", wantReason: "already in"},
		{name: "two rests", parts: "    parts:\n      - {id: a, fields: \"*\"}\n      - {id: b, fields: \"*\"}\n",
			wantPath: p + "[1].fields", wantReason: "only one part"},
		{name: "a rest with nothing left", parts: "    parts:\n      - {id: a, fields: [category, severity, rationale]}\n      - {id: b, fields: \"*\"}\n",
			wantPath: p + "[1].fields", wantReason: "takes no field"},
		{name: "no fields", parts: "    parts:\n      - {id: a}\n      - {id: b, fields: \"*\"}\n",
			wantPath: p + "[0].fields", wantReason: "required"},
		{name: "an empty list of fields", parts: "    parts:\n      - {id: a, fields: []}\n      - {id: b, fields: \"*\"}\n",
			wantPath: p + "[0].fields", wantReason: "required"},
		{name: "a misspelt key", parts: "    parts:\n      - {id: a, field: [category]}\n      - {id: b, fields: \"*\"}\n",
			wantPath: p + "[0].field", wantReason: "unknown key"},
		{name: "a bad id", parts: "    parts:\n      - {id: Triage, fields: [category]}\n      - {id: b, fields: \"*\"}\n",
			wantPath: p + "[0].id", wantReason: "must be lowercase"},
		{name: "fields left over", parts: "    parts:\n      - {id: a, fields: [category]}\n      - {id: b, fields: [severity]}\n",
			wantPath: p, wantReason: "rationale belong to no part"},
		{name: "a number for fields", parts: "    parts:\n      - {id: a, fields: 3}\n      - {id: b, fields: \"*\"}\n",
			wantPath: p + "[0].fields", wantReason: "must be a list of field names or \"*\""},
		{name: "an undefined processor", parts: "    parts:\n      - {id: a, fields: [category], processors: [nope]}\n      - {id: b, fields: \"*\"}\n",
			wantPath: p + "[0].processors[0]", wantReason: "not defined under processors"},
		{name: "a processor twice", parts: "    parts:\n      - {id: a, fields: [category], processors: [openai-us, openai-us]}\n      - {id: b, fields: \"*\"}\n",
			wantPath: p + "[0].processors[1]", wantReason: `processor "openai-us" is listed twice`},
		{name: "a processor the policy does not permit", parts: twoParts, policy: "    processors: [local-rules]\n",
			wantPath: p + "[0].processors[0]", wantReason: `not permitted by policy "standard", which source "community-reports" uses`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			yaml := withParts(t, tt.parts)
			if tt.policy != "" {
				yaml = strings.Replace(yaml, "    processors: [local-rules, openai-us]\n", tt.policy, 1)
			}
			probs := problems(t, yaml, testEnv(), nil)
			i := slices.IndexFunc(probs, func(pr Problem) bool { return pr.Path == tt.wantPath })
			if i < 0 {
				t.Fatalf("Load problems = %v, want one at %s", probs, tt.wantPath)
			}
			if !strings.Contains(probs[i].Reason, tt.wantReason) {
				t.Errorf("problem at %s = %q, want %q", tt.wantPath, probs[i].Reason, tt.wantReason)
			}
		})
	}
}

// A part's fields are resolved in the schema's order, whatever order the
// config lists them in: the order of the sub-schema sent and of the merged
// record.
func TestLoadPartFieldsInSchemaOrder(t *testing.T) {
	t.Parallel()
	yaml := withParts(t, "    parts:\n      - {id: a, fields: [rationale, category]}\n      - {id: b, fields: \"*\"}\n")
	c, err := Load(filepath.Join(writeConfig(t, yaml), "stet.yaml"), lookup(testEnv()))
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	d := c.Profiles[0].Domain()
	if len(d.Parts) != 2 || !slices.Equal(d.Parts[0].Fields, []string{"category", "rationale"}) ||
		!slices.Equal(d.Parts[1].Fields, []string{"severity"}) {
		t.Errorf("parts = %+v, want a: [category rationale], b: [severity]", d.Parts)
	}
}

// A part's processor must be permitted by the policy of every source using
// the profile: the problem names each source whose policy does not.
func TestLoadPartProcessorEverySource(t *testing.T) {
	t.Parallel()
	yaml := withParts(t, twoParts)
	for _, r := range []struct{ old, new string }{
		{"profiles:\n", "  - id: second-reports\n    tenant: demo\n    secret_env: STET_SOURCE_SECRET\n    identity: external_id\n" +
			"    revisions: explicit\n    profile: moderation\n    policy: local-only\n    mode: sync\nprofiles:\n"},
		{"    replay_horizon: 90d\n", "    replay_horizon: 90d\n  - id: local-only\n    processors: [local-rules]\n" +
			"    retention: {text: 30d, artifacts: 365d}\n    replay_horizon: 90d\n"},
	} {
		if !strings.Contains(yaml, r.old) {
			t.Fatalf("the example lacks %q", r.old)
		}
		yaml = strings.Replace(yaml, r.old, r.new, 1)
	}
	probs := problems(t, yaml, testEnv(), nil)
	const want = `processor "openai-us" is not permitted by policy "local-only", which source "second-reports" uses`
	if len(probs) != 1 || probs[0].Path != "profiles[0].parts[0].processors[0]" || probs[0].Reason != want {
		t.Errorf("Load problems = %v, want one at profiles[0].parts[0].processors[0]: %s", probs, want)
	}
}

// The parts example in examples/ loads with its two parts.
func TestPartsExampleLoads(t *testing.T) {
	t.Parallel()
	c, err := Load(filepath.Join("..", "examples", "parts", "stet.yaml"), lookup(testEnv()))
	if err != nil {
		t.Fatalf("Load(examples/parts/stet.yaml) = %v", err)
	}
	if d := c.Profiles[0].Domain(); len(d.Parts) != 2 || !slices.Equal(d.Parts[1].Fields, []string{"labels", "rationale"}) {
		t.Errorf("parts = %+v", d.Parts)
	}
}
