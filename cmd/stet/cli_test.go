package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/ledger"
)

func TestRunCommandsAndUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{name: "no arguments", args: nil, wantCode: exitUsage, wantStderr: "Usage: stet <command>"},
		{name: "unknown command", args: []string{"frobnicate"}, wantCode: exitUsage, wantStderr: `unknown command "frobnicate"`},
		{name: "version", args: []string{"version"}, wantCode: exitOK, wantStdout: "stet " + version},
		{name: "help", args: []string{"help"}, wantCode: exitOK, wantStdout: "Usage: stet <command>"},
		{name: "serve bad role", args: []string{"serve", "--role", "boss"}, wantCode: exitUsage, wantStderr: "--role must be"},
		{name: "serve unknown flag", args: []string{"serve", "--frob"}, wantCode: exitUsage, wantStderr: "flag provided but not defined"},
		{name: "inspect without a target", args: []string{"inspect"}, wantCode: exitUsage, wantStderr: "Usage: stet inspect"},
		{name: "resume without a job", args: []string{"resume"}, wantCode: exitUsage, wantStderr: "Usage: stet resume"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runInProcess(t, tt.args...)
			if code != tt.wantCode {
				t.Errorf("run(%q) = %d, want %d\nstdout: %s\nstderr: %s", tt.args, code, tt.wantCode, stdout, stderr)
			}
			if !strings.Contains(stdout, tt.wantStdout) {
				t.Errorf("run(%q) stdout = %q, want it to contain %q", tt.args, stdout, tt.wantStdout)
			}
			if !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("run(%q) stderr = %q, want it to contain %q", tt.args, stderr, tt.wantStderr)
			}
		})
	}
}

// unsetEnv names a variable no test sets.
const unsetEnv = "STET_E2E_NEVER_SET_SECRET"

// configParts fill the holes of a small, otherwise valid config.
type configParts struct {
	secretEnv   string // sources[0].secret_env
	policy      string // sources[0].policy
	sourceExtra string // more lines under sources[0]
	schema      string // profiles[0].schema
}

// writeRulesConfig writes a config with the rules processor and a database
// under dir/stet-data, and returns its path.
func writeRulesConfig(t *testing.T, dir string, p configParts) string {
	t.Helper()
	profiles := filepath.Join(quickstartDir(), "profiles")
	if p.secretEnv == "" {
		p.secretEnv = envSourceSecret
	}
	if p.policy == "" {
		p.policy = "standard"
	}
	if p.schema == "" {
		p.schema = filepath.Join(profiles, "moderation.schema.json")
	}
	yaml := fmt.Sprintf(`database: sqlite://stet-data/stet.db
listen: 127.0.0.1:0
tenants:
  - id: demo
    tokens:
      - {name: ops, role: operator, token_env: %s}
sources:
  - id: %s
    tenant: demo
    secret_env: %s
    profile: moderation
    policy: %s
%sprofiles:
  - id: moderation
    version: 1
    schema: %q
    prompt: %q
processors:
  - id: local-rules
    kind: rules
    rules: %q
    region: local
    retention: none
policies:
  - id: standard
    processors: [local-rules]
`, envToken, testSource, p.secretEnv, p.policy, p.sourceExtra, p.schema,
		filepath.Join(profiles, "moderation.prompt.tmpl"), filepath.Join(profiles, "moderation.rules.yaml"))
	path := filepath.Join(dir, "stet.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestServeInvalidConfigStartsNothing(t *testing.T) {
	t.Parallel()
	if v := os.Getenv(unsetEnv); v != "" {
		t.Fatalf("%s is set; this test needs it unset", unsetEnv)
	}
	// The config every case breaks is valid as written.
	if _, err := config.Load(writeRulesConfig(t, t.TempDir(), configParts{}), os.Getenv); err != nil {
		t.Fatalf("config.Load(base config) = %v, want nil", err)
	}
	tests := []struct {
		name  string
		parts func(dir string) configParts
		// wantStderr are strings stderr must hold: the key path first.
		wantStderr []string
	}{
		{
			name:       "unknown key",
			parts:      func(string) configParts { return configParts{sourceExtra: "    identiy: external_id\n"} },
			wantStderr: []string{"sources[0].identiy", "unknown key"},
		},
		{
			name:       "source names a missing policy",
			parts:      func(string) configParts { return configParts{policy: "no-such-policy"} },
			wantStderr: []string{"sources[0].policy", "no-such-policy"},
		},
		{
			name:       "missing environment variable",
			parts:      func(string) configParts { return configParts{secretEnv: unsetEnv} },
			wantStderr: []string{"sources[0].secret_env", unsetEnv},
		},
		{
			name: "schema that is not valid JSON Schema",
			parts: func(dir string) configParts {
				path := filepath.Join(dir, "bad.schema.json")
				if err := os.WriteFile(path, []byte(`{"type": "objekt", "properties": []}`), 0o600); err != nil {
					t.Fatal(err)
				}
				return configParts{schema: path}
			},
			wantStderr: []string{"profiles[0].schema"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := writeRulesConfig(t, dir, tt.parts(dir))
			// If serve started after all, the deadline stops it and the
			// exit code below fails the test.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			code := run(ctx, []string{"serve", "--config", path}, &stdout, &stderr)
			if code != exitUsage {
				t.Errorf("run(serve --config %s) = %d, want %d\nstderr: %s", tt.name, code, exitUsage, stderr.String())
			}
			for _, want := range tt.wantStderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("run(serve) stderr = %q, want it to name %q", stderr.String(), want)
				}
			}
			if fileExists(filepath.Join(dir, "stet-data")) {
				t.Errorf("run(serve) with an invalid config created %s, want nothing created", filepath.Join(dir, "stet-data"))
			}
		})
	}
}

