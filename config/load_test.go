package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
)

const (
	testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYqr"
	testToken  = "tok-demo-ops-0123456789abcdefghij"
	testAPIKey = "sk-test-0123456789"
)

func testEnv() map[string]string {
	return map[string]string{
		"STET_DEMO_TOKEN":    testToken,
		"STET_SOURCE_SECRET": testSecret,
		"OPENAI_API_KEY":     testAPIKey,
	}
}

func lookup(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

const day = 24 * time.Hour

func TestLoadDesignExample(t *testing.T) {
	t.Parallel()
	path := filepath.Join("testdata", "valid", "stet.yaml")
	c, err := Load(path, lookup(testEnv()))
	if err != nil {
		t.Fatalf("Load(%s) = %v", path, err)
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "valid"))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"Path", c.Path, filepath.Join(dir, "stet.yaml")},
		{"Database", c.Database, "sqlite://" + filepath.ToSlash(filepath.Join(dir, "stet-data", "stet.db"))},
		{"Listen", c.Listen, "127.0.0.1:8080"},
		{"BodyLimit", c.BodyLimit, ByteSize(1 << 20)},
		{"token value", c.Tenants[0].Tokens[0].Value, testToken},
		{"token role", c.Tenants[0].Tokens[0].Role, stet.RoleOperator},
		{"source secrets", strings.Join(c.Sources[0].Secrets, ","), testSecret},
		{"source identity", c.Sources[0].Identity, stet.IdentityExternalID},
		{"source revisions", c.Sources[0].Revisions, stet.RevisionsExplicit},
		{"source mode", c.Sources[0].Mode, stet.ModeSync},
		{"profile schema path", c.Profiles[0].Schema, filepath.Join(dir, "profiles", "moderation.schema.json")},
		{"profile prompt path", c.Profiles[0].Prompt, filepath.Join(dir, "profiles", "moderation.prompt.tmpl")},
		{"prompt loaded", strings.Contains(c.Profiles[0].PromptText, "{{.Text}}"), true},
		{"schema loaded", strings.Contains(string(c.Profiles[0].SchemaJSON), `"severity"`), true},
		{"validator set", c.Profiles[0].Validator != nil, true},
		{"rules path", c.Processors[0].Rules, filepath.Join(dir, "profiles", "moderation.rules.yaml")},
		{"rules timeout default", c.Processors[0].Timeout, Duration(60 * time.Second)},
		{"openai key", c.Processors[1].APIKey, testAPIKey},
		{"openai limits", c.Processors[1].Limits, Limits{RPM: 500, TPM: 200000, Concurrency: 16}},
		{"openai retention", c.Processors[1].Retention, "30d"},
		{"policy text retention", c.Policies[0].Retention.Text, Duration(30 * day)},
		{"policy artifact retention", c.Policies[0].Retention.Artifacts, Duration(365 * day)},
		{"policy replay horizon", c.Policies[0].ReplayHorizon, Duration(90 * day)},
		{"workers", c.Workers, Workers{Concurrency: 8, JobTimeout: Duration(2 * time.Minute), RescueAfter: Duration(5 * time.Minute), MaxAttempts: 5, PollInterval: Duration(200 * time.Millisecond), AssembleEvery: DefaultAssembleEvery, SweepInterval: DefaultSweepInterval, Heartbeat: DefaultHeartbeat, DeadAfter: 4 * DefaultHeartbeat}},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("Load(%s): %s = %v, want %v", path, ck.name, ck.got, ck.want)
		}
	}
	if got := c.Profiles[0].Validator.Validate([]byte(`{"category": "none", "severity": 0, "rationale": ""}`)); got != nil {
		t.Errorf("profile validator rejected a valid output: %q", got)
	}
}

