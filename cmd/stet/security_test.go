package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// stet audit verify: 0 on an intact chain, 1 at the first broken link;
// stet inspect is audited.
func TestAuditVerifyCommand(t *testing.T) {
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
	if code, stdout, stderr := runInProcess(t, "audit", "verify", "--config", cfg); code != exitOK || !strings.Contains(stdout, "ok: 3 chained rows intact") {
		t.Fatalf("audit verify = %d %q %q, want 0 and 3 rows intact", code, stdout, stderr)
	}
	db := openLedgerRW(t, filepath.Join(dir, "stet-data", "stet.db"))
	for _, s := range []string{`DROP TRIGGER audit_log_no_update`, `UPDATE audit_log SET actor = 'someone-else' WHERE id = 2`} {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	if code, stdout, _ := runInProcess(t, "audit", "verify", "--config", cfg); code != exitFailure || !strings.Contains(stdout, "broken: row 2") {
		t.Errorf("audit verify after editing row 2 = %d %q, want 1 and broken at row 2", code, stdout)
	}
}