// copyTree copies the files under src to dst, skipping the top-level
// entries named in skip.
func copyTree(t *testing.T, src, dst string, skip ...string) {
	t.Helper()
	if err := copyDir(src, dst, skip...); err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}

// copyDir copies the tree at src into dst, leaving out the top-level
// entries named in skip.
func copyDir(src, dst string, skip ...string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		for _, s := range skip {
			if rel == s {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o600)
	})
}

// quickstartRow is one line of the quickstart's delivery table.
type quickstartRow struct {
	webhookID, status, job, duplicate string
}

// report001Rows returns the delivery table's rows for report-001.json.
func report001Rows(stdout string) []quickstartRow {
	var rows []quickstartRow
	for _, line := range strings.Split(stdout, "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && f[0] == "report-001.json" {
			rows = append(rows, quickstartRow{webhookID: f[1], status: f[2], job: f[3], duplicate: f[4]})
		}
	}
	return rows
}

// inspectOutput is `stet inspect --json`.
type inspectOutput struct {
	Report *api.ReportView `json:"report"`
	Jobs   []api.JobView   `json:"jobs"`
}

// checkOutput is `stet check --json`.
type checkOutput struct {
	OK         bool               `json:"ok"`
	Violations []ledger.Violation `json:"violations"`
}