func TestLoadDefaultsAndOverrides(t *testing.T) {
	t.Parallel()
	dir := writeConfig(t, `
database: postgres://stet@db.internal:5432/stet?sslmode=verify-full
body_limit: 2MiB
tenants: [{id: demo}]
sources:
  - {id: intake, tenant: demo, secret_env: SECRETS, profile: moderation, policy: p,
     identity: content, revisions: content, mode: batch}
profiles:
  - {id: moderation, version: 2, schema: profiles/moderation.schema.json, prompt: /PROFILES/moderation.prompt.tmpl}
processors:
  - {id: local, kind: rules, rules: profiles/moderation.rules.yaml, region: local, retention: "0", timeout: 5s}
  - {id: local2, kind: rules, rules: profiles/moderation.rules.yaml, region: local, retention: none, timeout: ~}
policies:
  - id: p
    processors: [local]
    minimize: [name]
    names: [Smith]
    retention: {text: 0s}
    regions: [local]
workers: {concurrency: 2, job_timeout: 30s, rescue_after: 1m, max_attempts: 3}
`)
	env := testEnv()
	env["SECRETS"] = testSecret + ", whsec_c2Vjb25kLXNlY3JldC0wMTIzNDU2Nzg5YWI= "
	c, err := Load(filepath.Join(dir, "stet.yaml"), lookup(env))
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"Database", c.Database, "postgres://stet@db.internal:5432/stet?sslmode=verify-full"},
		{"Listen", c.Listen, DefaultListen},
		{"BodyLimit", c.BodyLimit, ByteSize(2 << 20)},
		{"secrets", strings.Join(c.Sources[0].Secrets, " "), testSecret + " whsec_c2Vjb25kLXNlY3JldC0wMTIzNDU2Nzg5YWI="},
		{"identity", c.Sources[0].Identity, stet.IdentityContent},
		{"revisions", c.Sources[0].Revisions, stet.RevisionsContent},
		{"mode", c.Sources[0].Mode, stet.ModeBatch},
		{"absolute prompt path kept", c.Profiles[0].Prompt, filepath.Join(dir, "PROFILES", "moderation.prompt.tmpl")},
		{"timeout", c.Processors[0].Timeout, Duration(5 * time.Second)},
		{"null timeout takes the default", c.Processors[1].Timeout, DefaultTimeout},
		{"explicit zero text retention", c.Policies[0].Retention.Text, Duration(0)},
		{"default artifact retention", c.Policies[0].Retention.Artifacts, Duration(365 * day)},
		{"workers", c.Workers, Workers{Concurrency: 2, JobTimeout: Duration(30 * time.Second), RescueAfter: Duration(time.Minute), MaxAttempts: 3, PollInterval: Duration(200 * time.Millisecond), AssembleEvery: DefaultAssembleEvery, SweepInterval: DefaultSweepInterval, Heartbeat: DefaultHeartbeat, DeadAfter: 4 * DefaultHeartbeat}},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("Load: %s = %v, want %v", ck.name, ck.got, ck.want)
		}
	}
}

