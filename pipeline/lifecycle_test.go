package pipeline_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/lab/drill/recovery"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/ledger/ledgertest"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// holdingFake answers every chat call only once release is closed, and
// reports each call that started on started.
type holdingFake struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *holdingFake) Release() { h.once.Do(func() { close(h.release) }) }

// Deleting twice answers 200 with the same deletion; unknown and another
// tenant's reports are 404; a reader may not delete.
func TestDeleteBadInput(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	r := e.Deliver(stettest.SourceReports, "msg_bad", stettest.Report{ExternalID: "report-bad", Revision: 1, Text: "You are all idiots."})
	e.WaitJob(r.JobID, stet.JobCommitted)
	other := e.Deliver(stettest.SourceOther, "msg_other", stettest.Report{ExternalID: "report-other", Revision: 1, Text: "Hello."})
	e.WaitJob(other.JobID, stet.JobCommitted)

	path := "/v1/sources/" + stettest.SourceReports + "/reports/report-bad"
	var first, again, byID api.DeletionAccepted
	if st, b := e.Do(http.MethodDelete, path, stettest.ReaderToken, nil, nil); st != http.StatusForbidden {
		t.Errorf("DELETE as reader = %d %s, want 403", st, b)
	}
	if st, b := e.Do(http.MethodDelete, path, stettest.OperatorToken, nil, &first); st != http.StatusAccepted {
		t.Fatalf("DELETE = %d %s, want 202", st, b)
	}
	if st, b := e.Do(http.MethodDelete, path, stettest.OperatorToken, nil, &again); st != http.StatusOK || again.DeletionID != first.DeletionID {
		t.Errorf("DELETE again = %d %s, want 200 with deletion %s", st, b, first.DeletionID)
	}
	if st, b := e.Do(http.MethodDelete, "/v1/reports/"+r.ReportID, stettest.OperatorToken, nil, &byID); st != http.StatusOK || byID.DeletionID != first.DeletionID {
		t.Errorf("DELETE by report ID = %d %s, want 200 with deletion %s", st, b, first.DeletionID)
	}
	for name, tc := range map[string]struct{ path, token string }{
		"unknown external ID":     {"/v1/sources/" + stettest.SourceReports + "/reports/nope", stettest.OperatorToken},
		"unknown report ID":       {"/v1/reports/rep_nope", stettest.OperatorToken},
		"another tenant's ID":     {"/v1/reports/" + other.ReportID, stettest.OperatorToken},
		"another tenant's source": {"/v1/sources/" + stettest.SourceOther + "/reports/report-other", stettest.OperatorToken},
		"foreign deletion read":   {"", stettest.OtherToken},
	} {
		if tc.path == "" {
			if st, _ := e.Do(http.MethodGet, "/v1/deletions/"+first.DeletionID, tc.token, nil, nil); st != http.StatusNotFound {
				t.Errorf("%s: GET deletion = %d, want 404", name, st)
			}
			continue
		}
		if st, b := e.Do(http.MethodDelete, tc.path, tc.token, nil, nil); st != http.StatusNotFound {
			t.Errorf("%s: DELETE = %d %s, want 404", name, st, b)
		}
	}
	if n := e.Count("deletions", ""); n != 1 {
		t.Errorf("deletions = %d, want 1", n)
	}
	if n := e.Count("jobs", "state = 'committed' AND report_id = (SELECT id FROM reports WHERE public_id = stet_ulid($1))", other.ReportID); n != 1 {
		t.Errorf("the other tenant's job was touched")
	}
	d := recovery.WaitDeletion(t, e, first.DeletionID, "unresolved", "done")
	if n := e.Count("audit_log", "action = 'report.delete' AND object_id = $1", r.ReportID); n != 1 {
		t.Errorf("audit entries for the deletion = %d, want 1", n)
	}
	if n := e.Count("audit_log", "action = $1 AND object_id = $2", "deletion."+d.State, first.DeletionID); n != 1 {
		t.Errorf("audit entries for the deletion's end = %d, want 1", n)
	}
}