// TestQuickstartThenOperatorCommands runs the README's quickstart path in a
// copy of examples/quickstart, then the operator commands on its ledger.
func TestQuickstartThenOperatorCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyTree(t, quickstartDir(), dir, "stet-data")
	text := sampleText(t, "report-001.json")

	code, stdout, stderr := runInProcess(t, "quickstart", "--once", "--dir", dir, "--listen", "127.0.0.1:0")
	if code != exitOK {
		t.Fatalf("run(quickstart --once) = %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"12 deliveries, 10 distinct jobs", "review queue (10 records)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("quickstart stdout does not report %q:\n%s", want, stdout)
		}
	}
	rows := report001Rows(stdout)
	if len(rows) != 3 {
		t.Fatalf("quickstart delivered report-001.json %d times, want 3 (first, same webhook-id, new webhook-id):\n%s", len(rows), stdout)
	}
	wantRows := []struct{ status, duplicate string }{{"202", "false"}, {"200", "true"}, {"200", "true"}}
	for i, r := range rows {
		if r.status != wantRows[i].status || r.duplicate != wantRows[i].duplicate {
			t.Errorf("report-001 delivery %d = status %s duplicate %s, want %s %s", i+1, r.status, r.duplicate, wantRows[i].status, wantRows[i].duplicate)
		}
		if r.job != rows[0].job {
			t.Errorf("report-001 delivery %d resolved to job %s, want %s", i+1, r.job, rows[0].job)
		}
	}
	if rows[1].webhookID != rows[0].webhookID || rows[2].webhookID == rows[0].webhookID {
		t.Errorf("report-001 webhook-ids = %s, %s, %s; want the first repeated, then a new one", rows[0].webhookID, rows[1].webhookID, rows[2].webhookID)
	}
	jobID := rows[0].job
	if !strings.HasPrefix(jobID, "job_") {
		t.Fatalf("report-001 job = %q, want a job ID", jobID)
	}
	if logs, err := os.ReadFile(filepath.Join(dir, "stet-data", "stet.log")); err != nil {
		t.Errorf("read the quickstart log: %v", err)
	} else if strings.Contains(string(logs), text[:40]) {
		t.Errorf("the quickstart log holds report-001's text")
	}
	cfg := filepath.Join(dir, "stet.yaml")

	// Ledgers to break, copied before any subtest runs.
	broken := map[string]string{}
	for _, name := range []string{ledger.InvHeldPastLease, ledger.InvNoRecordAfterSLA} {
		d := t.TempDir()
		copyTree(t, dir, d)
		broken[name] = d
	}

	t.Run("operator", func(t *testing.T) {
		t.Run("inspect report json", func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runInProcess(t, "inspect", "--config", cfg, "--json", testSource+"/report-001")
			if code != exitOK {
				t.Fatalf("run(inspect --json report-001) = %d, want 0\nstderr: %s", code, stderr)
			}
			var out inspectOutput
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Fatalf("inspect --json output is not JSON: %v\n%s", err, stdout)
			}
			if out.Report == nil || len(out.Report.Revisions) != 1 {
				t.Fatalf("inspect --json report = %+v, want one revision", out.Report)
			}
			rv := out.Report.Revisions[0]
			if rv.JobID != jobID || rv.State != "committed" || rv.ReviewRecordID == nil || !rv.Authoritative {
				t.Errorf("inspect --json revision = %+v, want job %s committed with an authoritative record", rv, jobID)
			}
			if len(out.Jobs) != 1 || out.Jobs[0].JobID != jobID || out.Jobs[0].State != "committed" || out.Jobs[0].ReviewRecordID == nil {
				t.Errorf("inspect --json jobs = %+v, want job %s committed with a review record", out.Jobs, jobID)
			}
			if strings.Contains(stdout, text[:40]) {
				t.Errorf("inspect --json output holds report-001's text")
			}
		})
		t.Run("inspect job", func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runInProcess(t, "inspect", "--config", cfg, jobID)
			if code != exitOK {
				t.Fatalf("run(inspect %s) = %d, want 0\nstderr: %s", jobID, code, stderr)
			}
			for _, want := range []string{"job " + jobID, "state committed", "request id", "local-rules", "succeeded", "review record rec"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("inspect %s output does not show %q:\n%s", jobID, want, stdout)
				}
			}
			if strings.Contains(stdout, text[:40]) {
				t.Errorf("inspect output holds report-001's text")
			}
		})
		t.Run("inspect unknown report", func(t *testing.T) {
			t.Parallel()
			code, _, stderr := runInProcess(t, "inspect", "--config", cfg, testSource+"/report-999")
			if code != exitFailure || !strings.Contains(stderr, "not found") {
				t.Errorf("run(inspect report-999) = %d, stderr %q; want %d and not found", code, stderr, exitFailure)
			}
		})
		t.Run("check", func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runInProcess(t, "check", "--config", cfg)
			if code != exitOK || !strings.HasPrefix(stdout, "ok") {
				t.Errorf("run(check) = %d, stdout %q, stderr %q; want 0 and ok", code, stdout, stderr)
			}
		})
		t.Run("check json", func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runInProcess(t, "check", "--config", cfg, "--json")
			var out checkOutput
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Fatalf("check --json output is not JSON: %v\n%s", err, stdout)
			}
			if code != exitOK || !out.OK || out.Violations == nil || len(out.Violations) != 0 {
				t.Errorf("run(check --json) = %d, %s (stderr %q); want 0 and {\"ok\": true, \"violations\": []}", code, stdout, stderr)
			}
		})
		t.Run("migrate is idempotent", func(t *testing.T) {
			t.Parallel()
			for i := range 2 {
				code, stdout, stderr := runInProcess(t, "migrate", "--config", cfg)
				if code != exitOK || !strings.Contains(stdout, "ledger at version") {
					t.Fatalf("run(migrate) #%d = %d, stdout %q, stderr %q; want 0", i+1, code, stdout, stderr)
				}
				if strings.Contains(stdout, "applied") {
					t.Errorf("run(migrate) #%d on a migrated ledger applied migrations:\n%s", i+1, stdout)
				}
			}
		})
		t.Run("resume committed job", func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runInProcess(t, "resume", "--config", cfg, jobID)
			if code != exitFailure || !strings.Contains(stderr, "committed") {
				t.Errorf("run(resume %s) = %d, stdout %q, stderr %q; want %d saying it is committed", jobID, code, stdout, stderr, exitFailure)
			}
		})
		t.Run("resume unknown job", func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runInProcess(t, "resume", "--config", cfg, "job_00000000000000000000000000")
			if code != exitFailure || !strings.Contains(stderr, "not found") {
				t.Errorf("run(resume unknown) = %d, stdout %q, stderr %q; want %d and not found", code, stdout, stderr, exitFailure)
			}
		})
	})
	// The operator commands changed nothing: the report-001 job is still
	// committed (resume never rewrites a finished job).
	db := openLedgerRO(t, filepath.Join(dir, "stet-data", "stet.db"))
	if n := count(t, db, `SELECT COUNT(*) FROM jobs WHERE public_id = stet_ulid($1) AND state = 'committed'`, jobID); n != 1 {
		t.Errorf("committed jobs with id %s after the operator commands = %d, want 1", jobID, n)
	}

	t.Run("check violations", func(t *testing.T) {
		hourAgo := time.Now().Add(-time.Hour).UnixMicro()
		tests := []struct {
			name   string
			tamper string // SQL with $1 = report-001's job ID
			args   []any
			// before is a check that still passes after tampering (nil: none).
			before []string
			flags  []string
		}{
			{
				name:   ledger.InvHeldPastLease,
				tamper: `UPDATE jobs SET state = 'extracting', lease_until = $2 WHERE public_id = stet_ulid($1)`,
				args:   []any{hourAgo},
			},
			{
				name:   ledger.InvNoRecordAfterSLA,
				tamper: `DELETE FROM review_records WHERE job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))`,
				// Within the default one-hour SLA a missing record is fine.
				before: []string{"--json"},
				flags:  []string{"--sla", "1ms"},
			},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				d := broken[tt.name]
				cfg := filepath.Join(d, "stet.yaml")
				rw := openLedgerRW(t, filepath.Join(d, "stet-data", "stet.db"))
				res, err := rw.Exec(tt.tamper, append([]any{jobID}, tt.args...)...)
				if err != nil {
					t.Fatalf("tamper: %v", err)
				}
				if n, _ := res.RowsAffected(); n != 1 {
					t.Fatalf("tamper changed %d rows, want 1", n)
				}
				rw.Close()

				if tt.before != nil {
					args := append([]string{"check", "--config", cfg}, tt.before...)
					if code, stdout, _ := runInProcess(t, args...); code != exitOK {
						t.Errorf("run(%q) = %d, want 0\n%s", args, code, stdout)
					}
				}
				args := append([]string{"check", "--config", cfg, "--json"}, tt.flags...)
				code, stdout, stderr := runInProcess(t, args...)
				if code != exitFailure {
					t.Errorf("run(%q) = %d, want %d\nstdout: %s\nstderr: %s", args, code, exitFailure, stdout, stderr)
				}
				var out checkOutput
				if err := json.Unmarshal([]byte(stdout), &out); err != nil {
					t.Fatalf("check --json output is not JSON: %v\n%s", err, stdout)
				}
				found := false
				for _, v := range out.Violations {
					if v.Name == tt.name && v.JobID == jobID {
						found = true
					}
				}
				if out.OK || !found {
					t.Errorf("run(%q) = %s, want ok false and a %s violation for job %s", args, stdout, tt.name, jobID)
				}
				if strings.Contains(stdout, "report-001") {
					t.Errorf("check --json output holds the external ID: %s", stdout)
				}

				args = append([]string{"check", "--config", cfg}, tt.flags...)
				code, stdout, _ = runInProcess(t, args...)
				if code != exitFailure || !strings.Contains(stdout, tt.name) {
					t.Errorf("run(%q) = %d, stdout %q; want %d naming %s", args, code, stdout, exitFailure, tt.name)
				}
			})
		}
	})
}