// writeConfig writes yaml as stet.yaml in a new folder holding a copy of
// testdata/valid/profiles (also under PROFILES, for absolute paths, which
// the yaml names as /PROFILES and this replaces with the folder's path).
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	dir := t.TempDir()
	for _, sub := range []string{"profiles", "PROFILES"} {
		if err := os.CopyFS(filepath.Join(dir, sub), os.DirFS(filepath.Join("testdata", "valid", "profiles"))); err != nil {
			t.Fatal(err)
		}
	}
	yaml = strings.ReplaceAll(yaml, "/PROFILES/", filepath.ToSlash(filepath.Join(dir, "PROFILES"))+"/")
	if err := os.WriteFile(filepath.Join(dir, "stet.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readExample(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "valid", "stet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// problems loads yaml (after edits) and returns the problems of the
// resulting *Error.
func problems(t *testing.T, yaml string, env map[string]string, files map[string]string) []Problem {
	t.Helper()
	dir := writeConfig(t, yaml)
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Load(filepath.Join(dir, "stet.yaml"), lookup(env))
	if err == nil {
		t.Fatalf("Load = %+v, nil; want an error", c)
	}
	if c != nil {
		t.Errorf("Load returned a config with an error")
	}
	var cerr *Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Load error %T %v, want *Error", err, err)
	}
	return cerr.Problems
}

func TestLoadRejects(t *testing.T) {
	t.Parallel()
	type edit struct{ old, new string }
	tests := []struct {
		name       string
		edits      []edit
		append     string
		unsetEnv   string
		setEnv     map[string]string
		files      map[string]string
		wantPath   string
		wantReason string
	}{
		{name: "unknown top-level key", append: "lisen: 127.0.0.1:9090\n", wantPath: "lisen", wantReason: "unknown key"},
		{name: "unknown nested key", edits: []edit{{"identity: external_id", "identiy: external_id"}}, wantPath: "sources[0].identiy", wantReason: "unknown key"},
		{name: "mapping on an openai processor", edits: []edit{{"    model: gpt-4.1-mini", "    model: gpt-4.1-mini\n    mapping: profiles/moderation.rules.yaml"}}, wantPath: "processors[1].mapping", wantReason: "used only by kind azure-content-safety"},
		{name: "tool_use on an openai processor", edits: []edit{{"    model: gpt-4.1-mini", "    model: gpt-4.1-mini\n    tool_use: true"}}, wantPath: "processors[1].tool_use", wantReason: "used only by kind anthropic"},
		{name: "azure without a mapping", edits: []edit{{"    kind: openai", "    kind: azure-content-safety"}, {"    model: gpt-4.1-mini\n", ""}}, wantPath: "processors[1].mapping", wantReason: "required: a file path"},
		{name: "batch on a rules processor", edits: []edit{{"    rules: profiles/moderation.rules.yaml", "    rules: profiles/moderation.rules.yaml\n    batch: {max_items: 10}"}}, wantPath: "processors[0].batch", wantReason: "used only by kinds openai"},
		{name: "batch on_expired", edits: []edit{{"concurrency: 16}", "concurrency: 16}\n    batch: {on_expired: later}"}}, wantPath: "processors[1].batch.on_expired", wantReason: "must be one of sync | batch"},
		{name: "batch negative max_items", edits: []edit{{"concurrency: 16}", "concurrency: 16}\n    batch: {max_items: -1}"}}, wantPath: "processors[1].batch.max_items", wantReason: "must not be negative"},
		{name: "batch unknown key", edits: []edit{{"concurrency: 16}", "concurrency: 16}\n    batch: {max_item: 5}"}}, wantPath: "processors[1].batch.max_item", wantReason: "unknown key"},
		{name: "unknown key in flow mapping", edits: []edit{{"concurrency: 16}", "concurency: 16}"}}, wantPath: "processors[1].limits.concurency", wantReason: "unknown key"},
		{name: "duplicate key", edits: []edit{{"    mode: sync", "    mode: sync\n    mode: batch"}}, wantPath: "sources[0].mode", wantReason: "duplicate key"},
		{name: "database missing", edits: []edit{{"database: sqlite://stet-data/stet.db", ""}}, wantPath: "database", wantReason: "required"},
		{name: "database scheme", edits: []edit{{"database: sqlite://", "database: mysql://"}}, wantPath: "database", wantReason: "must start with"},
		{name: "listen", edits: []edit{{"listen: 127.0.0.1:8080", "listen: localhost"}}, wantPath: "listen", wantReason: "host:port"},
		{name: "body limit", append: "body_limit: 1 TB\n", wantPath: "body_limit", wantReason: "not a size"},
		{name: "bad id", edits: []edit{{"- id: community-reports", "- id: Community Reports"}}, wantPath: "sources[0].id", wantReason: "lowercase"},
		{name: "duplicate id", edits: []edit{{"- id: openai-us", "- id: local-rules"}}, wantPath: "processors[1].id", wantReason: `duplicate id "local-rules"`},
		{name: "role", edits: []edit{{"role: operator", "role: admin"}}, wantPath: "tenants[0].tokens[0].role", wantReason: "must be one of reader | reviewer | operator"},
		{name: "missing env var", unsetEnv: "STET_DEMO_TOKEN", wantPath: "tenants[0].tokens[0].token_env", wantReason: "STET_DEMO_TOKEN is not set"},
		{name: "duplicate token", edits: []edit{{"token_env: STET_DEMO_TOKEN}", "token_env: STET_DEMO_TOKEN}\n      - {name: ci, role: reader, token_env: CI_TOKEN}"}},
			setEnv: map[string]string{"CI_TOKEN": testToken}, wantPath: "tenants[0].tokens[1].token_env", wantReason: "same token as tenants[0].tokens[0]"},
		{name: "source naming missing tenant", edits: []edit{{"tenant: demo", "tenant: acme"}}, wantPath: "sources[0].tenant", wantReason: `tenant "acme" is not defined`},
		{name: "source naming missing policy", edits: []edit{{"policy: standard", "policy: strict"}}, wantPath: "sources[0].policy", wantReason: `policy "strict" is not defined under policies`},
		{name: "source naming missing profile", edits: []edit{{"profile: moderation", "profile: triage"}}, wantPath: "sources[0].profile", wantReason: `profile "triage" is not defined`},
		{name: "source secret missing", unsetEnv: "STET_SOURCE_SECRET", wantPath: "sources[0].secret_env", wantReason: "STET_SOURCE_SECRET is not set"},
		{name: "source secret prefix", setEnv: map[string]string{"STET_SOURCE_SECRET": testSecret + " MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, wantPath: "sources[0].secret_env", wantReason: "secret 2 of 2 in STET_SOURCE_SECRET does not start with whsec_"},
		{name: "source secret base64", setEnv: map[string]string{"STET_SOURCE_SECRET": "whsec_not*base64"}, wantPath: "sources[0].secret_env", wantReason: "not whsec_ followed by base64"},
		{name: "identity mode", edits: []edit{{"identity: external_id", "identity: hash"}}, wantPath: "sources[0].identity", wantReason: "must be one of external_id | content"},
		{name: "dispatch mode", edits: []edit{{"mode: sync", "mode: async"}}, wantPath: "sources[0].mode", wantReason: "must be one of sync | batch"},
		{name: "profile version", edits: []edit{{"version: 1", "version: 0"}}, wantPath: "profiles[0].version", wantReason: "must be 1 or more"},
		{name: "version not a whole number", edits: []edit{{"version: 1", "version: 1.5"}}, wantPath: "profiles[0].version", wantReason: "must be a whole number"},
		{name: "unreadable schema", edits: []edit{{"moderation.schema.json", "missing.schema.json"}}, wantPath: "profiles[0].schema", wantReason: "cannot read "},
		{name: "schema not JSON", files: map[string]string{"profiles/moderation.schema.json": `{"type": `}, wantPath: "profiles[0].schema", wantReason: "not valid JSON"},
		{name: "invalid JSON Schema", files: map[string]string{"profiles/moderation.schema.json": `{"type": 12}`}, wantPath: "profiles[0].schema", wantReason: "not a valid schema"},
		{name: "invalid prompt template", files: map[string]string{"profiles/moderation.prompt.tmpl": "Report: {{.Text"}, wantPath: "profiles[0].prompt", wantReason: "not a valid Go text/template"},
		{name: "unreadable rules", edits: []edit{{"moderation.rules.yaml", "nope.yaml"}}, wantPath: "processors[0].rules", wantReason: "cannot read "},
		{name: "processor kind", edits: []edit{{"kind: openai", "kind: llama"}}, wantPath: "processors[1].kind", wantReason: "must be one of rules | openai"},
		{name: "rules with api key", edits: []edit{{"kind: rules", "kind: rules\n    api_key_env: OPENAI_API_KEY"}}, wantPath: "processors[0].api_key_env", wantReason: "not used by kind rules"},
		{name: "openai with rules", edits: []edit{{"kind: openai", "kind: openai\n    rules: profiles/moderation.rules.yaml"}}, wantPath: "processors[1].rules", wantReason: "used only by kind rules"},
		{name: "openai without model", edits: []edit{{"    model: gpt-4.1-mini\n", ""}}, wantPath: "processors[1].model", wantReason: "required for kind openai"},
		{name: "api key missing", unsetEnv: "OPENAI_API_KEY", wantPath: "processors[1].api_key_env", wantReason: "OPENAI_API_KEY is not set"},
		{name: "base url", edits: []edit{{"base_url: https://api.openai.com/v1", "base_url: api.openai.com/v1"}}, wantPath: "processors[1].base_url", wantReason: "http:// or https://"},
		{name: "region missing", edits: []edit{{"    region: us\n", ""}}, wantPath: "processors[1].region", wantReason: "required"},
		{name: "retention missing", edits: []edit{{"    retention: none\n", ""}}, wantPath: "processors[0].retention", wantReason: "required"},
		{name: "retention bad", edits: []edit{{"retention: 30d\n", "retention: forever\n"}}, wantPath: "processors[1].retention", wantReason: `"none", a duration such as 30d, or pending`},
		{name: "subprocessor not allowed", edits: []edit{{"processors: [local-rules]", "processors: [local-rules, openai-us]\n    allowed_subprocessors: [Azure]"}, {"retention: 30d\n", "retention: 30d\n    subprocessors: [Azure, Acme Labs]\n"}}, wantPath: "policies[0].allowed_subprocessors", wantReason: `processor "openai-us" declares subprocessor "Acme Labs"`},
		{name: "zero retention neither answer", edits: []edit{{"retention: 30d\n", "retention: 30d\n    zero_data_retention: maybe\n"}}, wantPath: "processors[1].zero_data_retention", wantReason: "true, false or pending"},
		{name: "subprocessors not a list", edits: []edit{{"retention: 30d\n", "retention: 30d\n    subprocessors: Azure\n"}}, wantPath: "processors[1].subprocessors", wantReason: "a list of names or pending"},
		{name: "deletion answer", edits: []edit{{"retention: 30d\n", "retention: 30d\n    deletion: sometimes\n"}}, wantPath: "processors[1].deletion", wantReason: "api | retention | none | pending"},
		{name: "rules processor pending", edits: []edit{{"    retention: none\n", "    retention: pending\n"}}, wantPath: "processors[0].retention", wantReason: "never pending"},
		{name: "zero retention contradiction", edits: []edit{{"retention: 30d\n", "retention: 30d\n    zero_data_retention: true\n"}}, wantPath: "processors[1].zero_data_retention", wantReason: "contradicts retention 30d"},
		{name: "negative limit", edits: []edit{{"rpm: 500", "rpm: -1"}}, wantPath: "processors[1].limits.rpm", wantReason: "must not be negative"},
		{name: "limits wrong shape", edits: []edit{{"limits: {rpm: 500, tpm: 200000, concurrency: 16}", "limits: 500"}}, wantPath: "processors[1].limits", wantReason: "must be a mapping"},
		{name: "policy without processors", edits: []edit{{"processors: [local-rules]", "processors: []"}}, wantPath: "policies[0].processors", wantReason: "at least one processor"},
		{name: "policy naming missing processor", edits: []edit{{"processors: [local-rules]", "processors: [local-rules, anthropic-eu]"}}, wantPath: "policies[0].processors[1]", wantReason: `processor "anthropic-eu" is not defined under processors`},
		{name: "policy region", edits: []edit{{"processors: [local-rules]", "processors: [local-rules, openai-us]\n    regions: [local, eu]"}}, wantPath: "policies[0].processors[1]", wantReason: `region "us"`},
		{name: "policy processors not a list", edits: []edit{{"processors: [local-rules]", "processors: local-rules"}}, wantPath: "policies[0].processors", wantReason: "must be a list"},
		{name: "minimize class", edits: []edit{{"minimize: [email,", "minimize: [emails,"}}, wantPath: "policies[0].minimize[0]", wantReason: "must be one of email, phone"},
		{name: "minimize names without dictionary", edits: []edit{{"minimize: [email,", "minimize: [name, email,"}}, wantPath: "policies[0].minimize[0]", wantReason: "needs a names list"},
		{name: "bad duration", edits: []edit{{"replay_horizon: 90d", "replay_horizon: 90days"}}, wantPath: "policies[0].replay_horizon", wantReason: `"90days" is not a duration`},
		{name: "negative duration", edits: []edit{{"text: 30d", "text: -30d"}}, wantPath: "policies[0].retention.text", wantReason: "must not be negative"},
		{name: "zero timeout", edits: []edit{{"retention: none", "retention: none\n    timeout: 0s"}}, wantPath: "processors[0].timeout", wantReason: "greater than 0"},
		{name: "rescue_after equal to job_timeout", append: "workers:\n  job_timeout: 5m\n  rescue_after: 5m\n", wantPath: "workers.rescue_after", wantReason: "must be greater than job_timeout (5m0s)"},
		{name: "rescue_after below default job_timeout", append: "workers: {rescue_after: 1m}\n", wantPath: "workers.rescue_after", wantReason: "must be greater than job_timeout (2m0s)"},
		{name: "dead_after below two heartbeats", append: "workers: {heartbeat: 2s, dead_after: 3s}\n", wantPath: "workers.dead_after", wantReason: "must be at least twice heartbeat (2s)"},
		{name: "workers concurrency", append: "workers: {concurrency: 0}\n", wantPath: "workers.concurrency", wantReason: "must be 1 or more"},
		{name: "not a mapping", edits: []edit{{"tenants:\n", "tenants: demo\nx:\n"}}, wantPath: "tenants", wantReason: "must be a list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			yaml := readExample(t)
			for _, e := range tt.edits {
				if !strings.Contains(yaml, e.old) {
					t.Fatalf("edit %q does not apply to the example", e.old)
				}
				yaml = strings.Replace(yaml, e.old, e.new, 1)
			}
			yaml += tt.append
			env := testEnv()
			delete(env, tt.unsetEnv)
			for k, v := range tt.setEnv {
				env[k] = v
			}
			probs := problems(t, yaml, env, tt.files)
			i := slices.IndexFunc(probs, func(p Problem) bool { return p.Path == tt.wantPath })
			if i < 0 {
				t.Fatalf("Load problems = %v, want one at %s", probs, tt.wantPath)
			}
			if !strings.Contains(probs[i].Reason, tt.wantReason) {
				t.Errorf("Load problem at %s = %q, want it to contain %q", tt.wantPath, probs[i].Reason, tt.wantReason)
			}
			if probs[i].Line == 0 && tt.wantPath != "database" {
				t.Errorf("Load problem %v has no line number", probs[i])
			}
		})
	}
}

func TestLoadCollectsEveryProblem(t *testing.T) {
	t.Parallel()
	yaml := strings.NewReplacer(
		"identity: external_id", "identiy: external_id",
		"policy: standard", "policy: strict",
		"version: 1", "version: one",
	).Replace(readExample(t))
	env := testEnv()
	delete(env, "OPENAI_API_KEY")
	probs := problems(t, yaml, env, nil)
	var paths []string
	for _, p := range probs {
		paths = append(paths, p.Path)
	}
	// In file order; the bad version is reported once, as a type problem.
	want := []string{"sources[0].identiy", "sources[0].policy", "profiles[0].version", "processors[1].api_key_env"}
	if !slices.Equal(paths, want) {
		t.Errorf("Load problem paths = %q, want %q", paths, want)
	}
}

func TestLoadEmptyAndBrokenFiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, wantPath, wantReason string
	}{
		{"empty", "", "database", "required"},
		{"comment only", "# nothing\n", "database", "required"},
		{"not YAML", "database: [sqlite://x\n", "", "not valid YAML"},
		{"not a mapping", "- a\n- b\n", "", "must be a mapping"},
		{"two documents", "database: sqlite://a.db\n---\ndatabase: sqlite://b.db\n", "", "more than one YAML document"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			probs := problems(t, tt.yaml, testEnv(), nil)
			if !slices.ContainsFunc(probs, func(p Problem) bool { return p.Path == tt.wantPath && strings.Contains(p.Reason, tt.wantReason) }) {
				t.Errorf("Load(%q) problems = %v, want %q at %q", tt.yaml, probs, tt.wantReason, tt.wantPath)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "stet.yaml")
	_, err := Load(path, lookup(testEnv()))
	var cerr *Error
	if !errors.As(err, &cerr) || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("Load(%s) = %v, want an *Error saying the file is missing", path, err)
	}
}

// TestLoadNeverPrintsSecrets feeds malformed and duplicated secrets, and a
// database URL with a password, and checks that no error shows them.
func TestLoadNeverPrintsSecrets(t *testing.T) {
	t.Parallel()
	const canary = "CANARY9d2e"
	yaml := strings.NewReplacer(
		"database: sqlite://stet-data/stet.db", "database: postgres://stet:"+canary+"@[db-host:5432/stet",
		"token_env: STET_DEMO_TOKEN}", "token_env: STET_DEMO_TOKEN}\n      - {name: ci, role: reader, token_env: CI_TOKEN}",
	).Replace(readExample(t))
	env := map[string]string{
		"STET_DEMO_TOKEN":    canary + "-token",
		"CI_TOKEN":           canary + "-token",
		"STET_SOURCE_SECRET": "whsec_" + canary + "!!, " + canary + "-bare",
		"OPENAI_API_KEY":     canary + "-key",
	}
	dir := writeConfig(t, yaml)
	_, err := Load(filepath.Join(dir, "stet.yaml"), lookup(env))
	if err == nil {
		t.Fatal("Load = nil, want problems")
	}
	msg := err.Error()
	for _, want := range []string{"database:", "tenants[0].tokens[1].token_env:", "secret 1 of 2", "secret 2 of 2"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Load error = %s\nwant it to mention %q", msg, want)
		}
	}
	if strings.Contains(msg, canary) {
		t.Errorf("Load error shows a secret:\n%s", msg)
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"30d", 30 * day, true},
		{"0d", 0, true},
		{"90s", 90 * time.Second, true},
		{"1h30m", 90 * time.Minute, true},
		{"0", 0, true},
		{" 5m ", 5 * time.Minute, true},
		{"-5m", 0, false},
		{"-3d", 0, false},
		{"30", 0, false},
		{"1.5d", 0, false},
		{"d", 0, false},
		{"30 days", 0, false},
		{"999999999999d", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if (err == nil) != tt.ok || got.Std() != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v, ok=%v", tt.in, got.Std(), err, tt.want, tt.ok)
		}
	}
}

func TestParseByteSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want ByteSize
		ok   bool
	}{
		{"1048576", 1 << 20, true},
		{"1MiB", 1 << 20, true},
		{"512 KiB", 512 << 10, true},
		{"2KB", 2000, true},
		{"3MB", 3_000_000, true},
		{"1GiB", 1 << 30, true},
		{"100B", 100, true},
		{"-1", 0, false},
		{"1.5MiB", 0, false},
		{"MiB", 0, false},
		{"1TB", 0, false},
		{"9999999999GiB", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseByteSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseByteSize(%q) = %v, %v; want %v, ok=%v", tt.in, int64(got), err, int64(tt.want), tt.ok)
		}
	}
}

func TestStrings(t *testing.T) {
	t.Parallel()
	tests := []struct{ got, want string }{
		{Duration(30 * day).String(), "30d"},
		{Duration(90 * time.Second).String(), "1m30s"},
		{ByteSize(1 << 20).String(), "1MiB"},
		{ByteSize(1500).String(), "1500B"},
		{Problem{Path: "sources[0].identiy", Reason: "unknown key"}.String(), "sources[0].identiy: unknown key"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("String() = %q, want %q", tt.got, tt.want)
		}
	}
}

func TestLookupsAndDomain(t *testing.T) {
	t.Parallel()
	c, err := Load(filepath.Join("testdata", "valid", "stet.yaml"), lookup(testEnv()))
	if err != nil {
		t.Fatal(err)
	}
	if c.Source("community-reports") != &c.Sources[0] || c.Tenant("demo") != &c.Tenants[0] ||
		c.Profile("moderation") != &c.Profiles[0] || c.Processor("openai-us") != &c.Processors[1] ||
		c.Policy("standard") != &c.Policies[0] {
		t.Errorf("lookups did not return the configured items")
	}
	if c.Source("nope") != nil || c.Processor("nope") != nil {
		t.Errorf("lookup of an unknown id returned an item")
	}
	pol := c.Policy("standard").Domain()
	want := stet.Policy{
		ID:                "standard",
		Processors:        []string{"local-rules"},
		Minimize:          []stet.IdentifierClass{stet.IdentEmail, stet.IdentPhone, stet.IdentSSN, stet.IdentMRN, stet.IdentURL, stet.IdentIP},
		TextRetention:     30 * day,
		ArtifactRetention: 365 * day,
		ReplayHorizon:     90 * day,
	}
	if pol.Hash() != want.Hash() {
		t.Errorf("Policy.Domain() = %+v, want %+v", pol, want)
	}
	prof := c.Profile("moderation").Domain()
	if prof.ExtractionVersion() != "moderation@1" || !strings.Contains(prof.Prompt, "{{.Text}}") || len(prof.Schema) == 0 {
		t.Errorf("Profile.Domain() = %+v, want moderation@1 with schema and prompt", prof)
	}
}

