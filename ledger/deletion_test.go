package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

func requestDeletion(t *testing.T, db *ledger.DB, r ledger.DeletionRequest) ledger.DeletionRequested {
	t.Helper()
	var out ledger.DeletionRequested
	err := db.InTx(context.Background(), func(tx *sql.Tx) error {
		var err error
		out, err = db.RequestDeletion(context.Background(), tx, r)
		return err
	})
	if err != nil {
		t.Fatalf("RequestDeletion(%+v) = %v", r, err)
	}
	return out
}

// The request cancels the report's unfinished jobs, writes the tombstone
// (by hash) and the tasks in one transaction; a claimed attempt's result
// is then refused as cancelled; intake of the identity is gone; a second
// request returns the same deletion.
func TestRequestDeletionCancelsAndTombstones(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		res := accept(t, db, "r-del", 1, "secret text", "d1")
		token, n, err := claim(t, db, res.JobID, 0, t0)
		if err != nil {
			t.Fatal(err)
		}
		out := requestDeletion(t, db, ledger.DeletionRequest{Tenant: "demo", SourceID: "reports", ExternalID: "r-del", Actor: "test", Now: t0})
		if !out.Created || out.ReportID != res.ReportID {
			t.Fatalf("RequestDeletion = %+v, want a new deletion of %s", out, res.ReportID)
		}
		var state string
		_ = db.Writer().QueryRow(`SELECT state FROM jobs WHERE public_id = $1`, ledger.StoredID(res.JobID)).Scan(&state)
		if state != string(stet.JobCancelled) {
			t.Errorf("job = %s, want cancelled", state)
		}
		if err := save(db, res.JobID, token, n); !errors.Is(err, ledger.ErrCancelled) {
			t.Errorf("SaveArtifact after the deletion = %v, want ErrCancelled", err)
		}
		again := requestDeletion(t, db, ledger.DeletionRequest{Tenant: "demo", SourceID: "reports", ExternalID: "r-del", Actor: "test", Now: t0})
		byID := requestDeletion(t, db, ledger.DeletionRequest{Tenant: "demo", ReportID: res.ReportID, Actor: "test", Now: t0})
		if again.Created || again.DeletionID != out.DeletionID || byID.DeletionID != out.DeletionID {
			t.Errorf("second requests = %+v, %+v; want deletion %s", again, byID, out.DeletionID)
		}
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := db.RequestDeletion(ctx, tx, ledger.DeletionRequest{Tenant: "other", ReportID: res.ReportID, Now: t0})
			return err
		})
		if stet.ErrorCodeOf(err) != stet.ENotFound {
			t.Errorf("another tenant's request = %v, want not found", err)
		}
		if gone := accept(t, db, "r-del", 2, "new text", "d2"); gone.Outcome != ledger.OutcomeGone {
			t.Errorf("intake of the deleted identity = %s, want gone", gone.Outcome)
		}
		var revs int
		_ = db.Writer().QueryRow(`SELECT COUNT(*) FROM revisions`).Scan(&revs)
		if revs != 1 {
			t.Errorf("revisions = %d, want 1 (nothing stored for the gone delivery)", revs)
		}
		d, err := db.GetDeletion(ctx, "demo", out.DeletionID)
		if err != nil {
			t.Fatal(err)
		}
		if d.State != stet.DeletionPending || len(d.Tasks) != len(ledger.LocalCopies)+1 || d.Tasks[0].Copy != ledger.CopyEncryptionKey {
			t.Errorf("deletion = %+v, want pending, local copies then provider_retention:p1", d)
		}
	})
}