func TestOperatorCommandsOnMissingLedgerCreateNothing(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"check"}, {"inspect", testSource + "/report-001"}, {"resume", "job_01M8KEX3CC1DS9TSZ1B7G5XDFN"}} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := writeRulesConfig(t, dir, configParts{})
			code, _, stderr := runInProcess(t, append([]string{args[0], "--config", path}, args[1:]...)...)
			if code != exitUnhealthy {
				t.Errorf("run(%s) on a missing ledger = %d, want %d\nstderr: %s", args[0], code, exitUnhealthy, stderr)
			}
			if fileExists(filepath.Join(dir, "stet-data")) {
				t.Errorf("run(%s) on a missing ledger created %s, want nothing created", args[0], filepath.Join(dir, "stet-data"))
			}
		})
	}
}

// The lab is not in the product: stetlab bench and stetlab drill name the lab
// binary, and stet eval has no --demo-fakes (stetlab eval has).
func TestLabCommandsNotInTheProduct(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"bench", "intake"}, {"drill", "1"}} {
		code, _, stderr := runInProcess(t, args...)
		if code != exitUsage || !strings.Contains(stderr, "./stetlab "+args[0]) {
			t.Errorf("stet %s = %d %q, want 2 naming stetlab", args[0], code, stderr)
		}
	}
	code, _, stderr := runInProcess(t, "eval", "--profile", "p", "--labels", "l.jsonl", "--processors", "a", "--demo-fakes", "f.yaml")
	if code != exitUsage || !strings.Contains(stderr, "flag provided but not defined: -demo-fakes") {
		t.Errorf("stetlab eval --demo-fakes = %d %q, want 2: unknown flag", code, stderr)
	}
}