// Boundary declarations may be pending: the config loads, the processor
// names its pending answers (and the policy's domain hash keeps its value
// while allowed_subprocessors is absent).
func TestLoadPendingAnswers(t *testing.T) {
	t.Parallel()
	yaml := readExample(t)
	plain := writeConfig(t, yaml)
	before, err := Load(filepath.Join(plain, "stet.yaml"), lookup(testEnv()))
	if err != nil {
		t.Fatal(err)
	}
	yaml = strings.Replace(yaml, "    region: us\n", "    region: pending\n", 1)
	yaml = strings.Replace(yaml, "retention: 30d\n", "retention: 30d\n    zero_data_retention: pending\n    subprocessors: pending\n    deletion: api\n", 1)
	dir := writeConfig(t, yaml)
	c, err := Load(filepath.Join(dir, "stet.yaml"), lookup(testEnv()))
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	if got := c.Processor("openai-us").PendingAnswers(); !slices.Equal(got, []string{"region", "zero_data_retention", "subprocessors"}) {
		t.Errorf("PendingAnswers = %v, want region, zero_data_retention, subprocessors", got)
	}
	if got := c.Processor("local-rules").PendingAnswers(); len(got) != 0 {
		t.Errorf("local-rules PendingAnswers = %v, want none", got)
	}
	if c.Policies[0].Domain().Hash() != before.Policies[0].Domain().Hash() {
		t.Errorf("the policy's hash changed with its processors' answers")
	}
}