// Invariant 6: a task not done past its due time, or past its expiry for
// a provider-held copy, is a violation; done tasks are not.
func TestInvariantDeletionOverdue(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		res := accept(t, db, "r-inv", 1, "text", "d1")
		if _, _, err := claim(t, db, res.JobID, 0, t0); err != nil { // p1 receives the text
			t.Fatal(err)
		}
		out := requestDeletion(t, db, ledger.DeletionRequest{Tenant: "demo", ReportID: res.ReportID, Actor: "test", Now: t0})
		check := func(now time.Time) int {
			vs, err := db.CheckInvariants(ctx, ledger.CheckParams{Now: now, SLA: 1000 * time.Hour, LeaseGrace: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, v := range vs {
				if v.Invariant == 6 && v.DeletionID == out.DeletionID {
					n++
				}
			}
			return n
		}
		if n := check(t0.Add(time.Minute)); n != 0 {
			t.Errorf("violations before due = %d, want 0", n)
		}
		if n := check(t0.Add(2 * time.Hour)); n != len(ledger.LocalCopies)+1 {
			t.Errorf("violations past due = %d, want %d", n, len(ledger.LocalCopies)+1)
		}
		for _, c := range ledger.LocalCopies {
			if err := ledger.SetTask(ctx, db.Writer(), out.DeletionID, c, stet.DeletionDone, "", time.Time{}, t0); err != nil {
				t.Fatal(err)
			}
		}
		// The processor keeps the call 30 days: unresolved, due at its expiry.
		if err := ledger.SetTask(ctx, db.Writer(), out.DeletionID, "provider_retention:p1", stet.DeletionUnresolved, "retention", t0.Add(30*24*time.Hour), t0); err != nil {
			t.Fatal(err)
		}
		if n := check(t0.Add(2 * time.Hour)); n != 0 {
			t.Errorf("violations with the retention not expired = %d, want 0", n)
		}
		// Past its expiry the provider no longer holds the copy by its
		// own terms: not overdue, and the sweep closes the task.
		if n := check(t0.Add(31 * 24 * time.Hour)); n != 0 {
			t.Errorf("violations past the retention's expiry = %d, want 0 (it closes itself)", n)
		}
		if s, err := ledger.FinishDeletion(ctx, db.Writer(), out.DeletionID, t0); err != nil || s != stet.DeletionUnresolved {
			t.Errorf("FinishDeletion = %s, %v; want unresolved", s, err)
		}
	})
}

