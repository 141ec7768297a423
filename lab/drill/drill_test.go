package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/boundary"
)

const chaosPGBin = "/usr/lib/postgresql/15/bin"

// TestChaosDrillSmall runs the chaos drill end to end: its own PostgreSQL,
// the built stet binary as one api and two worker processes, three worker
// SIGKILLs and one database restart under load. A killed worker's jobs
// are taken over by a live one within about ten seconds (liveness leases);
// with the load and the drain the test takes about a minute.
func TestChaosDrillSmall(t *testing.T) {
	// Not parallel: each drill runs a PostgreSQL server and three stet
	// processes; two at once on a small machine measure the machine.
	if testing.Short() {
		t.Skip("the chaos drill runs for about a minute; skipped with -short")
	}
	if _, err := os.Stat(filepath.Join(chaosPGBin, "initdb")); err != nil {
		t.Skipf("the chaos drill needs PostgreSQL 15 binaries in %s (apt-get install postgresql-15): %v", chaosPGBin, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	// The default bounds (docs/drills.md): a dead worker's stage job is
	// claimed by a live one within 15 s, its batch within 30 s.
	res, err := Run(ctx, Options{Reports: 150, Kills: 3, Workers: 2, Seed: 42, FaultRate: 0.1,
		PGBin: chaosPGBin, Binary: stetBinary(t), Progress: &progress})
	if err != nil {
		t.Fatalf("Run(seed 42) = %v\nprogress:\n%s", err, progress.String())
	}
	t.Logf("time to resume: %d deaths, %d jobs held; sync %s (claimable %s); batch %s; never resumed %d", res.Resume.Deaths, res.Resume.Jobs, res.Resume.Sync, res.Resume.SyncFreed, res.Resume.Batch, res.Resume.NotResumed)
	if !res.Pass {
		t.Errorf("Run(seed 42) pass = false; failures %q, examples %q\nprogress:\n%s", res.Failures, res.Examples, progress.String())
	}
	if res.Resume.Deaths != res.Kills {
		t.Errorf("drill chaos measured %d deaths for %d kills, want one per kill", res.Resume.Deaths, res.Kills)
	}
	checks := []struct {
		name      string
		got, want int
	}{
		{"lost", res.Lost, 0},
		{"duplicated", res.Duplicated, 0},
		{"extra_calls", res.ExtraCalls, 0},
		{"unaccounted", res.Unaccounted, 0},
		{"given_up", res.GivenUp, 0},
		{"db_restarts", res.DBRestarts, 1},
		{"seed", int(res.Seed), 42},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("drill chaos %s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if res.Kills < 3 {
		t.Errorf("drill chaos kills = %d, want at least 3", res.Kills)
	}
	if res.Acknowledged == 0 || res.Acknowledged != res.Deliveries {
		t.Errorf("drill chaos acknowledged = %d of %d deliveries, want all and more than 0", res.Acknowledged, res.Deliveries)
	}
	if res.AcknowledgedRevisions != res.Revisions || res.Committed+res.Manual != res.Revisions {
		t.Errorf("drill chaos: %d revisions planned, %d acknowledged, %d committed + %d manual; want all equal",
			res.Revisions, res.AcknowledgedRevisions, res.Committed, res.Manual)
	}
	if m := res.Mix; m == nil || m.PartsRevisions == 0 || m.PartsRecords != m.PartsRevisions || m.WithProvenance != m.PartsRecords ||
		m.RerouteRevisions == 0 || m.Rerouted < m.RerouteRevisions || m.Decisions != m.Rerouted || m.PendingCalls != 0 {
		t.Errorf("drill chaos mix = %+v, want every two-part revision with one record with provenance, every reroute revision moved once with its decision, 0 pending calls", m)
	}
	if !strings.Contains(progress.String(), "seed 42") {
		t.Errorf("drill chaos progress does not print the seed:\n%s", progress.String())
	}
}

func TestChaosPlan(t *testing.T) {
	t.Parallel()
	const reports = 1000
	revs, plan := planLoad(7, reports)
	_, again := planLoad(7, reports)
	for i := range plan {
		if plan[i].WebhookID != again[i].WebhookID || !bytes.Equal(plan[i].Rev.Body, again[i].Rev.Body) {
			t.Fatalf("planLoad(7) delivery %d differs between two calls: not reproducible from the seed", i)
		}
	}
	perDoc := map[int]int{}
	bodyOf := map[string][]byte{}
	firsts := map[*docRevision]bool{}
	for _, d := range plan {
		perDoc[d.Rev.Doc]++
		if b, ok := bodyOf[d.WebhookID]; ok && !bytes.Equal(b, d.Rev.Body) {
			t.Errorf("webhook-id %s is reused with a different body: the api would answer 409", d.WebhookID)
		}
		bodyOf[d.WebhookID] = d.Rev.Body
		if d.Kind == "first" || d.Kind == "new_revision" {
			firsts[d.Rev] = true
		}
	}
	if len(perDoc) != reports {
		t.Errorf("planLoad delivers %d reports, want %d", len(perDoc), reports)
	}
	for doc, n := range perDoc {
		if n < 2 || n > 10 {
			t.Errorf("report %d is delivered %d times, want 2 to 10", doc, n)
		}
	}
	two := len(revs) - reports
	if two < reports/10 || two > reports*3/10 {
		t.Errorf("planLoad gives %d of %d reports a second revision, want about a fifth", two, reports)
	}
	markers := map[string]bool{}
	for _, r := range revs {
		if !firsts[r] {
			t.Errorf("revision %s r%d has no first delivery", r.ExternalID, r.Rev)
		}
		m := markerRe.FindStringSubmatch(string(r.Body))
		if m == nil || m[0] != r.Marker || m[1] != strconv.Itoa(1000000 + r.Doc)[1:] || m[2] != strconv.Itoa(r.Rev) {
			t.Errorf("the body of %s r%d carries marker %q, want %q", r.ExternalID, r.Rev, m, r.Marker)
		}
		if markers[r.Marker] {
			t.Errorf("marker %q is used twice", r.Marker)
		}
		markers[r.Marker] = true
	}
}

// TestChaosMarkerSurvivesMinimization: the checker maps provider calls to
// documents by the marker, so minimization must leave it whole.
func TestChaosMarkerSurvivesMinimization(t *testing.T) {
	t.Parallel()
	m, err := boundary.NewMinimizer([]stet.IdentifierClass{stet.IdentEmail, stet.IdentPhone, stet.IdentSSN, stet.IdentMRN,
		stet.IdentAccount, stet.IdentURL, stet.IdentIP, stet.IdentDate}, nil)
	if err != nil {
		t.Fatal(err)
	}
	revs, _ := planLoad(3, 300)
	for _, r := range revs {
		var in struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(r.Body, &in); err != nil {
			t.Fatal(err)
		}
		out, _ := m.Minimize(stet.NewText(in.Text))
		if !strings.Contains(out.Reveal(), r.Marker) {
			t.Errorf("Minimize(text of %s r%d) loses marker %q: %q", r.ExternalID, r.Rev, r.Marker, out.Reveal())
		}
	}
}

func TestChaosSchedule(t *testing.T) {
	t.Parallel()
	for _, kills := range []int{0, 3, 10} {
		faults, window := schedule(11, kills, 2)
		restarts, n := 0, 0
		var at time.Duration
		for i, f := range faults {
			if i > 0 && f.At < faults[i-1].At {
				t.Errorf("schedule(kills %d): fault %d at %s comes before fault %d at %s", kills, i, f.At, i-1, faults[i-1].At)
			}
			switch f.Kind {
			case "kill":
				n++
				if f.Worker < 0 || f.Worker >= 2 {
					t.Errorf("schedule(kills %d) kills worker %d of 2", kills, f.Worker)
				}
			case "db_restart":
				restarts++
				at = f.At
			default:
				t.Errorf("schedule(kills %d) plans fault %q", kills, f.Kind)
			}
		}
		if n != kills || restarts != 1 {
			t.Errorf("schedule(kills %d) = %d kills and %d restarts, want %d and 1", kills, n, restarts, kills)
		}
		if at < window*35/100 || at > window*65/100 {
			t.Errorf("schedule(kills %d) restarts the database at %s of a %s window, want mid-run", kills, at, window)
		}
	}
}

// TestEvaluateChaos checks that the checker sees each violation it exists
// to find, and passes a clean ledger.
func TestEvaluateChaos(t *testing.T) {
	t.Parallel()
	const artifactAt = int64(1_700_000_000_000_000)
	before := time.UnixMicro(artifactAt - 1000)
	after := time.UnixMicro(artifactAt + 1)
	// Reports 0 (one revision) and 1 (two revisions), each delivered twice
	// per revision; the ledger as a correct run leaves it.
	fixture := func() ([]*delivery, *snapshot, []fakeCall) {
		r := func(doc, rev int) *docRevision {
			return &docRevision{Doc: doc, Rev: rev, ExternalID: externalID(doc), Marker: marker(doc, rev)}
		}
		a, b1, b2 := r(0, 1), r(1, 1), r(1, 2)
		ack := func(rv *docRevision, status int, job string) *delivery {
			return &delivery{Rev: rv, acked: true, status: status, jobID: job}
		}
		plan := []*delivery{
			ack(a, 202, "job_a"), ack(a, 200, "job_a"),
			ack(b1, 202, "job_b1"), ack(b1, 200, "job_b1"),
			ack(b2, 202, "job_b2"), ack(b2, 200, "job_b2"),
		}
		job := func(id, report string, doc, rev int) snapJob {
			return snapJob{ID: id, ReportID: report, ExternalID: externalID(doc), Revision: int64(rev), ExtractionVersion: "moderation@1", State: "committed"}
		}
		snap := &snapshot{
			Jobs:      []snapJob{job("job_a", "rep_a", 0, 1), job("job_b1", "rep_b", 1, 1), job("job_b2", "rep_b", 1, 2)},
			Artifacts: []snapArtifact{{"job_a", artifactAt}, {"job_b1", artifactAt}, {"job_b2", artifactAt}},
			Records: []snapRecord{
				{JobID: "job_a", ReportID: "rep_a", Kind: "extracted", Revision: 1, Authoritative: true},
				{JobID: "job_b1", ReportID: "rep_b", Kind: "extracted", Revision: 1},
				{JobID: "job_b2", ReportID: "rep_b", Kind: "extracted", Revision: 2, Authoritative: true},
			},
			Attempts: map[string]int{"job_a": 2, "job_b1": 1, "job_b2": 1},
			Stage:    map[string]int{"completed": 6},
		}
		calls := []fakeCall{
			{At: before, Doc: 0, Rev: 1, Status: 503},
			{At: before, Doc: 0, Rev: 1, Status: 200},
			{At: before, Doc: 1, Rev: 1, Status: 200},
			{At: before, Doc: 1, Rev: 2, Status: 200},
		}
		return plan, snap, calls
	}
	tests := []struct {
		name   string
		mutate func(plan []*delivery, snap *snapshot, calls *[]fakeCall)
		field  func(*Result) int
		want   int
	}{
		{"clean", func([]*delivery, *snapshot, *[]fakeCall) {}, func(r *Result) int { return len(r.Failures) }, 0},
		{"lost: no review record", func(_ []*delivery, s *snapshot, _ *[]fakeCall) {
			s.Records = s.Records[1:]
		}, func(r *Result) int { return r.Lost }, 1},
		{"lost: no job at all", func(_ []*delivery, s *snapshot, _ *[]fakeCall) {
			s.Jobs, s.Records, s.Artifacts = s.Jobs[1:], s.Records[1:], s.Artifacts[1:]
		}, func(r *Result) int { return r.Lost }, 1},
		{"two records for one job", func(_ []*delivery, s *snapshot, _ *[]fakeCall) {
			s.Records = append(s.Records, snapRecord{JobID: "job_a", ReportID: "rep_a", Kind: "extracted", Revision: 1})
		}, func(r *Result) int { return r.DuplicatedDetail.RecordsPerJob }, 1},
		{"two artifacts for one job", func(_ []*delivery, s *snapshot, _ *[]fakeCall) {
			s.Artifacts = append(s.Artifacts, snapArtifact{"job_b1", artifactAt + 5})
		}, func(r *Result) int { return r.Duplicated }, 1},
		{"two authoritative records for one report", func(_ []*delivery, s *snapshot, _ *[]fakeCall) {
			s.Records[1].Authoritative = true
		}, func(r *Result) int { return r.DuplicatedDetail.AuthoritativePerReport }, 1},
		{"two jobs for one revision", func(_ []*delivery, s *snapshot, _ *[]fakeCall) {
			j := s.Jobs[0]
			j.ID = "job_a2"
			s.Jobs = append(s.Jobs, j)
		}, func(r *Result) int { return r.DuplicatedDetail.JobsPerRevision }, 1},
		{"a revision answered 202 twice", func(p []*delivery, _ *snapshot, _ *[]fakeCall) {
			p[1].status = http.StatusAccepted
		}, func(r *Result) int { return r.DuplicatedDetail.Accepted202Twice }, 1},
		{"a call after the artifact", func(_ []*delivery, _ *snapshot, c *[]fakeCall) {
			*c = append(*c, fakeCall{At: after, Doc: 1, Rev: 2, Status: 200})
		}, func(r *Result) int { return r.ExtraCalls }, 1},
		{"a call cut before the artifact is not extra", func(_ []*delivery, _ *snapshot, c *[]fakeCall) {
			*c = append(*c, fakeCall{At: before, Doc: 1, Rev: 2})
		}, func(r *Result) int { return len(r.Failures) }, 0},
		{"a call at the artifact's microsecond is not extra", func(_ []*delivery, _ *snapshot, c *[]fakeCall) {
			*c = append(*c, fakeCall{At: time.UnixMicro(artifactAt), Doc: 0, Rev: 1, Status: 200})
		}, func(r *Result) int { return r.ExtraCalls }, 0},
		{"a call without a marker", func(_ []*delivery, _ *snapshot, c *[]fakeCall) {
			*c = append(*c, fakeCall{At: before, Doc: -1})
		}, func(r *Result) int { return r.UnmappedCalls }, 1},
		{"a body cut mid-send is no unmapped call", func(_ []*delivery, _ *snapshot, c *[]fakeCall) {
			*c = append(*c, fakeCall{At: before, Doc: -1, Incomplete: true, Bytes: 100, Status: 400})
		}, func(r *Result) int { return r.UnmappedCalls + len(r.Failures) }, 0},
		{"a body cut mid-send is counted as cut", func(_ []*delivery, _ *snapshot, c *[]fakeCall) {
			*c = append(*c, fakeCall{At: before, Doc: -1, Incomplete: true, Bytes: 100, Status: 400}, fakeCall{At: before, Doc: -1, Incomplete: true})
		}, func(r *Result) int { return r.UnmappedCut - 2 }, 0},
		{"an answer names another job", func(p []*delivery, _ *snapshot, _ *[]fakeCall) {
			p[3].jobID = "job_other"
		}, func(r *Result) int { return r.Unaccounted }, 1},
		{"an acknowledged job not terminal", func(_ []*delivery, s *snapshot, _ *[]fakeCall) {
			s.Jobs[2].State = "extracting"
		}, func(r *Result) int { return r.Unaccounted + r.NotTerminal }, 2},
		{"authoritative on an older revision", func(_ []*delivery, s *snapshot, _ *[]fakeCall) {
			s.Records[1].Authoritative, s.Records[2].Authoritative = true, false
		}, func(r *Result) int { return r.MisplacedAuthoritative }, 1},
		{"a job the drill never delivered", func(_ []*delivery, s *snapshot, _ *[]fakeCall) {
			s.Jobs = append(s.Jobs, snapJob{ID: "job_x", ReportID: "rep_x", ExternalID: "other", Revision: 1, State: "committed"})
		}, func(r *Result) int { return r.Phantom }, 1},
		{"a delivery never acknowledged", func(p []*delivery, _ *snapshot, _ *[]fakeCall) {
			p[5].acked, p[5].givenUp = false, true
		}, func(r *Result) int { return r.GivenUp }, 1},
		{"a stage job River still holds", func(_ []*delivery, s *snapshot, _ *[]fakeCall) {
			s.Stage["retryable"] = 1
		}, func(r *Result) int { return r.PendingStageJobs }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			plan, snap, calls := fixture()
			tt.mutate(plan, snap, &calls)
			res := &Result{}
			evaluate(res, plan, snap, calls)
			res.judge()
			if got := tt.field(res); got != tt.want {
				t.Errorf("evaluate(%s) = %d, want %d (failures %q)", tt.name, got, tt.want, res.Failures)
			}
			if wantPass := tt.want == 0; res.Pass != wantPass {
				t.Errorf("evaluate(%s) pass = %v, want %v (failures %q)", tt.name, res.Pass, wantPass, res.Failures)
			}
		})
	}
}

// TestJudgeResume: the drill fails when a dead worker's job waited past the
// bound, or was never taken up, and passes at the bound.
func TestJudgeResume(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		r    ResumeResult
		pass bool
	}{
		{"within", ResumeResult{Jobs: 3, Sync: Quantiles{N: 3, P50: 2, P95: 9, Max: 15}, BoundSeconds: 15, BatchBoundSeconds: 30}, true},
		{"sync past the bound", ResumeResult{Jobs: 3, Sync: Quantiles{N: 3, P50: 2, P95: 9, Max: 15.1}, BoundSeconds: 15, BatchBoundSeconds: 30}, false},
		{"batch past the bound", ResumeResult{Jobs: 1, Batch: Quantiles{N: 1, P50: 31, P95: 31, Max: 31}, BoundSeconds: 15, BatchBoundSeconds: 30}, false},
		{"never resumed", ResumeResult{Jobs: 1, NotResumed: 1, BoundSeconds: 15, BatchBoundSeconds: 30}, false},
	}
	for _, tt := range tests {
		r := &Result{Acknowledged: 1, Resume: tt.r}
		r.judge()
		if r.Pass != tt.pass {
			t.Errorf("judge(%s) pass = %v, want %v (failures %q)", tt.name, r.Pass, tt.pass, r.Failures)
		}
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	var s []float64
	for i := 1; i <= 20; i++ {
		s = append(s, float64(i))
	}
	if got, want := summarize(s), (Quantiles{N: 20, P50: 10, P95: 19, Max: 20}); got != want {
		t.Errorf("summarize(1..20) = %+v, want %+v", got, want)
	}
	if got := summarize(nil); got != (Quantiles{}) {
		t.Errorf("summarize(nil) = %+v, want zero", got)
	}
}

func TestClientStart(t *testing.T) {
	t.Parallel()
	got, ok := clientStart("my_host_name_2024_03_07T04_39_12_123456")
	want := time.Date(2024, 3, 7, 4, 39, 12, 123456000, time.UTC)
	if !ok || !got.Equal(want) {
		t.Errorf("clientStart = %v, %v; want %v, true", got, ok, want)
	}
	if _, ok := clientStart("short"); ok {
		t.Errorf("clientStart(short) ok = true, want false")
	}
	// A worker's River client ID is its process ID.
	at := time.Date(2026, 12, 1, 23, 50, 1, 234000000, time.UTC)
	if got, ok := clientStart(stet.NewID("proc", at)); !ok || !got.Equal(at) {
		t.Errorf("clientStart(process ID of %v) = %v, %v; want it back, true", at, got, ok)
	}
}

// TestChaosDrillBatchFaults runs the batch-fault variant in its short form:
// a third of the reports go to a batch-mode source; every worker is
// restarted armed with after_batch_submit (it dies after the provider
// accepted its first batch create, before the batch ID is saved), later
// with mid_apply; one random SIGKILL besides. Nothing may be lost or
// duplicated, no stet batch may be created twice at the provider, and none
// may be left unknown: a kill that lands between a submission recorded in
// flight and its create leaves one there, and the drill's operator decides
// it (cmd/stet's TestBatchCrashBeforeCreate makes that happen every time).
func TestChaosDrillBatchFaults(t *testing.T) {
	// Not parallel: each drill runs a PostgreSQL server and three stet
	// processes; two at once on a small machine measure the machine.
	if testing.Short() {
		t.Skip("the chaos drill runs for minutes; skipped with -short")
	}
	if _, err := os.Stat(filepath.Join(chaosPGBin, "initdb")); err != nil {
		t.Skipf("the chaos drill needs PostgreSQL 15 binaries in %s (apt-get install postgresql-15): %v", chaosPGBin, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	res, err := Run(ctx, Options{Reports: 90, Kills: 2, Workers: 2, Seed: 16, FaultRate: 0.05, BatchFaults: true,
		DrainLimit: 2 * time.Minute, PGBin: chaosPGBin, Binary: stetBinary(t), Progress: &progress})
	if err != nil {
		t.Fatalf("Run(seed 16, batch faults) = %v\nprogress:\n%s", err, progress.String())
	}
	b := res.Batch
	t.Logf("time to resume: %d deaths, %d jobs held; sync %s (claimable %s); batch %s; never resumed %d", res.Resume.Deaths, res.Resume.Jobs, res.Resume.Sync, res.Resume.SyncFreed, res.Resume.Batch, res.Resume.NotResumed)
	t.Logf("batches: armed %v, crashed %v, ledger %d %v, provider creates %d (calls %d), distinct %d, created twice %d",
		b.Armed, b.Crashes, b.Ledger, b.LedgerByState, b.Creates, b.CreateCalls, b.Distinct, b.CreatedTwice)
	// Every check of the drill holds, the time to resume with its default
	// bounds included.
	if !res.Pass {
		t.Errorf("Run(seed 16, batch faults) pass = false; failures %q, examples %q %q\nprogress:\n%s", res.Failures, res.Examples, res.Resume.Examples, progress.String())
	}
	checks := []struct {
		name      string
		got, want int
	}{
		{"lost", res.Lost, 0},
		{"duplicated", res.Duplicated, 0},
		{"unaccounted", res.Unaccounted, 0},
		{"attempts left started", res.AttemptsStarted, 0},
		{"batch created_twice", b.CreatedTwice, 0},
		{"batch unknown_to_ledger", b.Unknown, 0},
		{"batch jobs not terminal", b.Jobs - b.JobsCommitted - b.JobsManual, 0},
		{"batches unfinished", b.Unfinished, 0},
		{"armed after_batch_submit", b.Armed["after_batch_submit"], 2},
		{"armed mid_apply", b.Armed["mid_apply"], 2},
		{"batches left unknown", b.LedgerByState["unknown"], 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("drill chaos --batch-faults %s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if b.Jobs == 0 || b.Crashes["after_batch_submit"] == 0 || b.Crashes["mid_apply"] == 0 {
		t.Errorf("drill chaos --batch-faults: %d batch jobs, crashes %v; want batch jobs and both crash points reached", b.Jobs, b.Crashes)
	}
	if b.Creates != b.Distinct {
		t.Errorf("drill chaos --batch-faults: the provider created %d batches for %d stet batches, want one each", b.Creates, b.Distinct)
	}
}

// TestProviderCutBody: a request whose sender dies mid-body (here: a raw
// connection closed after part of the declared body) is logged as an
// incomplete body, not as a whole request without a marker; a whole
// request without a marker is logged as complete.
func TestProviderCutBody(t *testing.T) {
	t.Parallel()
	p, err := newProvider(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	addr := p.ln.Addr().String()
	send := func(raw string) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte(raw))
		_ = c.Close()
	}
	body := `{"model":"gpt-drill","messages":[{"role":"user","content":"Post `
	send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + apiKey +
		"\r\nContent-Type: application/json\r\nContent-Length: 2000\r\n\r\n" + body)
	whole := `{"model":"gpt-drill","messages":[{"role":"user","content":"no marker here"}]}`
	req, _ := http.NewRequest(http.MethodPost, p.url()+"/chat/completions", strings.NewReader(whole))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(p.calls()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	calls := p.calls()
	if len(calls) != 2 {
		t.Fatalf("provider logged %d calls, want 2", len(calls))
	}
	var cut, complete int
	for _, c := range calls {
		if c.Doc != -1 {
			t.Errorf("call %+v maps to document %d, want none", c, c.Doc)
		}
		if c.Incomplete {
			cut++
			if c.Bytes != len(body) {
				t.Errorf("cut call read %d bytes, want %d", c.Bytes, len(body))
			}
		} else {
			complete++
		}
	}
	if cut != 1 || complete != 1 {
		t.Errorf("provider logged %d cut and %d complete calls, want 1 and 1", cut, complete)
	}
	res := &Result{}
	evaluate(res, nil, &snapshot{Attempts: map[string]int{}, Stage: map[string]int{}}, calls)
	if res.UnmappedCut != 1 || res.UnmappedCalls != 1 {
		t.Errorf("evaluate: unmapped cut %d, unmapped calls %d; want 1 and 1", res.UnmappedCut, res.UnmappedCalls)
	}
}

// An attempt still started after the drain fails the drill; abandoned ones
// are counted and do not.
func TestJudgeAttemptsLeftStarted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status map[string]int
		fail   bool
	}{
		{map[string]int{"succeeded": 3, "abandoned": 1}, false},
		{map[string]int{"succeeded": 3, "started": 1}, true},
	} {
		res := &Result{}
		evaluate(res, nil, &snapshot{Attempts: map[string]int{}, AttemptStatus: tc.status, Stage: map[string]int{}}, nil)
		res.judge()
		failed := slices.ContainsFunc(res.Failures, func(f string) bool { return strings.Contains(f, "attempts left started") })
		if failed != tc.fail || res.AttemptsByStatus["abandoned"] != tc.status["abandoned"] {
			t.Errorf("statuses %v: failures %q, by status %v; want failing %v", tc.status, res.Failures, res.AttemptsByStatus, tc.fail)
		}
	}
}

// A dead process's River client is read from its own log, so two processes
// started close together are never taken for one another.
func TestLoggedClientID(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "worker-1.1.log")
	log := `{"time":"2026-12-01T23:00:00Z","level":"INFO","msg":"stet serving","addr":"127.0.0.1:1","role":"worker"}
{"time":"2026-12-01T23:00:00Z","level":"INFO","msg":"River client started","component":"river","client_id":"proc_01M8T0158SYSERKQNC04RBEV14"}
`
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := loggedClientID(path); got != "proc_01M8T0158SYSERKQNC04RBEV14" {
		t.Errorf("loggedClientID = %q, want the logged client_id", got)
	}
	if got := loggedClientID(filepath.Join(t.TempDir(), "none.log")); got != "" {
		t.Errorf("loggedClientID(missing file) = %q, want empty", got)
	}
}
