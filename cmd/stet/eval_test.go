package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/lab/evalfake"
)

// evalWorld is a copy of the quickstart's eval folder (config, fakes) with
// a few labelled lines and a production ledger next to it.
func evalWorld(t *testing.T, acceptance string) (cfg, labels, prodDB string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", "examples", "quickstart"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "profiles"), os.DirFS(filepath.Join(root, "profiles"))); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "eval"), 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "eval", "stet-eval.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	y := string(b)
	if acceptance != "" {
		i := strings.Index(y, "    acceptance:")
		j := strings.Index(y, "processors:")
		y = y[:i] + "    acceptance: " + acceptance + "\n" + y[j:]
	}
	cfg = filepath.Join(dir, "eval", "stet-eval.yaml")
	if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	// Fakes that answer at once, so the test does not wait on latency.
	fakes := "fakes:\n  - {processor: fast-mini, seed: 1, field_error_rate: {category: 0.3}, schema_invalid_rate: 0.2, repair_fail_rate: 0.5, refusal_rate: 0.1}\n"
	if err := os.WriteFile(filepath.Join(dir, "eval", "fakes.yaml"), []byte(fakes), 0o600); err != nil {
		t.Fatal(err)
	}
	all, err := os.ReadFile(filepath.Join(root, "eval", "moderation.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(all), "\n")
	labels = filepath.Join(dir, "eval", "labels.jsonl")
	if err := os.WriteFile(labels, []byte(strings.Join(lines[:40], "")), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, labels, filepath.Join(dir, "stet-data", "stet.db")
}

// tableCounts counts the rows of every table of a SQLite ledger (not
// SQLite's own bookkeeping, sqlite_sequence).
func tableCounts(t *testing.T, db *sql.DB) map[string]int {
	t.Helper()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	out := map[string]int{}
	for _, n := range names {
		out[n] = count(t, db, `SELECT COUNT(*) FROM "`+n+`"`)
	}
	return out
}

// seedProduction migrates the production ledger and imports two reports,
// so that it holds rows an eval could disturb.
func seedProduction(t *testing.T, cfg string) {
	t.Helper()
	t.Setenv("STET_SOURCE_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	t.Setenv("STET_DEMO_TOKEN", "tok-eval-test-0123456789abcdefghijkl")
	if code, _, stderr := runInProcess(t, "migrate", "--config", cfg); code != exitOK {
		t.Fatalf("migrate = %d: %s", code, stderr)
	}
	nd := filepath.Join(t.TempDir(), "in.ndjson")
	if err := os.WriteFile(nd, []byte(`{"external_id":"p1","revision":1,"text":"hello there"}`+"\n"+`{"external_id":"p2","revision":1,"text":"use code X for 20% off"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runInProcess(t, "import", "--config", cfg, "--source", "community-reports", nd); code != exitOK {
		t.Fatalf("import = %d: %s", code, stderr)
	}
}

// Not parallel: t.Setenv.
func TestEvalGateAndProductionLedgerUntouched(t *testing.T) {
	cfg, labels, prod := evalWorld(t, "{fields: {category: {min_accuracy: 0.5}}, max_schema_failure_rate: 0.5}")
	seedProduction(t, cfg)
	before := tableCounts(t, openLedgerRO(t, prod))
	if before["jobs"] != 2 || before["revisions"] != 2 {
		t.Fatalf("production ledger before = %v, want 2 jobs and 2 revisions", before)
	}
	out := filepath.Join(t.TempDir(), "out")
	code, stdout, stderr := runLabEval(t, "--config", cfg, "--profile", "moderation", "--labels", labels,
		"--processors", "local-rules,fast-mini", "--out", out, "--demo-fakes", filepath.Join(filepath.Dir(cfg), "fakes.yaml"), "--gate", "--pause-on-fail")
	if code != exitOK {
		t.Fatalf("eval --gate (a rule both pass) = %d, want 0\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	for _, want := range []string{"PASS    local-rules", "PASS    fast-mini", "report.html"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("eval stdout lacks %q:\n%s", want, stdout)
		}
	}
	after := tableCounts(t, openLedgerRO(t, prod))
	for k, v := range before {
		if after[k] != v {
			t.Errorf("production table %s: %d rows before the eval, %d after", k, v, after[k])
		}
	}
	var rep struct {
		Processors []struct {
			ID                string  `json:"id"`
			Items             int     `json:"items"`
			SchemaFailureRate float64 `json:"schema_failure_rate"`
			RepairRate        float64 `json:"repair_rate"`
			RefusalRate       float64 `json:"refusal_rate"`
		} `json:"processors"`
	}
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Processors) != 2 || rep.Processors[1].Items != 40 {
		t.Fatalf("report.json = %v %+v, want 2 processors of 40 documents", err, rep)
	}
	if f := rep.Processors[1]; f.RepairRate == 0 || f.RefusalRate == 0 {
		t.Errorf("fast-mini's scripted faults did not show: %+v", f)
	}
	// The scratch ledger holds the eval: 2 processors × 40 documents.
	scratch := openLedgerRO(t, filepath.Join(out, "ledger.db"))
	if n := count(t, scratch, `SELECT COUNT(*) FROM review_records`); n != 80 {
		t.Errorf("scratch ledger review records = %d, want 80", n)
	}

	// The same eval with a rule nobody passes: --gate exits 1, and
	// --pause-on-fail pauses both in the production ledger, audited, and
	// writes nothing else there.
	cfg2 := strings.TrimSuffix(cfg, ".yaml") + "-strict.yaml"
	y, _ := os.ReadFile(cfg)
	strict := strings.Replace(string(y), "min_accuracy: 0.5}", "min_accuracy: 0.999}", 1)
	if err := os.WriteFile(cfg2, []byte(strict), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runInProcess(t, "eval", "--config", cfg2, "--profile", "moderation", "--labels", labels,
		"--processors", "local-rules", "--out", filepath.Join(t.TempDir(), "out2"), "--gate", "--pause-on-fail")
	if code != exitFailure {
		t.Fatalf("eval --gate (a failing rule) = %d, want 1\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "FAIL    local-rules") || !strings.Contains(stdout, "paused dispatch for processor:local-rules") {
		t.Errorf("eval stdout lacks the failure and the pause:\n%s", stdout)
	}
	db := openLedgerRO(t, prod)
	final := tableCounts(t, db)
	for k, v := range before {
		want := v
		switch k {
		case "dispatch_pauses", "audit_log":
			want = v + 1
		}
		if final[k] != want {
			t.Errorf("production table %s after --pause-on-fail: %d rows, want %d", k, final[k], want)
		}
	}
	var reason, by string
	if err := db.QueryRow(`SELECT reason, paused_by FROM dispatch_pauses WHERE scope = 'processor:local-rules'`).Scan(&reason, &by); err != nil {
		t.Fatal(err)
	}
	if by != "stet eval" || !strings.Contains(reason, "category accuracy") {
		t.Errorf("pause = %q by %q, want the eval's reason", reason, by)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM audit_log WHERE action = 'dispatch.pause' AND actor = 'stet eval'`); n != 1 {
		t.Errorf("audit entries of the eval's pause = %d, want 1", n)
	}

	// Without --gate a failing rule is reported, not an exit code.
	if code, _, stderr := runInProcess(t, "eval", "--config", cfg2, "--profile", "moderation", "--labels", labels,
		"--processors", "local-rules", "--out", filepath.Join(t.TempDir(), "out3"), "--format", "none"); code != exitOK {
		t.Errorf("eval without --gate (a failing rule) = %d, want 0: %s", code, stderr)
	}
}

// runLabEval runs eval as stetlab does, with the demo's scripted fakes (the
// product's stet eval has no --demo-fakes).
func runLabEval(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := cli.Eval(ctx, args, &stdout, &stderr, evalfake.StartDemo)
	return code, stdout.String(), stderr.String()
}

func TestEvalUsageAndRefusal(t *testing.T) {
	t.Parallel()
	cfg, labels, _ := evalWorld(t, "")
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"missing flags", []string{"eval", "--config", cfg}, exitUsage, "--profile, --labels and --processors are required"},
		{"unknown profile", []string{"eval", "--config", cfg, "--profile", "triage", "--labels", labels, "--processors", "local-rules"}, exitUsage, `profile "triage" is not configured`},
		{"bad format", []string{"eval", "--config", cfg, "--profile", "moderation", "--labels", labels, "--processors", "local-rules", "--format", "xml"}, exitUsage, "--format must be"},
		{"refused processor, gated", []string{"eval", "--config", cfg, "--profile", "moderation", "--labels", labels, "--processors", "openai-eu", "--out", filepath.Join(t.TempDir(), "o"), "--gate"}, exitFailure, `openai-eu refused: policy "standard" does not permit it; no call is made`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runInProcess(t, tt.args...)
			if code != tt.wantCode || !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("run(%q) = %d, stderr %q; want %d and %q\nstdout: %s", tt.args, code, stderr, tt.wantCode, tt.wantStderr, stdout)
			}
		})
	}
}

// The report opens in headless Chromium with its charts drawn.
func TestEvalReportOpensInChromium(t *testing.T) {
	t.Parallel()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed")
	}
	cfg, labels, _ := evalWorld(t, "")
	out := filepath.Join(t.TempDir(), "out")
	if code, _, stderr := runInProcess(t, "eval", "--config", cfg, "--profile", "moderation", "--labels", labels, "--processors", "local-rules", "--out", out, "--format", "none"); code != exitOK {
		t.Fatalf("eval = %d: %s", code, stderr)
	}
	dom, err := exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--dump-dom", "file://"+filepath.Join(out, "report.html")).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	if n := strings.Count(string(dom), "<svg"); n < 6 {
		t.Errorf("chromium's DOM of report.html has %d SVG charts, want at least 6", n)
	}
	if !strings.Contains(string(dom), "local-rules") {
		t.Error("chromium's DOM of report.html lacks the processor")
	}
}