// A task that fails on the database (an injected error on every artifact
// delete) keeps the deletion pending — never done — and River retries it;
// once the database accepts the delete again, the deletion completes.
func TestDeletionCompletesAfterDatabaseRecovers(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{})
	r := e.Deliver(stettest.SourceReports, "msg_rec", stettest.Report{ExternalID: "report-rec", Revision: 1, Text: "Cinnamon cures diabetes."})
	e.WaitJob(r.JobID, stet.JobCommitted)
	db := e.DB.Writer()
	if err := ledgertest.FailWrites(context.Background(), e.DB, "DELETE", "artifacts", "injected database failure"); err != nil {
		t.Fatal(err)
	}
	var acc api.DeletionAccepted
	if st, b := e.Do(http.MethodDelete, "/v1/reports/"+r.ReportID, stettest.OperatorToken, nil, &acc); st != http.StatusAccepted {
		t.Fatalf("DELETE = %d %s", st, b)
	}
	// A retry is River's scheduler making the failed job available again,
	// then a fetch: under a loaded CI machine that took over 20 s once.
	e.WaitForWithin("the artifacts task to fail and be retried", time.Minute, func() bool {
		var n int
		_ = db.QueryRow(`SELECT COUNT(*) FROM river_job WHERE kind = 'stet_delete' AND attempt >= 2`).Scan(&n)
		return n > 0
	})
	d, _ := recovery.GetDeletion(t, e, acc.DeletionID)
	tasks := recovery.TaskStates(d)
	if d.State != "pending" || tasks["artifacts"] != "pending" || tasks["revision_text"] != "done" {
		t.Fatalf("during the failure: state %s, tasks %v; want pending, artifacts pending, revision_text done", d.State, tasks)
	}
	if _, err := db.Exec(`DELETE FROM drill_fault`); err != nil {
		t.Fatal(err)
	}
	d = recovery.WaitDeletion(t, e, acc.DeletionID, "unresolved", "done")
	tasks = recovery.TaskStates(d)
	for _, c := range ledger.LocalCopies {
		if tasks[c] != "done" {
			t.Errorf("after recovery: task %s = %s, want done", c, tasks[c])
		}
	}
	if n := e.Count("artifacts", ""); n != 0 {
		t.Errorf("artifacts = %d, want 0", n)
	}
}

