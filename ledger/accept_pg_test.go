package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/testdb"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/pipeline"
)

// groupCase is one delivery of TestAcceptSetTxMatchesAcceptOne.
type groupCase struct {
	content  bool   // content identity and content revisions
	revs     bool   // content revisions with an external ID
	ext      string // external ID
	rev      int64
	text     string
	delivery string
	body     string // "" is delivery+text
}

func (c groupCase) params() ledger.AcceptParams {
	p := ledger.AcceptParams{
		TenantID: "demo", SourceID: "reports", Identity: stet.IdentityExternalID, Revisions: stet.RevisionsExplicit,
		ExternalID: c.ext, Revision: c.rev, Text: stet.NewText(c.text), DeliveryKey: c.delivery,
		BodySHA256: stet.SHA256Hex([]byte(c.delivery + c.text + c.body)),
		PolicyID:   "standard", PolicyHash: (&stet.Policy{ID: "standard", Processors: []string{"p1"}}).Hash(),
		ProfileID: "moderation", ProfileVersion: 1, Now: t0,
	}
	if c.content {
		p.SourceID, p.Identity, p.Revisions, p.ExternalID, p.Revision = "inbox", stet.IdentityContent, stet.RevisionsContent, "", 0
	}
	if c.revs {
		p.Revisions, p.Revision = stet.RevisionsContent, 0
	}
	if c.ext == "meta" {
		p.Metadata = []byte(`{"k":"v"}`)
	}
	return p
}

