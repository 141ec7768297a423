package main

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// SIGTERM while a stage is calling the provider: serve stops taking work,
// lets the running stage finish (its artifact is saved, and committed at
// once or left to the queued record stage), and exits 0 with no job held.
// The job ends committed with one provider call.
func TestGracefulShutdownFinishesInFlightStage(t *testing.T) {
	t.Parallel()
	fake := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
	t.Cleanup(fake.Close)
	fake.Enqueue(openaifake.Fault{Kind: openaifake.Delay, Delay: 1500 * time.Millisecond})
	cfg := writeConfig(t, t.TempDir(), fake.URL())
	p := startStet(t, cfg, nil)
	status, out, err := postReport(p.base, "msg_graceful", sample(t, "report-001.json"))
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("postReport = %d, %v, want 202", status, err)
	}
	waitFor(t, 30*time.Second, "the provider call", p, func() bool { return fake.Calls() == 1 })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	st := p.waitExit(t, 45*time.Second)
	if !st.Exited() || st.ExitCode() != 0 {
		t.Fatalf("stet serve after SIGTERM ended with %v, want exit 0\nstderr tail:\n%s", st, p.tail())
	}
	db := openLedgerRO(t, cfg.DBPath)
	if n := count(t, db, `SELECT COUNT(*) FROM jobs WHERE public_id = stet_ulid($1) AND state IN ('extracted', 'committed')`, out.JobID); n != 1 {
		t.Errorf("jobs past extraction after a graceful stop = %d, want 1 (the in-flight stage finishes)\nstderr tail:\n%s", n, p.tail())
	}
	if n := count(t, db, `SELECT COUNT(*) FROM jobs WHERE state = 'extracting'`); n != 0 {
		t.Errorf("jobs left held after a graceful stop = %d, want 0", n)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM river_job WHERE state = 'running'`); n != 0 {
		t.Errorf("River jobs left running after a graceful stop = %d, want 0", n)
	}
	next := startStet(t, cfg, nil)
	waitFor(t, 30*time.Second, "the commit after restart", next, func() bool {
		return count(t, db, `SELECT COUNT(*) FROM jobs WHERE public_id = stet_ulid($1) AND state = 'committed'`, out.JobID) == 1
	})
	if n := fake.Calls(); n != 1 {
		t.Errorf("provider calls = %d, want 1", n)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM review_records`); n != 1 {
		t.Errorf("review records = %d, want 1", n)
	}
}
