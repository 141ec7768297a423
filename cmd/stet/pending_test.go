package main

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// A processor whose retention answer is pending is never sent text: the
// real binary accepts the report, blocks its job with the reason
// pending:retention and calls the provider 0 times; discovery shows the
// pending answer. A policy allowing subprocessors the processor does not
// declare is refused at start with exit 2, naming the key.
func TestPendingDeclarationBlocks(t *testing.T) {
	t.Parallel()
	fake := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
	t.Cleanup(fake.Close)
	cfg := writeConfig(t, t.TempDir(), fake.URL())
	setConfig := func(old, new string) {
		t.Helper()
		b, err := os.ReadFile(cfg.Path)
		if err != nil || !strings.Contains(string(b), old) {
			t.Fatalf("config lacks %q (%v)", old, err)
		}
		if err := os.WriteFile(cfg.Path, []byte(strings.Replace(string(b), old, new, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	setConfig("    retention: 30d\n    timeout: 30s\n", "    retention: pending\n    subprocessors: [Microsoft]\n    timeout: 30s\n")

	setConfig("    processors: [openai-fake]\n", "    processors: [openai-fake]\n    allowed_subprocessors: [Google]\n")
	if code, _, stderr := runInProcess(t, "migrate", "--config", cfg.Path); code != exitUsage || !strings.Contains(stderr, "policies[0].allowed_subprocessors") {
		t.Errorf("a config allowing other subprocessors = %d %s, want %d naming policies[0].allowed_subprocessors", code, stderr, exitUsage)
	}
	setConfig("    allowed_subprocessors: [Google]\n", "    allowed_subprocessors: [Microsoft]\n")

	p := startStet(t, cfg, nil)
	status, in, err := postReport(p.base, "msg_pending", []byte(`{"external_id":"pending-1","revision":1,"text":"some text"}`))
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("postReport = %d, %v, want 202", status, err)
	}
	db := openLedgerRO(t, cfg.DBPath)
	waitFor(t, 30*time.Second, "the job blocked", p, func() bool {
		return count(t, db, `SELECT COUNT(*) FROM jobs WHERE state = 'blocked'`) == 1
	})
	if n := fake.Calls(); n != 0 {
		t.Errorf("provider calls = %d, want 0", n)
	}
	get := func(path string, out any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, p.base+path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(out) != nil {
			t.Fatalf("GET %s = %d", path, resp.StatusCode)
		}
	}
	var job api.JobView
	get("/v1/jobs/"+in.JobID, &job)
	if job.State != "blocked" || job.FailureClass != "boundary" || job.BlockedReason == nil || *job.BlockedReason != "openai-fake:pending:retention" {
		t.Errorf("job = %s %s %v, want blocked, boundary, openai-fake:pending:retention", job.State, job.FailureClass, job.BlockedReason)
	}
	var disc api.Discovery
	get("/v1/discovery", &disc)
	if len(disc.Sources) != 1 || len(disc.Sources[0].Processors) != 1 || !slices.Equal(disc.Sources[0].Processors[0].Pending, []string{"retention"}) {
		t.Errorf("discovery = %+v, want the processor with pending [retention]", disc.Sources)
	}
}
