package main

import (
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stetlabs/stet/ledger"
)

// stet reroute: its flags and answers. A job the test blocks in the
// quickstart's ledger is listed by --dry-run (nothing changes), moved to
// the policy's processor, and stet inspect then shows the decision; a
// processor the policy does not permit, an unknown job and a missing
// reason are refused with their exit codes.
func TestRerouteCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyTree(t, quickstartDir(), dir, "stet-data")
	if code, stdout, stderr := runInProcess(t, "quickstart", "--once", "--dir", dir, "--listen", "127.0.0.1:0"); code != exitOK {
		t.Fatalf("quickstart = %d\n%s\n%s", code, stdout, stderr)
	}
	cfg := filepath.Join(dir, "stet.yaml")
	dbPath := filepath.Join(dir, "stet-data", "stet.db")
	// A job as the boundary gate leaves one whose processor the policy
	// no longer permits.
	w, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	var pub []byte
	if err := w.QueryRow(`SELECT public_id FROM jobs ORDER BY id LIMIT 1`).Scan(&pub); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Exec(`UPDATE jobs SET state = 'blocked', failure_class = 'boundary', blocked_processor = 'retired-llm',
		blocked_reason = 'processor_no_longer_permitted' WHERE public_id = $1`, pub); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var jobID string
	code, out, stderr := runInProcess(t, "reroute", "--config", cfg, "--scope", "processor:retired-llm", "--to", "local-rules",
		"--reason", "DPO ticket 12", "--dry-run", "--json")
	var dry ledger.Rerouted
	if code != exitOK || json.Unmarshal([]byte(out), &dry) != nil || len(dry.Jobs) != 1 || !dry.DryRun || dry.Jobs[0].From != "retired-llm" {
		t.Fatalf("reroute --dry-run = %d %s %s, want one job from retired-llm", code, out, stderr)
	}
	jobID = dry.Jobs[0].JobID
	rdb := openLedgerRO(t, dbPath)
	if n := count(t, rdb, `SELECT COUNT(*) FROM jobs WHERE state = 'blocked'`); n != 1 {
		t.Errorf("blocked jobs after the dry run = %d, want 1", n)
	}
	for name, c := range map[string]struct {
		args []string
		want int
	}{
		"a processor the policy does not permit": {[]string{"--scope", "job:" + jobID, "--to", "retired-llm", "--reason", "r"}, exitFailure},
		"an unknown job":                         {[]string{"--scope", "job:job_01J00000000000000000000000", "--to", "local-rules", "--reason", "r"}, exitFailure},
		"no reason":                              {[]string{"--scope", "job:" + jobID, "--to", "local-rules"}, exitUsage},
		"a malformed scope":                      {[]string{"--scope", "all", "--to", "local-rules", "--reason", "r"}, exitUsage},
	} {
		if code, out, stderr := runInProcess(t, append([]string{"reroute", "--config", cfg}, c.args...)...); code != c.want {
			t.Errorf("%s: reroute = %d %s %s, want %d", name, code, out, stderr, c.want)
		}
	}
	code, out, stderr = runInProcess(t, "reroute", "--config", cfg, "--scope", "job:"+jobID, "--to", "local-rules", "--reason", "DPO ticket 12")
	if code != exitOK || !strings.Contains(out, "job "+jobID+": blocked for retired-llm, moved to local-rules") {
		t.Fatalf("reroute = %d\n%s\n%s", code, out, stderr)
	}
	if n := count(t, rdb, `SELECT COUNT(*) FROM jobs WHERE state = 'accepted' AND routed_to = 'local-rules'`); n != 1 {
		t.Errorf("rerouted jobs = %d, want 1", n)
	}
	code, out, _ = runInProcess(t, "inspect", "--config", cfg, jobID)
	if code != exitOK || !strings.Contains(out, "by cli: retired-llm -> local-rules under policy standard") || !strings.Contains(out, "reason: DPO ticket 12") {
		t.Errorf("inspect = %d\n%s\nwant the boundary decision", code, out)
	}
	if n := count(t, rdb, `SELECT COUNT(*) FROM audit_log WHERE action = 'job.reroute' AND actor = 'cli'`); n != 1 {
		t.Errorf("job.reroute audit rows = %d, want 1", n)
	}
}
