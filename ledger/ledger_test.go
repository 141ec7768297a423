package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/testdb"
	"github.com/stetlabs/stet/ledger"
)

var t0 = time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)

// eachDialect runs the case against SQLite and, when STET_TEST_DATABASE_URL
// is set, PostgreSQL: the ledger conformance suite.
func eachDialect(t *testing.T, f func(t *testing.T, db *ledger.DB)) {
	for _, d := range testdb.Dialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			f(t, open(t, d))
		})
	}
}

func open(t *testing.T, dialect ledger.Dialect) *ledger.DB {
	t.Helper()
	ctx := context.Background()
	db, err := ledger.Open(ctx, testdb.URL(t, dialect))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	policy := &stet.Policy{ID: "standard", Processors: []string{"p1"}}
	if err := ledger.RecordPolicy(ctx, db.Writer(), policy, t0); err != nil {
		t.Fatal(err)
	}
	return db
}

func accept(t *testing.T, db *ledger.DB, ext string, rev int64, text, delivery string) ledger.AcceptResult {
	t.Helper()
	ctx := context.Background()
	var res ledger.AcceptResult
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		res, _, err = db.AcceptOne(ctx, tx, ledger.AcceptParams{
			TenantID: "demo", SourceID: "reports", Identity: stet.IdentityExternalID, Revisions: stet.RevisionsExplicit,
			ExternalID: ext, Revision: rev, Text: stet.NewText(text), DeliveryKey: delivery, BodySHA256: stet.SHA256Hex([]byte(delivery + text)),
			PolicyID: "standard", PolicyHash: (&stet.Policy{ID: "standard", Processors: []string{"p1"}}).Hash(),
			ProfileID: "moderation", ProfileVersion: 1, Now: t0,
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func claim(t *testing.T, db *ledger.DB, jobID string, expected int64, now time.Time) (int64, int, error) {
	t.Helper()
	var token int64
	var n int
	err := db.InTx(context.Background(), func(tx *sql.Tx) error {
		var err error
		token, n, err = db.Claim(context.Background(), tx, ledger.ClaimParams{JobID: jobID, Expected: expected, Now: now, LeaseFor: time.Minute, ProcessorID: "p1", InputSHA256: "abc"})
		return err
	})
	return token, n, err
}

func save(db *ledger.DB, jobID string, token int64, n int) error {
	return db.InTx(context.Background(), func(tx *sql.Tx) error {
		return db.SaveArtifact(context.Background(), tx, ledger.SaveArtifactParams{JobID: jobID, Token: token, AttemptN: n,
			Raw: []byte(`{}`), Output: []byte(`{"category":"none"}`), SchemaVersion: "moderation@1", ProcessorID: "p1", Now: t0})
	})
}

func commit(t *testing.T, db *ledger.DB, jobID string) string {
	t.Helper()
	var id string
	err := db.InTx(context.Background(), func(tx *sql.Tx) error {
		var err error
		id, err = db.WriteRecord(context.Background(), tx, jobID, t0)
		return err
	})
	if err != nil {
		t.Fatalf("WriteRecord(%s) = %v", jobID, err)
	}
	return id
}

func count(t *testing.T, db *ledger.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Writer().QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAcceptOutcomes(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		first := accept(t, db, "r1", 1, "text one", "d1")
		if first.Outcome != ledger.OutcomeAccepted {
			t.Fatalf("first = %s, want accepted", first.Outcome)
		}
		tests := []struct {
			name, ext, text, delivery string
			rev                       int64
			want                      ledger.Outcome
		}{
			{"same delivery", "r1", "text one", "d1", 1, ledger.OutcomeDuplicate},
			{"same content, new delivery", "r1", "text one", "d2", 1, ledger.OutcomeDuplicate},
			{"same delivery, other body", "r1", "text changed", "d1", 1, ledger.OutcomeDeliveryConflict},
			{"same revision, other content", "r1", "text changed", "d3", 1, ledger.OutcomeRevisionConflict},
			{"new revision", "r1", "text changed", "d4", 2, ledger.OutcomeAccepted},
		}
		for _, tt := range tests {
			got := accept(t, db, tt.ext, tt.rev, tt.text, tt.delivery)
			if got.Outcome != tt.want {
				t.Errorf("%s: Accept = %s, want %s", tt.name, got.Outcome, tt.want)
			}
			if tt.want == ledger.OutcomeDuplicate && got.JobID != first.JobID {
				t.Errorf("%s: job = %s, want %s", tt.name, got.JobID, first.JobID)
			}
		}
		if n := count(t, db, `SELECT COUNT(*) FROM jobs`); n != 2 {
			t.Errorf("jobs = %d, want 2", n)
		}
	})
}

// The attempt token fences stale workers: a second claim with the same
// expected token fails; an artifact from an old token is refused.
func TestClaimFencing(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		job := accept(t, db, "r1", 1, "text", "d1").JobID
		tok1, n1, err := claim(t, db, job, 0, t0)
		if err != nil || tok1 != 1 {
			t.Fatalf("Claim = %d, %v, want 1, nil", tok1, err)
		}
		if _, _, err := claim(t, db, job, 0, t0); !errors.Is(err, ledger.ErrNotClaimable) {
			t.Fatalf("second Claim with the same token = %v, want ErrNotClaimable", err)
		}
		if _, _, err := claim(t, db, job, 1, t0.Add(30*time.Second)); !errors.Is(err, ledger.ErrNotClaimable) {
			t.Fatalf("Claim under a live lease = %v, want ErrNotClaimable", err)
		}
		tok2, n2, err := claim(t, db, job, 1, t0.Add(2*time.Minute))
		if err != nil || tok2 != 2 {
			t.Fatalf("Claim after the lease = %d, %v, want 2, nil", tok2, err)
		}
		if err := save(db, job, tok1, n1); !errors.Is(err, stet.ErrLeaseLost) {
			t.Fatalf("SaveArtifact with the stale token = %v, want ErrLeaseLost", err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM artifacts`); n != 0 {
			t.Fatalf("artifacts after a stale save = %d, want 0", n)
		}
		if err := save(db, job, tok2, n2); err != nil {
			t.Fatalf("SaveArtifact with the current token = %v", err)
		}
		if err := save(db, job, tok2, n2); !errors.Is(err, stet.ErrLeaseLost) {
			t.Fatalf("second SaveArtifact = %v, want ErrLeaseLost", err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM artifacts`); n != 1 {
			t.Fatalf("artifacts = %d, want 1", n)
		}
	})
}

func extractAndCommit(t *testing.T, db *ledger.DB, job string) string {
	t.Helper()
	tok, n, err := claim(t, db, job, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := save(db, job, tok, n); err != nil {
		t.Fatal(err)
	}
	return commit(t, db, job)
}

// WriteRecord is idempotent, and the authoritative pointer only moves forward.
func TestCommitAndAuthoritativePointer(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		j2 := accept(t, db, "r1", 2, "second", "d2").JobID
		j1 := accept(t, db, "r1", 1, "first", "d1").JobID
		rec2 := extractAndCommit(t, db, j2)
		if again := commit(t, db, j2); again != rec2 {
			t.Fatalf("second WriteRecord = %s, want %s", again, rec2)
		}
		rec1 := extractAndCommit(t, db, j1)
		var stored []byte
		if err := db.Writer().QueryRow(`SELECT public_id FROM review_records WHERE authoritative`).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		auth := ledger.PublicID("rec", stored)
		if auth != rec2 {
			t.Errorf("authoritative = %s, want revision 2's %s (revision 1 is %s)", auth, rec2, rec1)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM review_records`); n != 2 {
			t.Errorf("records = %d, want 2", n)
		}
		// The partial unique index is the backstop.
		_, err := db.Writer().Exec(`UPDATE review_records SET authoritative = TRUE WHERE public_id = $1`, ledger.StoredID(rec1))
		if !db.IsUniqueViolation(err) {
			t.Errorf("a second authoritative record: err = %v, want a unique violation", err)
		}
	})
}

func TestMarkManual(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		job := accept(t, db, "r1", 1, "text", "d1").JobID
		tok, _, err := claim(t, db, job, 0, t0)
		if err != nil {
			t.Fatal(err)
		}
		var rec string
		err = db.InTx(context.Background(), func(tx *sql.Tx) error {
			var err error
			rec, err = db.MarkManual(context.Background(), tx, job, tok+1, stet.FailureRefusal, t0)
			return err
		})
		if !errors.Is(err, stet.ErrLeaseLost) {
			t.Fatalf("MarkManual with a wrong token = %v, want ErrLeaseLost", err)
		}
		err = db.InTx(context.Background(), func(tx *sql.Tx) error {
			var err error
			rec, err = db.MarkManual(context.Background(), tx, job, tok, stet.FailureRefusal, t0)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		r, err := db.GetReview(context.Background(), "demo", rec)
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind != stet.RecordManual || r.FailureClass != stet.FailureRefusal || !r.Authoritative {
			t.Errorf("manual record = %+v, want kind manual, class refusal, authoritative", r)
		}
	})
}

func TestAuditLogAppendOnly(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		if err := db.Audit(context.Background(), ledger.AuditEntry{Tenant: "demo", Actor: "token:ops", Action: "review.read", ObjectType: "review_record", ObjectID: "rec_1", Now: t0}); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{`UPDATE audit_log SET actor = 'x'`, `DELETE FROM audit_log`} {
			if _, err := db.Writer().Exec(q); err == nil {
				t.Errorf("%s succeeded, want it refused", q)
			}
		}
		if n := count(t, db, `SELECT COUNT(*) FROM audit_log`); n != 1 {
			t.Errorf("audit entries = %d, want 1", n)
		}
	})
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		applied, err := db.Migrate(ctx)
		if err != nil || len(applied) != 0 {
			t.Fatalf("second Migrate = %v, %v, want nothing applied", applied, err)
		}
		if ok, err := db.MigrationsCurrent(ctx); err != nil || !ok {
			t.Fatalf("MigrationsCurrent = %v, %v, want true", ok, err)
		}
		if _, err := db.Writer().Exec(`INSERT INTO stet_migrations (version, name, applied_at) VALUES (9999, 'from_the_future', 0)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Migrate(ctx); err == nil {
			t.Fatal("Migrate against a newer ledger succeeded, want a refusal")
		}
		if ok, _ := db.MigrationsCurrent(ctx); ok {
			t.Fatal("MigrationsCurrent = true against a newer ledger")
		}
	})
}

func TestInvariants(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		done := accept(t, db, "r1", 1, "text", "d1").JobID
		extractAndCommit(t, db, done)
		stuck := accept(t, db, "r2", 1, "text", "d2").JobID
		if _, _, err := claim(t, db, stuck, 0, t0); err != nil {
			t.Fatal(err)
		}
		vs, err := db.CheckInvariants(ctx, ledger.CheckParams{Now: t0.Add(2 * time.Hour), SLA: time.Hour, LeaseGrace: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, v := range vs {
			got[v.Name] = v.JobID
		}
		if got[ledger.InvNoRecordAfterSLA] != stuck || got[ledger.InvHeldPastLease] != stuck || len(vs) != 2 {
			t.Errorf("violations = %+v, want the stuck job under %s and %s", vs, ledger.InvNoRecordAfterSLA, ledger.InvHeldPastLease)
		}
		vs, err = db.CheckInvariants(ctx, ledger.CheckParams{Now: t0, SLA: time.Hour, LeaseGrace: time.Minute})
		if err != nil || len(vs) != 0 {
			t.Errorf("violations before the SLA = %+v, %v, want none", vs, err)
		}
		// Invariant 7: a dispatch pause older than its limit.
		if err := db.SetPause(ctx, ledger.Pause{Scope: "processor:p1", Reason: "quota", PausedBy: "stet", PausedAt: t0}, "*"); err != nil {
			t.Fatal(err)
		}
		vs, err = db.CheckInvariants(ctx, ledger.CheckParams{Now: t0.Add(30 * time.Minute), SLA: 24 * time.Hour, LeaseGrace: 24 * time.Hour, PauseLimit: time.Hour})
		if err != nil || len(vs) != 0 {
			t.Errorf("violations with a young pause = %+v, %v, want none", vs, err)
		}
		vs, err = db.CheckInvariants(ctx, ledger.CheckParams{Now: t0.Add(2 * time.Hour), SLA: 24 * time.Hour, LeaseGrace: 24 * time.Hour, PauseLimit: time.Hour})
		if err != nil || len(vs) != 1 || vs[0].Name != ledger.InvPausedTooLong || vs[0].Scope != "processor:p1" {
			t.Errorf("violations with an old pause = %+v, %v, want %s for processor:p1", vs, err, ledger.InvPausedTooLong)
		}
	})
}

// Worker heartbeats set each process's share of the processors' limits:
// live workers count, silent ones stop counting (and are counted as silent,
// for the liveness sweep), a stopping one leaves at once.
func TestHeartbeats(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, db *ledger.DB) {
		ctx := context.Background()
		window := 15 * time.Second
		beat := func(id string, at time.Time, wantLive, wantSilent int) {
			t.Helper()
			live, silent, err := db.Heartbeat(ctx, id, at, window)
			if err != nil {
				t.Fatal(err)
			}
			if live != wantLive || silent != wantSilent {
				t.Fatalf("%s beating at +%s: live %d, silent %d; want %d, %d", id, at.Sub(t0), live, silent, wantLive, wantSilent)
			}
			if n, _, err := db.Heartbeat(ctx, id, at, window); err != nil || n != wantLive {
				t.Fatalf("Heartbeat = %d, %v; want %d", n, err, wantLive)
			}
		}
		beat("p1", t0, 1, 0)                  // alone
		beat("p2", t0.Add(time.Second), 2, 0) // two processes
		// p1 silent for longer than the window; p2's own row was as old,
		// but a process never counts itself silent.
		beat("p2", t0.Add(20*time.Second), 1, 1)
		beat("p1", t0.Add(21*time.Second), 2, 0) // p1 back
		if err := db.Unregister(ctx, "p1"); err != nil {
			t.Fatal(err)
		}
		beat("p2", t0.Add(22*time.Second), 1, 0) // p1 stopped
	})
}