// A job that is not terminal keeps its text past retention; artifacts,
// decided records (records retention), receipts and tombstones follow
// their own clocks; after the replay horizon the identity is new again.
func TestSweepArtifactsRecordsReceiptsTombstones(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(time.Now())
	e := stettest.New(t, stettest.Options{Clock: clock, EditPolicy: func(p *stet.Policy) {
		p.ArtifactRetention, p.RecordsRetention, p.ReplayHorizon = time.Hour, 2*time.Hour, 24*time.Hour
	}})
	ctx := context.Background()
	r := e.Deliver(stettest.SourceReports, "msg_sw", stettest.Report{ExternalID: "report-sw", Revision: 1, Text: "Vaccines cause autism."})
	e.WaitJob(r.JobID, stet.JobCommitted)
	keep := stettest.Report{ExternalID: "report-keep", Revision: 1, Text: "Hello."}
	kept := e.Deliver(stettest.SourceReports, "msg_keep", keep)
	e.WaitJob(kept.JobID, stet.JobCommitted)
	rec := e.Record(r.JobID)
	if st, b := e.Do(http.MethodPost, "/v1/review/"+rec.ID+"/decision", stettest.ReviewerToken, map[string]any{"decision": "approve", "note": "checked"}, nil); st != http.StatusOK {
		t.Fatalf("decide = %d %s", st, b)
	}
	clock.Advance(90 * time.Minute)
	n, err := e.Pipeline.Governance().Sweep(ctx)
	if err != nil || n[ledger.PurgeArtifacts] != 2 || n[ledger.PurgeRecords] != 0 {
		t.Fatalf("Sweep at 90m = %v, %v; want 2 artifacts, 0 records (only decided records go)", n, err)
	}
	var j api.JobView
	e.Do(http.MethodGet, "/v1/jobs/"+r.JobID, stettest.ReaderToken, nil, &j)
	if j.Artifact == nil || j.Artifact.OutputPurgedAt == "" || j.Artifact.RawPurgedAt == "" {
		t.Errorf("artifact view = %+v, want raw_purged_at and output_purged_at", j.Artifact)
	}
	if c := e.Count("artifacts", "raw IS NOT NULL OR output IS NOT NULL"); c != 0 {
		t.Errorf("artifacts with content = %d, want 0", c)
	}
	clock.Advance(time.Hour)
	if n, err = e.Pipeline.Governance().Sweep(ctx); err != nil || n[ledger.PurgeRecords] != 1 {
		t.Fatalf("Sweep at 150m = %v, %v; want 1 record", n, err)
	}
	rec = e.Record(r.JobID)
	if string(rec.Classification) != "null" || rec.Note != "" || rec.ClassificationPurgedAt == "" || rec.NotePurgedAt == "" {
		t.Errorf("record = %+v, want classification and note purged and stamped", rec)
	}

	// Delete, then pass the replay horizon: receipts and the tombstone go,
	// and the identity is new again.
	var acc api.DeletionAccepted
	if st, b := e.Do(http.MethodDelete, "/v1/reports/"+r.ReportID, stettest.OperatorToken, nil, &acc); st != http.StatusAccepted {
		t.Fatalf("DELETE = %d %s", st, b)
	}
	if c := e.Count("tombstones", ""); c != 1 {
		t.Fatalf("tombstones = %d, want 1", c)
	}
	var hash string
	if err := e.DB.Writer().QueryRow(`SELECT identity_hash FROM tombstones`).Scan(&hash); err != nil || strings.Contains(hash, "report-sw") {
		t.Errorf("tombstone key = %q, %v; want a hash", hash, err)
	}
	if again := e.Deliver(stettest.SourceReports, "msg_sw2", stettest.Report{ExternalID: "report-sw", Revision: 1, Text: "Vaccines cause autism."}); again.Status != http.StatusGone {
		t.Fatalf("within the horizon = %d, want 410", again.Status)
	}
	clock.Advance(25 * time.Hour)
	if n, err = e.Pipeline.Governance().Sweep(ctx); err != nil || n[ledger.PurgeTombstones] != 1 || n[ledger.PurgeReceipts] < 1 || e.Count("deliveries", "") != 0 {
		t.Fatalf("Sweep past the horizon = %v, %v; want the tombstone and report-keep's receipt removed", n, err)
	}
	// Without its receipt, a replay is judged by identity, revision and content.
	if again := e.Deliver(stettest.SourceReports, "msg_keep", keep); again.Status != http.StatusOK || again.JobID != kept.JobID {
		t.Errorf("replay after the receipt's purge = %d %s, want 200 duplicate of %s", again.Status, again.Body, kept.JobID)
	}
	fresh := e.Deliver(stettest.SourceReports, "msg_sw3", stettest.Report{ExternalID: "report-sw", Revision: 1, Text: "Vaccines cause autism."})
	if fresh.Status != http.StatusAccepted || fresh.ReportID == r.ReportID {
		t.Fatalf("past the horizon = %d %s, want 202 and a new report", fresh.Status, fresh.Body)
	}
}

