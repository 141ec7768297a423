package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// stet audit list prints the audit log as GET /v1/audit answers an admin:
// a table by default, the same JSON with --json, filtered by --object and
// --since; every CLI row names its command as its route; the listing is
// itself audited; bad flags are usage errors.
func TestAuditListCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeRulesConfig(t, dir, configParts{})
	if code, _, stderr := runInProcess(t, "migrate", "--config", cfg); code != exitOK {
		t.Fatalf("migrate = %d: %s", code, stderr)
	}
	for _, args := range [][]string{
		{"pause", "--config", cfg, "--scope", "tenant:demo", "--reason", "maintenance"},
		{"unpause", "--config", cfg, "--scope", "tenant:demo"},
		{"pause", "--config", cfg, "--scope", "all", "--reason", "maintenance"},
	} {
		if code, _, stderr := runInProcess(t, args...); code != exitOK {
			t.Fatalf("run(%q) = %d: %s", args, code, stderr)
		}
	}

	code, stdout, stderr := runInProcess(t, "audit", "list", "--config", cfg)
	if code != exitOK {
		t.Fatalf("audit list = %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "at ") {
		t.Fatalf("audit list printed %d lines, want a header and 3 rows:\n%s", len(lines), stdout)
	}
	for _, h := range []string{"actor", "action", "object_type", "object_id", "route", "remote_addr", "request_id", "outcome"} {
		if !strings.Contains(lines[0], h) {
			t.Errorf("audit list header %q lacks %q", lines[0], h)
		}
	}
	for i, want := range []string{"dispatch.pause  dispatch     tenant:demo  stet pause", "dispatch.resume  dispatch     tenant:demo  stet unpause",
		"dispatch.pause   dispatch     all          stet pause"} {
		if f := strings.Join(strings.Fields(lines[i+1]), " "); !strings.Contains(f, strings.Join(strings.Fields(want), " ")) ||
			!strings.Contains(f, " cli ") || !strings.Contains(f, " ok") {
			t.Errorf("audit list row %d = %q, want %q by cli, ok", i+1, lines[i+1], want)
		}
	}

	code, stdout, stderr = runInProcess(t, "audit", "list", "--config", cfg, "--object", "tenant:demo", "--json")
	if code != exitOK {
		t.Fatalf("audit list --object tenant:demo --json = %d: %s", code, stderr)
	}
	var page struct {
		Rows []map[string]any `json:"rows"`
		Next *string          `json:"next_cursor"`
	}
	if err := json.Unmarshal([]byte(stdout), &page); err != nil {
		t.Fatalf("audit list --json is not JSON: %v\n%s", err, stdout)
	}
	if len(page.Rows) != 2 || page.Next != nil {
		t.Fatalf("audit list --object tenant:demo --json = %d rows, next %v; want the pause and the resume", len(page.Rows), page.Next)
	}
	for _, r := range page.Rows {
		for _, k := range []string{"at", "actor", "action", "object_type", "object_id", "route", "remote_addr", "request_id", "outcome"} {
			if _, ok := r[k]; !ok {
				t.Errorf("audit list --json row %v lacks %q", r, k)
			}
		}
		if r["object_id"] != "tenant:demo" || r["outcome"] != "ok" {
			t.Errorf("audit list --json row %v, want object tenant:demo, outcome ok", r)
		}
	}

	// Every listing is audited; --since in the future lists nothing.
	if code, _, _ = runInProcess(t, "audit", "list", "--config", cfg, "--object", "audit_log"); code != exitOK {
		t.Fatalf("audit list = %d", code)
	}
	code, stdout, _ = runInProcess(t, "audit", "list", "--config", cfg)
	if n := strings.Count(stdout, "audit.read"); code != exitOK || n != 3 || !strings.Contains(stdout, "stet audit list") {
		t.Errorf("audit list after three listings shows %d audit.read rows (exit %d), want 3 with route stet audit list:\n%s", n, code, stdout)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	code, stdout, _ = runInProcess(t, "audit", "list", "--config", cfg, "--since", future, "--json")
	if code != exitOK || strings.TrimSpace(stdout) != `{"rows":[],"next_cursor":null}` {
		t.Errorf("audit list --since %s = %d %q, want no rows", future, code, stdout)
	}

	for _, args := range [][]string{
		{"audit", "list", "--config", cfg, "--since", "yesterday"},
		{"audit", "list", "--config", cfg, "extra"},
		{"audit", "lsit"},
	} {
		if code, _, stderr := runInProcess(t, args...); code != exitUsage || stderr == "" {
			t.Errorf("run(%q) = %d %q, want %d with a message", args, code, stderr, exitUsage)
		}
	}
	if code, stdout, _ := runInProcess(t, "audit", "verify", "--config", cfg); code != exitOK || !strings.Contains(stdout, "ok: 8 chained rows intact") {
		t.Errorf("audit verify = %d %q, want 8 rows intact", code, stdout)
	}
}