// The set-based group (PostgreSQL) gives every delivery exactly the outcome,
// revision, state, job and report that Accept one by one gives, and stores
// the same rows: duplicates by webhook-id and by content (also within the
// group), revision conflicts, content revision numbering, tombstones (410),
// delivery conflicts; with encryption, every text sealed and readable.
func TestAcceptSetTxMatchesAcceptOne(t *testing.T) {
	t.Parallel()
	if !hasPostgres() {
		t.Skip("PostgreSQL only: set STET_TEST_DATABASE_URL")
	}
	seed := []groupCase{
		{ext: "r1", rev: 1, text: "one", delivery: "d1"},
		{content: true, text: "alpha", delivery: "d10"},
		{ext: "old", revs: true, text: "old text", delivery: "d20"},
	}
	group := []groupCase{
		{ext: "r1", rev: 1, text: "one", delivery: "d1"},                   // same webhook-id: duplicate
		{ext: "r1", rev: 1, text: "one", delivery: "d2"},                   // same content: duplicate
		{ext: "r1", rev: 1, text: "other", delivery: "d3"},                 // revision conflict
		{ext: "r1", rev: 1, text: "one", delivery: "d1", body: "x"},        // same webhook-id, other body: conflict
		{ext: "r2", rev: 1, text: "two", delivery: "d4"},                   // new report
		{ext: "r2", rev: 2, text: "two b", delivery: "d5"},                 // its second revision, in the group
		{ext: "r2", rev: 2, text: "two b", delivery: "d6"},                 // a duplicate of that, in the group
		{ext: "gone1", rev: 1, text: "deleted", delivery: "d7"},            // tombstoned: 410
		{content: true, text: "alpha", delivery: "d11"},                    // seeded content: duplicate
		{content: true, text: "beta", delivery: "d12"},                     // new content
		{content: true, text: "beta", delivery: "d13"},                     // the same, in the group
		{ext: "r3", revs: true, text: "x", delivery: "d14"},                // content revisions: 1
		{ext: "r3", revs: true, text: "y", delivery: "d15"},                // 2
		{ext: "r3", revs: true, text: "x", delivery: "d16"},                // 1 again: duplicate
		{ext: "old", revs: true, text: "old text 2", delivery: "d21"},      // existing report: next revision
		{ext: "old", revs: true, text: "old text", delivery: "d22"},        // its first revision: duplicate
		{ext: "r1", rev: 2, text: "one v2", delivery: "d17"},               // existing report, new revision
		{ext: "r9", rev: 1, text: "nine", delivery: "d4"},                  // a webhook-id of the group, other body
		{ext: "meta", rev: 1, text: "with metadata", delivery: "d30"},      // metadata stored
		{ext: "gone1", rev: 1, text: "deleted", delivery: "d8", body: "y"}, // tombstoned again
	}
	for _, encrypt := range []bool{false, true} {
		t.Run(fmt.Sprintf("encrypt=%v", encrypt), func(t *testing.T) {
			t.Parallel()
			run := func(set bool) ([]string, map[string]int, *ledger.DB, []ledger.AcceptResult) {
				db := open(t, ledger.Postgres)
				ctx := context.Background()
				if encrypt {
					db.UseKeyring(keyring(t, mk("k1", 1)))
					if err := db.CheckKeys(ctx, t0); err != nil {
						t.Fatal(err)
					}
				}
				label := map[string]string{}
				name := func(kind, id string, who string) string {
					if id == "" {
						return ""
					}
					if l, ok := label[kind+id]; ok {
						return l
					}
					label[kind+id] = kind + "@" + who
					return label[kind+id]
				}
				var out []string
				err := db.InTx(ctx, func(tx *sql.Tx) error {
					for i, c := range seed {
						r, _, err := db.AcceptOne(ctx, tx, c.params())
						if err != nil {
							return err
						}
						name("job", r.JobID, fmt.Sprint("seed", i))
						name("report", r.ReportID, fmt.Sprint("seed", i))
					}
					p := group[7].params()
					_, err := tx.ExecContext(ctx, `INSERT INTO tombstones (identity_hash, tenant_id, source_id, deletion_id, created_at, expires_at)
						VALUES ($1, $2, $3, 'del_1', 0, $4)`,
						db.TombstoneOf(p.TenantID, p.SourceID, ledger.IdentityHash(p.Identity, p.ExternalID, p.Text)), "demo", "reports", t0.Add(24*3600e9).UnixMicro())
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				ps := make([]ledger.AcceptParams, len(group))
				for i, c := range group {
					ps[i] = c.params()
				}
				res := make([]ledger.AcceptResult, len(ps))
				newJob := make([]bool, len(ps))
				err = db.InTx(ctx, func(tx *sql.Tx) error {
					if set {
						var err error
						res, newJob, err = db.AcceptSetTx(ctx, tx, ps, nil)
						return err
					}
					for i := range ps {
						var err error
						if res[i], newJob[i], err = db.AcceptOne(ctx, tx, ps[i]); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					t.Fatalf("set=%v: %v", set, err)
				}
				for i, r := range res {
					out = append(out, fmt.Sprintf("%d %s rev=%d state=%s new=%v job=%s report=%s", i, r.Outcome, r.Revision, r.State, newJob[i],
						name("job", r.JobID, fmt.Sprint(i)), name("report", r.ReportID, fmt.Sprint(i))))
				}
				rows := map[string]int{}
				for _, table := range []string{"reports", "revisions", "jobs", "deliveries", "report_keys"} {
					rows[table] = count(t, db, `SELECT COUNT(*) FROM `+table)
				}
				rows["revisions with metadata"] = count(t, db, `SELECT COUNT(*) FROM revisions WHERE metadata IS NOT NULL`)
				return out, rows, db, res
			}
			want, wantRows, _, _ := run(false)
			got, gotRows, db, res := run(true)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("AcceptSetTx outcomes:\n%s\nwant (AcceptOne one by one):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if fmt.Sprint(gotRows) != fmt.Sprint(wantRows) {
				t.Errorf("rows after AcceptSetTx = %v, want %v", gotRows, wantRows)
			}
			// The expected outcomes, spelled out for the reader.
			outcomes := []ledger.Outcome{"duplicate", "duplicate", "revision_conflict", "delivery_conflict", "accepted", "accepted", "duplicate",
				"gone", "duplicate", "accepted", "duplicate", "accepted", "accepted", "duplicate", "accepted", "duplicate", "accepted",
				"delivery_conflict", "accepted", "gone"}
			for i, r := range res {
				if r.Outcome != outcomes[i] {
					t.Errorf("item %d = %s, want %s", i, r.Outcome, outcomes[i])
				}
			}
			if res[12].Revision != 2 || res[13].Revision != 1 || res[14].Revision != 2 {
				t.Errorf("content revisions = %d, %d, %d, want 2, 1, 2", res[12].Revision, res[13].Revision, res[14].Revision)
			}
			if gotRows["revisions with metadata"] != 1 {
				t.Errorf("revisions with metadata = %d, want 1", gotRows["revisions with metadata"])
			}
			if encrypt {
				if n := count(t, db, `SELECT COUNT(*) FROM revisions WHERE text NOT LIKE 'stet:v1:%' OR metadata NOT LIKE 'stet:v1:%'`); n != 0 {
					t.Errorf("%d revisions not sealed", n)
				}
				if gotRows["report_keys"] != gotRows["reports"] {
					t.Errorf("report_keys = %d, want one per report (%d)", gotRows["report_keys"], gotRows["reports"])
				}
				for i, r := range res {
					if r.Outcome != ledger.OutcomeAccepted {
						continue
					}
					w, err := db.LoadWork(context.Background(), db.Writer(), r.JobID)
					if err != nil || w.Text.Reveal() != group[i].text {
						t.Errorf("item %d: LoadWork = %v; want its plaintext", i, err)
					}
				}
			}
		})
	}
}

func hasPostgres() bool {
	for _, d := range testdb.Dialects() {
		if d == ledger.Postgres {
			return true
		}
	}
	return false
}

// A job another transaction commits while the group's statement waits on
// it is past the statement's snapshot: the group reports ErrRetryItem
// (intake then runs it item by item), and the item path answers the
// duplicate with that job, as one-by-one intake would have.
func TestAcceptSetTxMissFallsBackToItems(t *testing.T) {
	t.Parallel()
	if !hasPostgres() {
		t.Skip("PostgreSQL only: set STET_TEST_DATABASE_URL")
	}
	ctx := context.Background()
	db := open(t, ledger.Postgres)
	item, other, otherJob := raceOtherJob(t, db)

	tx, err := db.Writer().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var pid int
	if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	groupErr := make(chan error, 1)
	go func() {
		_, _, err := db.AcceptSetTx(ctx, tx, []ledger.AcceptParams{item}, nil)
		groupErr <- err
	}()
	// Commit the other job once the group's statement waits on its row.
	for waiting := false; !waiting; {
		var wait sql.NullString
		if err := db.Writer().QueryRowContext(ctx, `SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&wait); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-groupErr:
			t.Fatalf("AcceptSetTx returned %v before the other transaction committed", err)
		default:
		}
		if waiting = wait.String == "Lock"; !waiting {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-groupErr; !errors.Is(err, ledger.ErrRetryItem) {
		t.Fatalf("AcceptSetTx = %v, want ErrRetryItem", err)
	}
	tx.Rollback()

	var res ledger.AcceptResult
	if err := db.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		res, _, err = db.AcceptOne(ctx, tx, item)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if res.Outcome != ledger.OutcomeDuplicate || res.JobID != otherJob {
		t.Errorf("Accept after the fallback = %s job %s, want duplicate %s", res.Outcome, res.JobID, otherJob)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM jobs`); n != 2 {
		t.Errorf("jobs = %d, want 2", n)
	}
}

// migrateRiver adds River's tables, which qGroupRecordsEnqueue writes.
func migrateRiver(t *testing.T, db *ledger.DB) {
	t.Helper()
	if err := pipeline.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
}

// postgresWithRiver skips the test without PostgreSQL, else opens a
// migrated ledger with River's tables.
func postgresWithRiver(t *testing.T) *ledger.DB {
	t.Helper()
	if !hasPostgres() {
		t.Skip("PostgreSQL only: set STET_TEST_DATABASE_URL")
	}
	db := open(t, ledger.Postgres)
	migrateRiver(t, db)
	return db
}

// testEnqueue is the River job AcceptSetTx writes in these tests.
func testEnqueue(n int) *ledger.Enqueue {
	enq := &ledger.Enqueue{Kind: "stet_extract", Queue: "extract", Priority: 2, MaxAttempts: 25, Metadata: make([][]byte, n)}
	for i := range enq.Metadata {
		enq.Metadata[i] = []byte(fmt.Sprintf(`{"item": %d}`, i))
	}
	return enq
}

// AcceptCommitted (the group and its River jobs in two round trips, its
// own transaction) gives every delivery the outcome Accept one by one
// gives and stores the same rows, plus exactly one River job per new sync
// job, carrying that delivery's metadata. It takes only the groups
// Pipelines accepts: none with encryption on, none whose deliveries
// share a key.
func TestAcceptCommittedMatchesAcceptOne(t *testing.T) {
	t.Parallel()
	if !hasPostgres() {
		t.Skip("PostgreSQL only: set STET_TEST_DATABASE_URL")
	}
	ctx := context.Background()
	seed := []groupCase{
		{ext: "r1", rev: 1, text: "one", delivery: "d1"},
		{content: true, text: "alpha", delivery: "d10"},
		{ext: "old", revs: true, text: "old text", delivery: "d20"},
	}
	group := []groupCase{
		{ext: "r1", rev: 1, text: "one", delivery: "d2"},              // same revision: duplicate
		{ext: "r9", rev: 1, text: "nine", delivery: "d1", body: "x"},  // a seeded webhook-id, other body: conflict
		{ext: "r2", rev: 1, text: "two", delivery: "d4"},              // new report
		{ext: "gone1", rev: 1, text: "deleted", delivery: "d7"},       // tombstoned: 410
		{content: true, text: "alpha", delivery: "d11"},               // seeded content: duplicate
		{content: true, text: "beta", delivery: "d12"},                // new content
		{ext: "r3", revs: true, text: "x", delivery: "d14"},           // content revisions: 1
		{ext: "old", revs: true, text: "old text 2", delivery: "d21"}, // existing report: next revision
		{ext: "meta", rev: 1, text: "with metadata", delivery: "d30"}, // metadata stored
		{ext: "batch", rev: 1, text: "a batch job", delivery: "d31"},  // batch mode: no River job
		{ext: "r4", rev: 1, text: "four", delivery: "d32"},            // new report
	}
	run := func(pipelined bool) ([]string, map[string]int, *ledger.DB) {
		db := open(t, ledger.Postgres)
		migrateRiver(t, db)
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			for _, c := range seed {
				if _, _, err := db.AcceptOne(ctx, tx, c.params()); err != nil {
					return err
				}
			}
			p := group[3].params()
			_, err := tx.ExecContext(ctx, `INSERT INTO tombstones (identity_hash, tenant_id, source_id, deletion_id, created_at, expires_at)
				VALUES ($1, $2, $3, 'del_1', 0, $4)`,
				ledger.TombstoneHash(p.TenantID, p.SourceID, ledger.IdentityHash(p.Identity, p.ExternalID, p.Text)), "demo", "reports", t0.Add(24*3600e9).UnixMicro())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		ps := make([]ledger.AcceptParams, len(group))
		for i, c := range group {
			ps[i] = c.params()
			if c.ext == "batch" {
				ps[i].Mode = stet.ModeBatch
			}
		}
		var res []ledger.AcceptResult
		if pipelined {
			if !db.Pipelines(ps) {
				t.Fatal("Pipelines = false for a group whose deliveries share no key")
			}
			if res, err = db.AcceptCommitted(ctx, ps, testEnqueue(len(ps))); err != nil {
				t.Fatalf("AcceptCommitted: %v", err)
			}
		} else {
			res = make([]ledger.AcceptResult, len(ps))
			err = db.InTx(ctx, func(tx *sql.Tx) error {
				for i := range ps {
					var err error
					if res[i], _, err = db.AcceptOne(ctx, tx, ps[i]); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		var out []string
		for i, r := range res {
			out = append(out, fmt.Sprintf("%d %s rev=%d state=%s", i, r.Outcome, r.Revision, r.State))
		}
		rows := map[string]int{}
		for _, table := range []string{"reports", "revisions", "jobs", "deliveries"} {
			rows[table] = count(t, db, `SELECT COUNT(*) FROM `+table)
		}
		return out, rows, db
	}
	want, wantRows := func() ([]string, map[string]int) { o, r, _ := run(false); return o, r }()
	got, gotRows, db := run(true)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("AcceptCommitted outcomes:\n%s\nwant (AcceptOne one by one):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if fmt.Sprint(gotRows) != fmt.Sprint(wantRows) {
		t.Errorf("rows after AcceptCommitted = %v, want %v", gotRows, wantRows)
	}
	// New jobs: r2, beta, r3, old's revision 2, meta, batch, r4; all but
	// the batch job get a River job.
	if n := count(t, db, `SELECT COUNT(*) FROM river_job`); n != 6 {
		t.Errorf("River jobs = %d, want 6 (one per new sync job)", n)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM river_job r JOIN jobs j ON j.public_id = stet_ulid(r.args->>'job_id')
		WHERE j.mode = 'sync' AND r.kind = 'stet_extract' AND r.queue = 'extract' AND r.priority = 2
			AND r.max_attempts = 25 AND r.state = 'available' AND r.attempt = 0`); n != 6 {
		t.Errorf("River jobs naming a sync job, as River inserts them = %d, want 6", n)
	}
	// Each River job carries its own delivery's metadata: item 2 is r2.
	if n := count(t, db, `SELECT COUNT(*) FROM river_job r JOIN jobs j ON j.public_id = stet_ulid(r.args->>'job_id')
		JOIN reports rp ON rp.id = j.report_id WHERE rp.external_id = 'r2' AND r.metadata = '{"item": 2}'`); n != 1 {
		t.Errorf("River job of r2 with item 2's metadata = %d, want 1", n)
	}

	// A group with a duplicate inside, or with encryption on, is not
	// pipelined.
	dup := []ledger.AcceptParams{group[2].params(), group[2].params()}
	dup[1].DeliveryKey = "d99"
	if db.Pipelines(dup) {
		t.Error("Pipelines = true for two deliveries of one revision")
	}
	if _, err := db.AcceptCommitted(ctx, dup, testEnqueue(2)); err == nil {
		t.Error("AcceptCommitted took a group Pipelines refuses")
	}
	enc := open(t, ledger.Postgres)
	enc.UseKeyring(keyring(t, mk("k1", 1)))
	if enc.Pipelines([]ledger.AcceptParams{group[2].params()}) {
		t.Error("Pipelines = true with encryption on")
	}
}

// When the group's second statement finds an item it must leave to the
// item path (here a job another transaction commits while the statement
// waits on it), stet_group_retry aborts the transaction, so the COMMIT
// sent behind the statement commits nothing: AcceptCommitted answers
// ErrRetryItem, no receipt or River job of the group is stored, and the
// pool's connections still work.
func TestAcceptCommittedRetryCommitsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := postgresWithRiver(t)
	// item would get a new job unless another transaction inserted it
	// first; fresh, a new report, would be stored if the group committed.
	item, other, otherJob := raceOtherJob(t, db)
	fresh := groupCase{ext: "r5", rev: 1, text: "five", delivery: "d5"}.params()
	fresh.ProfileVersion = 2
	var otherPID int
	if err := other.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&otherPID); err != nil {
		t.Fatal(err)
	}
	group := []ledger.AcceptParams{item, fresh}
	if !db.Pipelines(group) {
		t.Fatal("Pipelines = false")
	}
	groupErr := make(chan error, 1)
	go func() {
		_, err := db.AcceptCommitted(ctx, group, testEnqueue(len(group)))
		groupErr <- err
	}()
	// Commit the other job once the group's statement waits on its row.
	for waiting := false; !waiting; {
		var n int
		if err := db.Writer().QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, otherPID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-groupErr:
			t.Fatalf("AcceptCommitted returned %v before the other transaction committed", err)
		default:
		}
		if waiting = n > 0; !waiting {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-groupErr; !errors.Is(err, ledger.ErrRetryItem) {
		t.Fatalf("AcceptCommitted = %v, want ErrRetryItem", err)
	}
	for table, want := range map[string]int{"reports": 1, "revisions": 1, "jobs": 2, "deliveries": 1, "river_job": 0} {
		if n := count(t, db, `SELECT COUNT(*) FROM `+table); n != want {
			t.Errorf("%s after the aborted group = %d, want %d", table, n, want)
		}
	}
	// The item path then answers the duplicate with the other job, and the
	// new report as accepted.
	var res [2]ledger.AcceptResult
	if err := db.InTx(ctx, func(tx *sql.Tx) error {
		for i, p := range group {
			var err error
			if res[i], _, err = db.AcceptOne(ctx, tx, p); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if res[0].Outcome != ledger.OutcomeDuplicate || res[0].JobID != otherJob || res[1].Outcome != ledger.OutcomeAccepted {
		t.Errorf("Accept after the fallback = %s %s, %s; want duplicate %s, accepted", res[0].Outcome, res[0].JobID, res[1].Outcome, otherJob)
	}
}

// raceOtherJob stores revision 1 of report r1 and returns a delivery of
// that revision under profile version 2 (a new job), and another
// transaction, still open, that has inserted that very job (job_other):
// a statement that inserts it waits on the other transaction.
func raceOtherJob(t *testing.T, db *ledger.DB) (ledger.AcceptParams, *sql.Tx, string) {
	t.Helper()
	ctx := context.Background()
	seed := groupCase{ext: "r1", rev: 1, text: "one", delivery: "d1"}
	if err := db.InTx(ctx, func(tx *sql.Tx) error {
		_, _, err := db.AcceptOne(ctx, tx, seed.params())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	item := groupCase{ext: "r1", rev: 1, text: "one", delivery: "d2"}.params()
	item.ProfileVersion = 2
	ev := (&stet.Profile{ID: item.ProfileID, Version: item.ProfileVersion}).ExtractionVersion()
	other, err := db.Writer().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Rollback() })
	otherJob := stet.NewID("job", t0)
	if _, err := other.ExecContext(ctx, `INSERT INTO jobs (public_id, revision_id, report_id, tenant_id, source_id, revision,
			extraction_version, state, attempt, created_at, updated_at, mode)
		SELECT $2, id, report_id, 'demo', 'reports', 1, $1, 'accepted', 0, 0, 0, 'sync' FROM revisions`, ev, ledger.StoredID(otherJob)); err != nil {
		t.Fatal(err)
	}
	return item, other, otherJob
}