// stet pause / unpause: pauses are listed, recorded and audited; bad scopes
// and missing reasons are usage errors; unpausing what is not paused fails.
func TestPauseUnpause(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeRulesConfig(t, dir, configParts{})
	if code, _, stderr := runInProcess(t, "migrate", "--config", cfg); code != exitOK {
		t.Fatalf("migrate = %d: %s", code, stderr)
	}
	steps := []struct {
		args   []string
		code   int
		stdout string
	}{
		{[]string{"pause"}, exitOK, "dispatch is not paused"},
		{[]string{"pause", "--scope", "processor:local-rules"}, exitUsage, ""},
		{[]string{"pause", "--scope", "galaxy:far", "--reason", "x"}, exitUsage, ""},
		{[]string{"pause", "--scope", "processor:local-rules", "--reason", "key rotation"}, exitOK, "dispatch paused for processor:local-rules"},
		{[]string{"pause"}, exitOK, "processor:local-rules"},
		{[]string{"unpause", "--scope", "processor:local-rules"}, exitOK, "dispatch resumed"},
		{[]string{"unpause", "--scope", "processor:local-rules"}, exitFailure, ""},
		{[]string{"pause", "--json"}, exitOK, `{"pauses":[]}`},
	}
	for _, s := range steps {
		args := append([]string{s.args[0], "--config", cfg}, s.args[1:]...)
		code, stdout, stderr := runInProcess(t, args...)
		if code != s.code || !strings.Contains(stdout, s.stdout) {
			t.Errorf("run(%q) = %d, stdout %q, stderr %q; want %d with %q", args, code, stdout, stderr, s.code, s.stdout)
		}
	}
	db := openLedgerRO(t, filepath.Join(dir, "stet-data", "stet.db"))
	if n := count(t, db, `SELECT COUNT(*) FROM audit_log WHERE object_type = 'dispatch' AND actor = 'cli'`); n != 2 {
		t.Errorf("dispatch audit entries = %d, want 2 (pause, unpause)", n)
	}
}