// A report deleted while its call is held, whose answer is then invalid:
// no repair call goes out for the cancelled job, and the attempt is counted
// and discarded.
func TestDeleteDuringCallNoRepair(t *testing.T) {
	t.Parallel()
	h := &holdingFake{started: make(chan struct{}, 16), release: make(chan struct{})}
	e := stettest.New(t, stettest.Options{FakeOptions: openaifake.Options{Respond: func(openaifake.Request) string {
		h.started <- struct{}{}
		<-h.release
		return "not json"
	}}})
	defer h.Release()
	r := e.Deliver(stettest.SourceReports, "msg_rep", stettest.Report{ExternalID: "report-rep", Revision: 1, Text: "Cinnamon cures diabetes."})
	select {
	case <-h.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the fake never received the call")
	}
	if st, b := e.Do(http.MethodDelete, "/v1/reports/"+r.ReportID, stettest.OperatorToken, nil, nil); st != http.StatusAccepted {
		t.Fatalf("DELETE = %d %s", st, b)
	}
	h.Release()
	e.WaitFor("the invalid answer to be discarded", func() bool {
		return e.Count("attempts", "job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1)) AND discarded_at IS NOT NULL", r.JobID) == 1
	})
	e.WaitFor("the extract stage to end", func() bool {
		return e.Count("river_job", "kind = 'stet_extract' AND state = 'completed'") == 1
	})
	if n := e.Fake.Calls(); n != 1 {
		t.Errorf("provider calls = %d, want 1 (no repair for a cancelled job)", n)
	}
	if n := e.Count("attempts", "job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))", r.JobID); n != 1 {
		t.Errorf("attempts = %d, want 1", n)
	}
}

// fileDeleter is a test double of what a batch adapter adds for deletion:
// DeleteFile calls the OpenAI fake's DELETE /v1/files/{id}; OpenAI has no
// batch delete, so DeleteBatch answers unsupported.
type fileDeleter struct {
	stet.BatchProcessor
	baseURL string
}

func (d *fileDeleter) DeleteFile(ctx context.Context, id string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, d.baseURL+"/files/"+id, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer sk-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return &stet.ProcessorError{Class: stet.FailureTransient, Err: err}
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotFound {
		return nil // deleted, or already gone
	}
	return &stet.ProcessorError{Class: stet.FailureTransient, StatusCode: resp.StatusCode}
}

func (d *fileDeleter) DeleteBatch(context.Context, string) error {
	return &stet.ProcessorError{Class: stet.FailureUnsupported}
}

var _ stet.CopyDeleter = (*fileDeleter)(nil)

// Through the stet.CopyDeleter seam, the provider's batch files are deleted
// (the fake sees the deletes) and their tasks end done; a copy the provider
// cannot delete ends unresolved with the class as its reason.
func TestDeleteBatchReportThroughCopyDeleter(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{WrapProcessor: func(id string, p stet.Processor, fakeURL string) stet.Processor {
		if bp, ok := p.(stet.BatchProcessor); ok && id == "openai-fake" {
			return &fileDeleter{BatchProcessor: bp, baseURL: fakeURL}
		}
		return p
	}})
	const canary = "CANARY-D12-CD"
	r := e.Deliver(stettest.SourceBatch, "msg_cd", stettest.Report{ExternalID: "report-cd", Revision: 1, Text: "Stop taking insulin. " + canary})
	waitLong(t, "the job to commit and its batch to be applied", func() bool {
		return e.JobState(r.JobID) == stet.JobCommitted && e.Count("batches", "applied_at IS NOT NULL") == 1
	})
	var acc api.DeletionAccepted
	if st, b := e.Do(http.MethodDelete, "/v1/reports/"+r.ReportID, stettest.OperatorToken, nil, &acc); st != http.StatusAccepted {
		t.Fatalf("DELETE = %d %s", st, b)
	}
	d := waitDeletionLong(t, e, acc.DeletionID)
	_, body := recovery.GetDeletion(t, e, acc.DeletionID)
	t.Logf("GET /v1/deletions/%s = %s", acc.DeletionID, body)
	files := 0
	for _, tk := range d.Tasks {
		switch {
		case strings.HasPrefix(tk.Copy, "provider_file:"):
			files++
			if tk.State != "done" {
				t.Errorf("task %s = %s, want done", tk.Copy, tk.State)
			}
		case strings.HasPrefix(tk.Copy, "provider_batch:"):
			if tk.State != "unresolved" || tk.Reason == nil || !strings.Contains(*tk.Reason, "unsupported") {
				t.Errorf("task %s = %s %v, want unresolved (unsupported)", tk.Copy, tk.State, tk.Reason)
			}
		}
	}
	if files < 2 {
		t.Errorf("provider file tasks = %d, want the input and output files", files)
	}
	deleted := 0
	for _, f := range e.Fake.Files() {
		if f.Deleted {
			deleted++
		} else if bytes.Contains(f.Content, []byte(canary)) {
			t.Errorf("the fake still holds file %s with the canary", f.ID)
		}
	}
	if deleted != files {
		t.Errorf("files deleted at the fake = %d, want %d", deleted, files)
	}
	if d.State != "unresolved" {
		t.Errorf("deletion = %s, want unresolved (the batch record stays at the provider)", d.State)
	}
	if places := canaryPlaces(t, e, canary); len(places) != 0 {
		t.Errorf("after the deletion the canary is in %s", strings.Join(places, ", "))
	}
}

