package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet/internal/app"
	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/seal"
)

// The test master keys, in this process's environment (e2eMain).
const (
	envKeyK1    = "STET_TEST_KEY_K1"
	envKeyK2    = "STET_TEST_KEY_K2"
	envKeyWrong = "STET_TEST_KEY_WRONG"
)

var (
	testKeyK1    = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x11}, 32))
	testKeyK2    = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x22}, 32))
	testKeyWrong = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x33}, 32))
)

// canaryText is in the quickstart's report-001: the canary of these tests.
const canaryText = "juice cleanse"

// withKeys writes the quickstart config of dir with encryption: keys (id
// and variable pairs); none removes the section.
func withKeys(t *testing.T, dir string, keys ...[2]string) string {
	t.Helper()
	base, err := os.ReadFile(filepath.Join(quickstartDir(), "stet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	y := string(base)
	if len(keys) > 0 {
		y += "\nencryption:\n  keys:\n"
		for _, k := range keys {
			y += "    - {id: " + k[0] + ", key_env: " + k[1] + "}\n"
		}
	}
	p := filepath.Join(dir, "stet.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// discoveryEncrypted builds the app of cfgPath as serve does and asks
// GET /v1/discovery.
func discoveryEncrypted(t *testing.T, cfgPath string) bool {
	t.Helper()
	cfg, ok := cli.LoadConfig(cfgPath, os.Stderr)
	if !ok {
		t.Fatal("load config")
	}
	a, err := app.Open(context.Background(), cfg, app.Options{Role: "api"})
	if err != nil {
		t.Fatalf("app.Open = %v", err)
	}
	defer a.Close()
	req := httptest.NewRequest(http.MethodGet, "/v1/discovery", nil)
	req.Header.Set("Authorization", "Bearer "+os.Getenv("STET_DEMO_TOKEN"))
	rec := httptest.NewRecorder()
	a.API.ServeHTTP(rec, req)
	var d struct {
		EncryptionAtRest *bool `json:"encryption_at_rest"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &d) != nil || d.EncryptionAtRest == nil {
		t.Fatalf("GET /v1/discovery = %d %s", rec.Code, rec.Body)
	}
	return *d.EncryptionAtRest
}

// The quickstart run with encryption: on: the samples' text is not in the
// bytes of the database file or its WAL, the API still reads the records,
// and discovery says so.
func TestQuickstartEncrypted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyTree(t, quickstartDir(), dir, "stet-data")
	cfg := withKeys(t, dir, [2]string{"k1", envKeyK1})
	if code, stdout, stderr := runInProcess(t, "quickstart", "--once", "--dir", dir, "--listen", "127.0.0.1:0"); code != exitOK {
		t.Fatalf("quickstart = %d\n%s\n%s", code, stdout, stderr)
	}
	data := filepath.Join(dir, "stet-data", "stet.db")
	for _, f := range []string{data, data + "-wal"} {
		b, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(canaryText)) {
			t.Errorf("%s holds the sample text", filepath.Base(f))
		}
	}
	db := openLedgerRO(t, data)
	if n := count(t, db, `SELECT COUNT(*) FROM revisions WHERE text NOT LIKE 'stet:v1:%'`); n != 0 {
		t.Errorf("plaintext revisions = %d, want 0", n)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM review_records WHERE classification IS NOT NULL AND classification NOT LIKE 'stet:v1:%'`); n != 0 {
		t.Errorf("plaintext classifications = %d, want 0", n)
	}
	if !discoveryEncrypted(t, cfg) {
		t.Error("discovery says encryption_at_rest false with encryption: configured")
	}
}

// A plaintext ledger turned encrypted: rekey seals its rows; rotation to
// k2 rewraps every data key; k1 is then removable and the data still
// opens. A wrong key, a missing key and no keys at all stop the start
// (exit 3), never garbage.
func TestRekeyAndStartupKeyChecks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyTree(t, quickstartDir(), dir, "stet-data")
	plain := withKeys(t, dir)
	if code, stdout, stderr := runInProcess(t, "quickstart", "--once", "--dir", dir, "--listen", "127.0.0.1:0"); code != exitOK {
		t.Fatalf("quickstart = %d\n%s\n%s", code, stdout, stderr)
	}
	if discoveryEncrypted(t, plain) {
		t.Error("discovery says encryption_at_rest true without encryption:")
	}
	data := filepath.Join(dir, "stet-data", "stet.db")
	db := openLedgerRO(t, data)
	plainRows := count(t, db, `SELECT COUNT(*) FROM revisions WHERE text NOT LIKE 'stet:v1:%'`)
	reports := count(t, db, `SELECT COUNT(*) FROM reports`)
	if plainRows == 0 || reports == 0 {
		t.Fatalf("quickstart stored %d plaintext revisions of %d reports", plainRows, reports)
	}

	type result struct{ Rewrapped, Sealed, Blinded int }
	rekey := func(cfg string) result {
		t.Helper()
		code, out, stderr := runInProcess(t, "rekey", "--config", cfg, "--json", "--batch", "3")
		var r result
		if code != exitOK || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("rekey = %d %s %s", code, out, stderr)
		}
		return r
	}
	// Encryption turned on: the plaintext rows still read, rekey seals them.
	cfg := withKeys(t, dir, [2]string{"k1", envKeyK1})
	if r := rekey(cfg); r.Sealed < plainRows || r.Blinded < reports || r.Rewrapped != 0 {
		t.Errorf("rekey after turning encryption on = %+v, want >= %d sealed", r, plainRows)
	}
	for _, q := range []string{
		`SELECT COUNT(*) FROM revisions WHERE text NOT LIKE 'stet:v1:%' OR metadata NOT LIKE 'stet:v1:%'`,
		`SELECT COUNT(*) FROM artifacts WHERE raw NOT LIKE 'stet:v1:%' OR output NOT LIKE 'stet:v1:%'`,
		`SELECT COUNT(*) FROM review_records WHERE classification NOT LIKE 'stet:v1:%' OR note NOT LIKE 'stet:v1:%'`,
		`SELECT COUNT(*) FROM revisions WHERE text LIKE '%` + canaryText + `%'`,
	} {
		if n := count(t, db, q); n != 0 {
			t.Errorf("%s = %d after rekey, want 0", q, n)
		}
	}
	if r := rekey(cfg); r != (result{}) {
		t.Errorf("second rekey = %+v, want nothing left to do", r)
	}

	// Rotation: k2 first, k1 still opens; rekey moves every data key to k2.
	cfg = withKeys(t, dir, [2]string{"k2", envKeyK2}, [2]string{"k1", envKeyK1})
	if r := rekey(cfg); r.Rewrapped != reports+1 {
		t.Errorf("rekey to k2 = %+v, want %d rewrapped (every data key and the blind-index key)", r, reports+1)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM index_key WHERE key_id <> 'k2'`); n != 0 {
		t.Errorf("blind-index key not under k2 = %d, want 0", n)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM report_keys WHERE key_id <> 'k2'`); n != 0 {
		t.Errorf("data keys not under k2 = %d, want 0", n)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM audit_log WHERE action = 'encryption.rekey'`); n != 3 {
		t.Errorf("rekey audit entries = %d, want 3", n)
	}

	// k1 removed: everything still opens with k2 alone.
	cfg = withKeys(t, dir, [2]string{"k2", envKeyK2})
	if code, out, stderr := runInProcess(t, "check", "--config", cfg); code != exitOK {
		t.Fatalf("check with k2 alone = %d %s %s", code, out, stderr)
	}
	k2, _ := base64.StdEncoding.DecodeString(testKeyK2)
	kr, err := seal.NewKeyring([]seal.MasterKey{{ID: "k2", Key: k2}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := ledger.Open(ctx, "sqlite://"+data)
	if err != nil {
		t.Fatal(err)
	}
	l.UseKeyring(kr)
	if err := l.CheckKeys(ctx, time.Now()); err != nil {
		t.Fatalf("CheckKeys with k2 alone = %v", err)
	}
	recs, _, err := l.ListReview(ctx, ledger.ReviewFilter{Tenant: "demo", Limit: 100})
	if err != nil || len(recs) == 0 {
		t.Fatalf("ListReview = %d, %v", len(recs), err)
	}
	for _, r := range recs {
		if len(r.Classification) > 0 && !json.Valid(r.Classification) {
			t.Errorf("record %s classification does not open to JSON", r.ID)
		}
	}
	var found bool
	for _, r := range recs {
		txt, err := l.JobText(ctx, "demo", r.JobID)
		if err != nil {
			t.Fatalf("JobText = %v", err)
		}
		found = found || strings.Contains(txt.Text.Reveal(), canaryText)
	}
	l.Close()
	if !found {
		t.Error("no job text holds the sample text after the rekey")
	}

	// Start-up refusals, each with a reason, exit 3.
	for _, tt := range []struct {
		name string
		keys [][2]string
		want string
	}{
		{"wrong key", [][2]string{{"k2", envKeyWrong}}, "wrong key"},
		{"missing key", [][2]string{{"k3", envKeyK1}}, "key k2, which is not configured"},
		{"no keys", nil, "sealed values"},
	} {
		cfg := withKeys(t, dir, tt.keys...)
		code, _, stderr := runInProcess(t, "serve", "--config", cfg, "--listen", "127.0.0.1:0")
		if code != exitUnhealthy || !strings.Contains(stderr, tt.want) {
			t.Errorf("%s: serve = %d %q; want %d and %q", tt.name, code, stderr, exitUnhealthy, tt.want)
		}
	}
}
