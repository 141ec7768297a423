package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/internal/app"
	"github.com/stetlabs/stet/ledger"
)

// stet delete prints the deletion's tasks; the same request again names the
// same deletion; stet deletions lists and shows it; the report then reads
// as deleted; the ledger's files are 0600 in a 0700 folder.
func TestDeleteAndDeletionsCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyTree(t, quickstartDir(), dir, "stet-data")
	if code, stdout, stderr := runInProcess(t, "quickstart", "--once", "--dir", dir, "--listen", "127.0.0.1:0"); code != exitOK {
		t.Fatalf("quickstart = %d\n%s\n%s", code, stdout, stderr)
	}
	cfg := filepath.Join(dir, "stet.yaml")

	code, stdout, stderr := runInProcess(t, "delete", "--config", cfg, testSource+"/report-001")
	if code != exitOK {
		t.Fatalf("run(delete) = %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	for _, c := range append(ledger.LocalCopies, "provider_retention:local-rules") {
		if !strings.Contains(stdout, c) {
			t.Errorf("delete output lacks task %s:\n%s", c, stdout)
		}
	}
	var first api.DeletionView
	code, out, stderr := runInProcess(t, "delete", "--config", cfg, "--json", testSource+"/report-001")
	if code != exitOK || json.Unmarshal([]byte(out), &first) != nil {
		t.Fatalf("run(delete --json) again = %d\n%s\n%s", code, out, stderr)
	}
	if !strings.Contains(stdout, first.DeletionID) || first.State != "pending" {
		t.Errorf("second delete = %+v, want the first deletion, pending", first)
	}
	var list struct{ Deletions []api.DeletionView }
	code, out, _ = runInProcess(t, "deletions", "--config", cfg, "--json")
	if code != exitOK || json.Unmarshal([]byte(out), &list) != nil || len(list.Deletions) != 1 || list.Deletions[0].DeletionID != first.DeletionID {
		t.Errorf("run(deletions --json) = %d %s, want one deletion %s", code, out, first.DeletionID)
	}
	code, out, _ = runInProcess(t, "deletions", "--config", cfg, first.DeletionID)
	if code != exitOK || !strings.Contains(out, "revision_text") {
		t.Errorf("run(deletions ID) = %d %s", code, out)
	}
	if code, _, _ = runInProcess(t, "deletions", "--config", cfg, "del_nope"); code != exitFailure {
		t.Errorf("run(deletions unknown) = %d, want %d", code, exitFailure)
	}
	if code, _, _ = runInProcess(t, "delete", "--config", cfg, testSource+"/no-such-report"); code != exitFailure {
		t.Errorf("run(delete unknown) = %d, want %d", code, exitFailure)
	}
	if code, _, stderr = runInProcess(t, "inspect", "--config", cfg, first.ReportID); code != exitFailure || !strings.Contains(stderr, "deleted") {
		t.Errorf("run(inspect deleted report) = %d %s, want %d and 'deleted'", code, stderr, exitFailure)
	}
	db := openLedgerRO(t, filepath.Join(dir, "stet-data", "stet.db"))
	if n := count(t, db, `SELECT COUNT(*) FROM jobs WHERE report_id = (SELECT id FROM reports WHERE public_id = stet_ulid($1)) AND state NOT IN ('committed', 'manual', 'cancelled')`, first.ReportID); n != 0 {
		t.Errorf("unfinished jobs of the deleted report = %d, want 0", n)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM audit_log WHERE action = 'report.delete' AND actor = 'cli'`); n != 1 {
		t.Errorf("audit entries = %d, want 1", n)
	}

	st, err := os.Stat(filepath.Join(dir, "stet-data"))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("stet-data mode = %v, %v; want 0700", st.Mode().Perm(), err)
	}
	for _, f := range []string{"stet.db", "stet.db-wal", "stet.db-shm"} {
		st, err := os.Stat(filepath.Join(dir, "stet-data", f))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode = %v, %v; want 0600", f, st.Mode().Perm(), err)
		}
	}
}

// GET /v1/discovery is built from the config: the policy hash is the one
// revisions record, the processors are the policy's in order with their
// declared region and retention, and a caller sees only its tenant.
func TestDiscoveryMatchesConfig(t *testing.T) {
	t.Parallel()
	cfg, err := config.LoadWithoutSecrets(filepath.Join(quickstartDir(), "stet.yaml"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	rulesProc, err := app.NewProcessor(cfg.Processor("local-rules"), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := app.Discovery(cfg, false, map[string]stet.Processor{"local-rules": rulesProc})
	srcs, err := app.Sources(cfg, stet.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Sources) != len(cfg.Sources) {
		t.Fatalf("discovery sources = %d, want %d", len(d.Sources), len(cfg.Sources))
	}
	got := d.Sources[0]
	pol := cfg.Policy(cfg.Sources[0].Policy)
	if got.Policy.Hash != srcs[0].PolicyHash || got.Policy.Hash != pol.Domain().Hash() {
		t.Errorf("policy hash = %s, want the recorded %s", got.Policy.Hash, srcs[0].PolicyHash)
	}
	if got.Policy.Retention != (api.DiscoveryRetention{Text: "30d", Artifacts: "365d", Records: "kept", Audio: "0s"}) || got.Policy.ReplayHorizon != "90d" || got.Policy.Audio != "deny" {
		t.Errorf("retention = %+v, horizon %s", got.Policy.Retention, got.Policy.ReplayHorizon)
	}
	if len(got.Processors) != len(pol.Processors) || got.Processors[0].ID != "local-rules" || got.Processors[0].Role != "primary" ||
		got.Processors[0].Region != "local" || got.Processors[0].Retention != "none" || got.Processors[0].Kind != "rules" {
		t.Errorf("processors = %+v", got.Processors)
	}
	// The rules processor's model is its rules file's hash, as stet inspect
	// shows it on the artifact, not the empty configured model.
	rulesFile := mustRead(t, filepath.Join(quickstartDir(), "profiles", "moderation.rules.yaml"))
	if want := "rules-" + stet.SHA256Hex(rulesFile)[:12]; got.Processors[0].Model != want {
		t.Errorf("rules processor model = %q, want %q", got.Processors[0].Model, want)
	}
	if !json.Valid(got.Profile.Schema) || got.Profile.ID != "moderation" || got.Profile.Version != 1 {
		t.Errorf("profile = %+v", got.Profile)
	}

	// Over HTTP, for the caller's tenant only, in the contract's shape.
	ctx := context.Background()
	db, err := ledger.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "stet.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(api.Config{DB: db, Discovery: d, Tokens: []api.Token{
		{Name: "r", Tenant: "demo", Role: stet.RoleReader, Value: "tok-demo"},
		{Name: "o", Tenant: "other", Role: stet.RoleReader, Value: "tok-other"}}}))
	defer srv.Close()
	get := func(tok string) map[string]any {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/discovery", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/discovery = %d", resp.StatusCode)
		}
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := get("tok-demo")
	if m["encryption_at_rest"] != false {
		t.Errorf("encryption_at_rest = %v, want false", m["encryption_at_rest"])
	}
	src := m["sources"].([]any)[0].(map[string]any)
	wantKeys := map[string][]string{
		"source":    {"destinations", "id", "identity", "media", "mode", "policy", "processors", "profile", "revisions", "transcribers"},
		"policy":    {"audio", "hash", "id", "minimize", "regions", "replay_horizon", "retention"},
		"processor": {"id", "kind", "model", "region", "retention", "role", "subprocessors", "zero_data_retention"},
		"profile":   {"id", "schema", "version"},
		"retention": {"artifacts", "audio", "records", "text"},
	}
	for name, obj := range map[string]map[string]any{"source": src, "policy": src["policy"].(map[string]any),
		"processor": src["processors"].([]any)[0].(map[string]any), "profile": src["profile"].(map[string]any),
		"retention": src["policy"].(map[string]any)["retention"].(map[string]any)} {
		var keys []string
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if !reflect.DeepEqual(keys, wantKeys[name]) {
			t.Errorf("%s keys = %v, want %v", name, keys, wantKeys[name])
		}
	}
	if other := get("tok-other"); len(other["sources"].([]any)) != 0 {
		t.Errorf("another tenant sees %d sources, want 0", len(other["sources"].([]any)))
	}
}

// stet deletions confirm closes an unresolved task with the operator's
// evidence (flags before or after the arguments), prints it, and refuses
// a pending task (exit 1), a missing --evidence (exit 2) and an unknown
// copy (exit 1); stet check is clean afterwards.
func TestDeletionsConfirmCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyTree(t, quickstartDir(), dir, "stet-data")
	if code, stdout, stderr := runInProcess(t, "quickstart", "--once", "--dir", dir, "--listen", "127.0.0.1:0"); code != exitOK {
		t.Fatalf("quickstart = %d\n%s\n%s", code, stdout, stderr)
	}
	cfg := filepath.Join(dir, "stet.yaml")
	var d api.DeletionView
	code, out, stderr := runInProcess(t, "delete", "--config", cfg, "--json", testSource+"/report-001")
	if code != exitOK || json.Unmarshal([]byte(out), &d) != nil {
		t.Fatalf("run(delete) = %d\n%s\n%s", code, out, stderr)
	}
	const held = ledger.PrefixProviderRetention + "local-rules"
	if code, _, stderr := runInProcess(t, "deletions", "confirm", "--config", cfg, d.DeletionID, held, "--evidence", "ticket 7"); code != exitFailure || !strings.Contains(stderr, "pending") {
		t.Errorf("confirm of a pending task = %d %s, want %d naming pending", code, stderr, exitFailure)
	}
	// The worker (stet serve) would find the copy held; here the test
	// leaves it so, and finishes the local copies.
	ctx := context.Background()
	db, err := ledger.Open(ctx, "sqlite://"+filepath.Join(dir, "stet-data", "stet.db"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, c := range ledger.LocalCopies {
		if err := ledger.SetTask(ctx, db.Writer(), d.DeletionID, c, stet.DeletionDone, "", time.Time{}, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := ledger.SetTask(ctx, db.Writer(), d.DeletionID, held, stet.DeletionUnresolved, "retention unknown", time.Time{}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.FinishDeletion(ctx, db.Writer(), d.DeletionID, now); err != nil {
		t.Fatal(err)
	}
	db.Close()

	if code, _, _ := runInProcess(t, "deletions", "confirm", "--config", cfg, d.DeletionID, held); code != exitUsage {
		t.Errorf("confirm without --evidence = %d, want %d", code, exitUsage)
	}
	if code, _, _ := runInProcess(t, "deletions", "confirm", "--config", cfg, d.DeletionID, "provider_retention:nope", "--evidence", "x"); code != exitFailure {
		t.Errorf("confirm of an unknown copy = %d, want %d", code, exitFailure)
	}
	code, out, stderr = runInProcess(t, "deletions", "confirm", "--config", cfg, d.DeletionID, held, "--evidence", "vendor ticket 7: purged")
	if code != exitOK || !strings.Contains(out, "state done") || !strings.Contains(out, held+" confirmed by cli: vendor ticket 7: purged") {
		t.Fatalf("run(deletions confirm) = %d\n%s\n%s", code, out, stderr)
	}
	rdb := openLedgerRO(t, filepath.Join(dir, "stet-data", "stet.db"))
	if n := count(t, rdb, `SELECT COUNT(*) FROM audit_log WHERE action = 'deletion.confirm' AND actor = 'cli' AND object_id = $1`, d.DeletionID); n != 1 {
		t.Errorf("deletion.confirm audit rows = %d, want 1", n)
	}
	if code, out, stderr := runInProcess(t, "check", "--config", cfg); code != exitOK {
		t.Errorf("run(check) = %d\n%s\n%s", code, out, stderr)
	}
}