// Drill 8: delete during extraction, then replay: 410, nothing resurrected.
func TestDrill8DeleteDuringExtraction(t *testing.T) {
	t.Parallel()
	checkDrill(t, recovery.Drill8, recovery.Counts{Reports: 1, Jobs: 1, Records: 0, Calls: 1})
}

// Drill 11: text: 2s: the sweeper purges the texts; records stay readable.
func TestDrill11TextRetention(t *testing.T) {
	t.Parallel()
	checkDrill(t, recovery.Drill11, recovery.Counts{Reports: 2, Jobs: 2, Records: 2, Calls: 2})
}

// Drill 12 as `stetlab drill 12` runs it (the OpenAI fake, one batch): the
// files deleted at the provider, the batch record unresolved, the canary
// gone. TestDrill12DeleteBatchReport runs it on every batch adapter.
func TestDrill12AsStetDrillRunsIt(t *testing.T) {
	t.Parallel()
	checkDrill(t, recovery.Drill12, recovery.Counts{Reports: 1, Jobs: 1, Records: 0, Calls: 0})
}

// Every drill `stetlab drill` can run has a test here, so none can rot unseen.
func TestEveryRecoveryDrillIsTested(t *testing.T) {
	src := ""
	for _, f := range []string{"drill_test.go", "lifecycle_test.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src += string(b)
	}
	for _, d := range recovery.All() {
		if !strings.Contains(src, "checkDrill(t, recovery.Drill"+d.Name+",") {
			t.Errorf("recovery.Drill%s has no checkDrill test in pipeline", d.Name)
		}
	}
}