// deletionWithUnresolved is a deletion whose local copies are done and
// whose provider_retention:p1 task is unresolved until expires.
func deletionWithUnresolved(t *testing.T, db *ledger.DB, ext string, expires time.Time) string {
	t.Helper()
	ctx := context.Background()
	res := accept(t, db, ext, 1, "text", "d-"+ext)
	if _, _, err := claim(t, db, res.JobID, 0, t0); err != nil { // p1 receives the text
		t.Fatal(err)
	}
	out := requestDeletion(t, db, ledger.DeletionRequest{Tenant: "demo", ReportID: res.ReportID, Actor: "test", Now: t0})
	for _, c := range ledger.LocalCopies {
		if err := ledger.SetTask(ctx, db.Writer(), out.DeletionID, c, stet.DeletionDone, "", time.Time{}, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := ledger.SetTask(ctx, db.Writer(), out.DeletionID, "provider_retention:p1", stet.DeletionUnresolved, "retention", expires, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.FinishDeletion(ctx, db.Writer(), out.DeletionID, t0); err != nil {
		t.Fatal(err)
	}
	return out.DeletionID
}

// An operator's evidence closes an unresolved task: done, with who and
// the evidence, the deletion done, one audit row without the evidence.
// Blank evidence, another tenant, an unknown copy, a pending task and a
// task already done are refused, and change nothing.
func TestConfirmTask(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		id := deletionWithUnresolved(t, db, "r-conf", time.Time{})
		confirm := func(tenant, copy, evidence string) (*stet.Deletion, error) {
			return db.ConfirmTask(ctx, ledger.ConfirmParams{Tenant: tenant, DeletionID: id, Copy: copy, Actor: "token:ops",
				Evidence: evidence, Now: t0.Add(time.Hour)})
		}
		for _, c := range []struct {
			name, tenant, copy, evidence string
			want                         stet.ErrorCode
		}{
			{"blank evidence", "demo", "provider_retention:p1", "  ", stet.EInvalid},
			{"a control character", "demo", "provider_retention:p1", "ticket\x00", stet.EInvalid},
			{"another tenant", "other", "provider_retention:p1", "ticket 1", stet.ENotFound},
			{"an unknown copy", "demo", "provider_retention:nope", "ticket 1", stet.ENotFound},
			{"a task already done", "demo", "revision_text", "ticket 1", stet.EConflict},
		} {
			if _, err := confirm(c.tenant, c.copy, c.evidence); stet.ErrorCodeOf(err) != c.want {
				t.Errorf("%s: ConfirmTask = %v, want %s", c.name, err, c.want)
			}
		}
		d, err := confirm("demo", "provider_retention:p1", "provider ticket 4411: deleted on request")
		if err != nil {
			t.Fatal(err)
		}
		if d.State != stet.DeletionDone {
			t.Errorf("deletion = %s, want done", d.State)
		}
		var task stet.DeletionTask
		for _, tk := range d.Tasks {
			if tk.Copy == "provider_retention:p1" {
				task = tk
			}
		}
		if task.State != stet.DeletionDone || task.ConfirmedBy != "token:ops" || task.Evidence != "provider ticket 4411: deleted on request" ||
			task.Reason != ledger.ReasonConfirmed || !task.DoneAt.Equal(t0.Add(time.Hour)) {
			t.Errorf("task = %+v, want done, confirmed by token:ops with the evidence", task)
		}
		if _, err := confirm("demo", "provider_retention:p1", "again"); stet.ErrorCodeOf(err) != stet.EConflict {
			t.Errorf("confirming it again = %v, want conflict", err)
		}
		entries, err := db.AuditEntries(ctx, "demo")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range entries {
			if e.Action == "deletion.confirm" {
				n++
				if e.ObjectID != id || e.Detail != "provider_retention:p1" || e.Actor != "token:ops" {
					t.Errorf("audit row = %+v", e)
				}
			}
		}
		if n != 1 {
			t.Errorf("deletion.confirm audit rows = %d, want 1", n)
		}
		pending := requestDeletion(t, db, ledger.DeletionRequest{Tenant: "demo", ReportID: accept(t, db, "r-pend", 1, "text", "d-pend").ReportID,
			Actor: "test", Now: t0})
		if _, err := db.ConfirmTask(ctx, ledger.ConfirmParams{Tenant: "demo", DeletionID: pending.DeletionID, Copy: "revision_text",
			Actor: "token:ops", Evidence: "x", Now: t0}); stet.ErrorCodeOf(err) != stet.EConflict {
			t.Errorf("confirming a pending task = %v, want conflict", err)
		}
	})
}

// A provider_retention task closes itself once its declared retention has
// passed, and only then; its deletion is then done.
func TestCloseExpiredRetention(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		soon := deletionWithUnresolved(t, db, "r-soon", t0.Add(24*time.Hour))
		later := deletionWithUnresolved(t, db, "r-later", t0.Add(30*24*time.Hour))
		closeAt := func(now time.Time) []string {
			ids, err := ledger.CloseExpiredRetention(ctx, db.Writer(), now)
			if err != nil {
				t.Fatal(err)
			}
			return ids
		}
		if ids := closeAt(t0.Add(time.Hour)); len(ids) != 0 {
			t.Errorf("closed before any expiry = %v, want none", ids)
		}
		if ids := closeAt(t0.Add(25 * time.Hour)); len(ids) != 1 || ids[0] != soon {
			t.Errorf("closed a day on = %v, want [%s]", ids, soon)
		}
		d, err := db.GetDeletion(ctx, "demo", soon)
		if err != nil {
			t.Fatal(err)
		}
		if d.State != stet.DeletionDone || d.Tasks[len(d.Tasks)-1].Reason != ledger.ReasonExpired {
			t.Errorf("deletion = %s, last task %+v; want done, %s", d.State, d.Tasks[len(d.Tasks)-1], ledger.ReasonExpired)
		}
		if d, _ := db.GetDeletion(ctx, "demo", later); d.State != stet.DeletionUnresolved {
			t.Errorf("the later deletion = %s, want unresolved", d.State)
		}
	})
}
