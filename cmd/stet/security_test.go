package main

import (
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// Every stet http.Server bounds headers at 64 KiB and sets every timeout.
func TestHTTPServerBounds(t *testing.T) {
	t.Parallel()
	srv := newHTTPServer(http.NotFoundHandler(), slog.New(slog.DiscardHandler))
	if srv.MaxHeaderBytes != 64<<10 || srv.ReadTimeout == 0 || srv.WriteTimeout == 0 || srv.IdleTimeout == 0 || srv.ReadHeaderTimeout == 0 {
		t.Fatalf("server = max header %d, timeouts %v %v %v %v; want 64 KiB and every timeout set",
			srv.MaxHeaderBytes, srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 100<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 100 KiB header = %d, want 431", resp.StatusCode)
	}
}

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