// A copy the processor holds under its declared retention (30 days) leaves
// each deletion unresolved. An operator's evidence closes one through the
// API (operators only, own tenant, evidence required, once); the other
// closes itself when the sweep runs after the retention ended (a manual
// clock 31 days on). Then invariant 6 reports neither.
func TestProviderCopiesClose(t *testing.T) {
	t.Parallel()
	clock := stet.NewManualClock(time.Now())
	e := stettest.New(t, stettest.Options{Clock: clock})
	ctx := context.Background()
	var ids []string
	for _, ext := range []string{"report-confirm", "report-expire"} {
		r := e.Deliver(stettest.SourceReports, "msg_"+ext, stettest.Report{ExternalID: ext, Revision: 1, Text: "Hello."})
		e.WaitJob(r.JobID, stet.JobCommitted)
		var acc api.DeletionAccepted
		if st, b := e.Do(http.MethodDelete, "/v1/reports/"+r.ReportID, stettest.OperatorToken, nil, &acc); st != http.StatusAccepted {
			t.Fatalf("DELETE = %d %s", st, b)
		}
		recovery.WaitDeletion(t, e, acc.DeletionID, "unresolved")
		ids = append(ids, acc.DeletionID)
	}
	copyName := ledger.PrefixProviderRetention + "openai-fake"
	path := "/v1/deletions/" + ids[0] + "/tasks/" + url.PathEscape(copyName) + "/confirm"
	evidence := map[string]string{"evidence": "provider ticket 4411: the call's copy is deleted"}
	for name, c := range map[string]struct {
		path, token string
		body        any
		want        int
	}{
		"a reader":            {path, stettest.ReaderToken, evidence, http.StatusForbidden},
		"another tenant":      {path, stettest.OtherToken, evidence, http.StatusNotFound},
		"blank evidence":      {path, stettest.OperatorToken, map[string]string{"evidence": " "}, http.StatusBadRequest},
		"an unknown field":    {path, stettest.OperatorToken, map[string]string{"evidence": "x", "by": "me"}, http.StatusBadRequest},
		"a local copy, done":  {"/v1/deletions/" + ids[0] + "/tasks/revision_text/confirm", stettest.OperatorToken, evidence, http.StatusConflict},
		"a copy with a slash": {"/v1/deletions/" + ids[0] + "/tasks/" + url.PathEscape("provider_file:openai-fake/file-1") + "/confirm", stettest.OperatorToken, evidence, http.StatusNotFound},
		"an unknown deletion": {"/v1/deletions/del_nope/tasks/" + url.PathEscape(copyName) + "/confirm", stettest.OperatorToken, evidence, http.StatusNotFound},
	} {
		if st, b := e.Do(http.MethodPost, c.path, c.token, c.body, nil); st != c.want {
			t.Errorf("%s: POST confirm = %d %s, want %d", name, st, b, c.want)
		}
	}
	var d api.DeletionView
	if st, b := e.Do(http.MethodPost, path, stettest.OperatorToken, evidence, &d); st != http.StatusOK {
		t.Fatalf("POST confirm = %d %s, want 200", st, b)
	}
	task := d.Tasks[len(d.Tasks)-1]
	if d.State != "done" || task.Copy != copyName || task.State != "done" || task.Evidence == nil || *task.Evidence != evidence["evidence"] ||
		task.ConfirmedBy == nil || *task.ConfirmedBy != "token:operator" {
		t.Errorf("confirmed deletion = %+v, task %+v", d, task)
	}
	if st, _ := e.Do(http.MethodPost, path, stettest.OperatorToken, evidence, nil); st != http.StatusConflict {
		t.Errorf("POST confirm again = %d, want 409", st)
	}
	if n := e.Count("audit_log", "action = 'deletion.confirm' AND object_id = $1", ids[0]); n != 1 {
		t.Errorf("deletion.confirm audit rows = %d, want 1", n)
	}

	overdue := func() int {
		vs, err := e.DB.CheckInvariants(ctx, ledger.CheckParams{Now: clock.Now(), SLA: 1000 * time.Hour, LeaseGrace: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, v := range vs {
			if v.Invariant == 6 {
				n++
			}
		}
		return n
	}
	clock.Advance(31 * 24 * time.Hour)
	if n := overdue(); n != 0 {
		t.Errorf("invariant 6 past the retention's end, before the sweep = %d, want 0", n)
	}
	if _, err := e.Pipeline.Governance().Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	expired := recovery.WaitDeletion(t, e, ids[1], "done")
	if task := expired.Tasks[len(expired.Tasks)-1]; task.Reason == nil || *task.Reason != ledger.ReasonExpired || task.Evidence != nil {
		t.Errorf("expired task = %+v, want done with reason %s", task, ledger.ReasonExpired)
	}
	if n := overdue(); n != 0 {
		t.Errorf("invariant 6 after the sweep = %d, want 0", n)
	}
}
