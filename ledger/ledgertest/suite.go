package ledgertest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/seal"
)

// Run is the ledger's conformance suite: each rule of the contract — the
// intake identity, the attempt-token fence, at most one authoritative
// record per report, the forward-only pointer, the tombstone, a deletion
// cancelling a running extraction — under concurrency where the rule is
// about a race, with encryption off and on, destinations off and on, and
// the result saved both ways the ledger offers (SaveResultCommit, which
// falls back where the database cannot, and SaveResult in a transaction).
// Every database the ledger speaks runs it, each rule once.
//
// open returns a fresh, migrated ledger for one subtest.
func Run(t *testing.T, open func(t *testing.T) *ledger.DB) {
	for _, v := range variants() {
		t.Run(v.name(), func(t *testing.T) {
			t.Parallel()
			for _, r := range rules {
				t.Run(r.name, func(t *testing.T) {
					t.Parallel()
					r.run(t, newWorld(t, open(t), v))
				})
			}
		})
	}
}

// variant is one combination of the settings every rule must hold under.
type variant struct {
	encrypted    bool
	destinations bool
	inTx         bool // save with SaveResult in a transaction, never SaveResultCommit
}

func variants() []variant {
	var out []variant
	for _, enc := range []bool{false, true} {
		for _, dest := range []bool{false, true} {
			for _, inTx := range []bool{false, true} {
				out = append(out, variant{enc, dest, inTx})
			}
		}
	}
	return out
}

func (v variant) name() string {
	return fmt.Sprintf("encryption=%v/destinations=%v/in_tx=%v", v.encrypted, v.destinations, v.inTx)
}

var rules = []struct {
	name string
	run  func(t *testing.T, w *world)
}{
	{"racing intake of one identity", racingIntake},
	{"racing claims", racingClaims},
	{"a stale token's late result", staleResult},
	{"out-of-order revisions", outOfOrderRevisions},
	{"racing commits of two revisions", racingCommits},
	{"commit is idempotent", idempotentCommit},
	{"tombstone", tombstone},
	{"deletion during extraction", deletionDuringExtraction},
}

// t0 is the suite's clock: every call is given its time.
var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

var policy = &stet.Policy{ID: "standard", Processors: []string{"p1"}}

// world is one rule's ledger and variant.
type world struct {
	t  *testing.T
	db *ledger.DB
	v  variant
	// river inserts and lists River's extract jobs (it works none).
	river *river.Client[*sql.Tx]
}

func newWorld(t *testing.T, db *ledger.DB, v variant) *world {
	t.Helper()
	ctx := context.Background()
	if v.encrypted {
		k, err := seal.NewKeyring([]seal.MasterKey{{ID: "k1", Key: bytes.Repeat([]byte{7}, seal.KeySize)}})
		if err != nil {
			t.Fatal(err)
		}
		db.UseKeyring(k)
		if err := db.CheckKeys(ctx, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := ledger.RecordPolicy(ctx, db.Writer(), policy, t0); err != nil {
		t.Fatal(err)
	}
	if v.destinations {
		if err := db.SyncDestinations(ctx, []ledger.DestinationSpec{{SourceID: "reports", DestinationID: "moderation-tool",
			Events: ledger.RecordEvents, MaxAge: time.Hour}}, t0); err != nil {
			t.Fatal(err)
		}
	}
	m, err := rivermigrate.New(db.RiverDriver(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
	rc, err := river.NewClient(db.RiverDriver(), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, db: db, v: v, river: rc}
}

func (w *world) params(ext string, rev int64, text, delivery string) ledger.AcceptParams {
	return ledger.AcceptParams{
		TenantID: "demo", SourceID: "reports", Identity: stet.IdentityExternalID, Revisions: stet.RevisionsExplicit,
		ExternalID: ext, Revision: rev, Text: stet.NewText(text), DeliveryKey: delivery, BodySHA256: stet.SHA256Hex([]byte(ext + text)),
		PolicyID: policy.ID, PolicyHash: policy.Hash(), ProfileID: "moderation", ProfileVersion: 1, Now: t0,
	}
}

// accept accepts one delivery as a group of one.
func (w *world) accept(p ledger.AcceptParams) (ledger.AcceptResult, error) {
	res, err := w.acceptGroup([]ledger.AcceptParams{p})
	if err != nil {
		return ledger.AcceptResult{}, err
	}
	return res[0], nil
}

// acceptGroup accepts ps as one group with Accept, enqueueing River's
// extract jobs as intake does. A delivery that lost a race on a unique
// constraint more times than Accept retries it is delivered again, as its
// source would after the error.
func (w *world) acceptGroup(ps []ledger.AcceptParams) ([]ledger.AcceptResult, error) {
	ctx := context.Background()
	for try := 0; ; try++ {
		res, errs, err := w.db.Accept(ctx, ps, w.enqueue(len(ps)))
		if err != nil {
			return nil, err
		}
		again := false
		for _, e := range errs {
			if errors.Is(e, ledger.ErrRetryItem) && try < 5 {
				again = true
			} else if e != nil {
				return nil, e
			}
		}
		if !again {
			return res, nil
		}
	}
}

// enqueue is intake's Enqueue for n deliveries: River's extract job of
// each new sync job, written by the ledger's own statements or, item by
// item, by River's client.
func (w *world) enqueue(n int) *ledger.Enqueue {
	return &ledger.Enqueue{Kind: extractArgs{}.Kind(), Queue: river.QueueDefault, Priority: 1, MaxAttempts: 25,
		Metadata: make([][]byte, n),
		Insert: func(ctx context.Context, tx *sql.Tx, jobs []ledger.NewExtract) error {
			params := make([]river.InsertManyParams, len(jobs))
			for i, j := range jobs {
				params[i] = river.InsertManyParams{Args: extractArgs{JobID: j.JobID}}
			}
			_, err := w.river.InsertManyFastTx(ctx, tx, params)
			return err
		}}
}

// extractArgs are the suite's River extract jobs: {"job_id": …}, as
// intake's.
type extractArgs struct {
	JobID string `json:"job_id"`
}

func (extractArgs) Kind() string { return "suite_extract" }

// extractJobs counts River's extract jobs, by River's own API.
func (w *world) extractJobs() int {
	w.t.Helper()
	res, err := w.river.JobList(context.Background(), river.NewJobListParams().Kinds(extractArgs{}.Kind()).First(1000))
	if err != nil {
		w.t.Fatal(err)
	}
	return len(res.Jobs)
}

func (w *world) mustAccept(ext string, rev int64, text, delivery string) ledger.AcceptResult {
	w.t.Helper()
	res, err := w.accept(w.params(ext, rev, text, delivery))
	if err != nil {
		w.t.Fatalf("Accept(%s rev %d) = %v", ext, rev, err)
	}
	return res
}

func (w *world) claim(jobID string, expected int64, now time.Time) (int64, int, error) {
	var token int64
	var n int
	err := w.db.InTx(context.Background(), func(tx *sql.Tx) error {
		var err error
		token, n, err = w.db.Claim(context.Background(), tx, ledger.ClaimParams{JobID: jobID, Expected: expected, Now: now,
			LeaseFor: time.Minute, Holder: "suite", ProcessorID: "p1", InputSHA256: "abc"})
		return err
	})
	return token, n, err
}

// save saves a call's result and commits its review record, as the
// extract stage does, and returns the record's ID ("" when the record
// part failed and the record stage is to retry).
func (w *world) save(a ledger.AcceptResult, token int64, n int) (string, error) {
	ctx := context.Background()
	p := ledger.SaveResultParams{
		SaveArtifactParams: ledger.SaveArtifactParams{JobID: a.JobID, Token: token, AttemptN: n, Raw: []byte(`{"id":"resp"}`),
			Output: []byte(`{"category":"none"}`), SchemaVersion: "moderation@1", ProcessorID: "p1", Model: "m1", Now: t0},
		ReportID: a.ReportID, SourceID: "reports", Commit: true,
		Attempt: ledger.AttemptResult{JobID: a.JobID, N: n, Status: stet.AttemptSucceeded, Model: "m1", StatusCode: 200, Now: t0},
	}
	if !w.v.inTx {
		rec, err := w.db.SaveResultCommit(ctx, p)
		if !errors.Is(err, ledger.ErrSaveApart) {
			return rec, err
		}
	}
	var rec string
	err := w.db.InTx(ctx, func(tx *sql.Tx) error {
		var recorded bool
		var err error
		if rec, recorded, err = w.db.SaveResult(ctx, tx, p); err != nil || recorded {
			return err
		}
		rec, err = w.db.WriteRecord(ctx, tx, a.JobID, t0)
		return err
	})
	return rec, err
}

// extract claims a's job and saves its result.
func (w *world) extract(a ledger.AcceptResult) string {
	w.t.Helper()
	token, n, err := w.claim(a.JobID, 0, t0)
	if err != nil {
		w.t.Fatalf("Claim(%s) = %v", a.JobID, err)
	}
	rec, err := w.save(a, token, n)
	if err != nil || rec == "" {
		w.t.Fatalf("save(%s) = %q, %v; want a record", a.JobID, rec, err)
	}
	return rec
}

func (w *world) count(q string, args ...any) int {
	w.t.Helper()
	var n int
	if err := w.db.Writer().QueryRow(q, args...).Scan(&n); err != nil {
		w.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// authoritative returns the report's one authoritative record, failing
// the test if it has none or several.
func (w *world) authoritative() string {
	w.t.Helper()
	rows, err := w.db.Writer().Query(`SELECT public_id FROM review_records WHERE authoritative`)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			w.t.Fatal(err)
		}
		ids = append(ids, ledger.PublicID("rec", b))
	}
	if len(ids) != 1 {
		w.t.Fatalf("authoritative records = %v, want exactly one", ids)
	}
	return ids[0]
}

// outbox checks the committed events the records left: one per record and
// destination with destinations on, none without.
func (w *world) outbox(records int) {
	w.t.Helper()
	want := 0
	if w.v.destinations {
		want = records
	}
	if n := w.count(`SELECT COUNT(*) FROM outbox WHERE event = $1`, ledger.EventCommitted); n != want {
		w.t.Errorf("record.committed events = %d, want %d", n, want)
	}
}

// racing runs fn in n goroutines started together.
func racing(n int, fn func(i int)) {
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range n {
		done.Go(func() {
			start.Wait()
			fn(i)
		})
	}
	start.Done()
	done.Wait()
}

// Eight deliveries of one identity and revision at once, each under its
// own webhook-id, half alone and half in a group with a delivery of an
// identity of its own, and then a group holding two more of the first:
// one report, one revision, one job and one River extract job for the
// raced identity; one accepted, the others duplicates resolving to that
// job.
func racingIntake(t *testing.T, w *world) {
	const n = 8
	res := make([]ledger.AcceptResult, n+2)
	errs := make([]error, n)
	racing(n, func(i int) {
		p := w.params("r-race", 1, "the same text", fmt.Sprintf("d%d", i))
		if i%2 == 0 {
			res[i], errs[i] = w.accept(p)
			return
		}
		side := w.params(fmt.Sprintf("r-side-%d", i), 1, "other text", fmt.Sprintf("s%d", i))
		var rs []ledger.AcceptResult
		if rs, errs[i] = w.acceptGroup([]ledger.AcceptParams{side, p}); errs[i] == nil {
			res[i] = rs[1]
			if rs[0].Outcome != ledger.OutcomeAccepted {
				errs[i] = fmt.Errorf("its group's other delivery: outcome %s, want accepted", rs[0].Outcome)
			}
		}
	})
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("delivery %d: %v", i, errs[i])
		}
	}
	both, err := w.acceptGroup([]ledger.AcceptParams{w.params("r-race", 1, "the same text", "d8"), w.params("r-race", 1, "the same text", "d9")})
	if err != nil {
		t.Fatalf("a group of two more: %v", err)
	}
	copy(res[n:], both)
	accepted := 0
	for i, r := range res {
		switch r.Outcome {
		case ledger.OutcomeAccepted:
			accepted++
		case ledger.OutcomeDuplicate:
		default:
			t.Errorf("delivery %d: outcome %s, want accepted or duplicate", i, r.Outcome)
		}
		if r.JobID != res[0].JobID {
			t.Errorf("delivery %d resolved to job %s, delivery 0 to %s", i, r.JobID, res[0].JobID)
		}
	}
	if accepted != 1 {
		t.Errorf("accepted = %d, want 1", accepted)
	}
	// The raced identity's rows and the four side deliveries' own.
	const sides = n / 2
	for table, want := range map[string]int{"reports": 1 + sides, "revisions": 1 + sides, "jobs": 1 + sides, "deliveries": n + 2 + sides} {
		if got := w.count(`SELECT COUNT(*) FROM ` + table); got != want {
			t.Errorf("%s = %d, want %d", table, got, want)
		}
	}
	if got := w.extractJobs(); got != 1+sides {
		t.Errorf("River extract jobs = %d, want %d: one per job", got, 1+sides)
	}
}

// Eight workers claim one job at once: one gets attempt token 1, the
// others ErrNotClaimable; one attempt is recorded.
func racingClaims(t *testing.T, w *world) {
	a := w.mustAccept("r1", 1, "text", "d1")
	const n = 8
	tokens := make([]int64, n)
	errs := make([]error, n)
	racing(n, func(i int) { tokens[i], _, errs[i] = w.claim(a.JobID, 0, t0) })
	won := 0
	for i := range n {
		switch {
		case errs[i] == nil && tokens[i] == 1:
			won++
		case errors.Is(errs[i], ledger.ErrNotClaimable):
		default:
			t.Errorf("claim %d = %d, %v; want token 1 or ErrNotClaimable", i, tokens[i], errs[i])
		}
	}
	if won != 1 {
		t.Errorf("claims won = %d, want 1", won)
	}
	if got := w.count(`SELECT COUNT(*) FROM attempts`); got != 1 {
		t.Errorf("attempts = %d, want 1", got)
	}
}

// A worker whose lease ran out comes back with its result after another
// claimed the job: it gets stet.ErrLeaseLost and writes nothing; the
// current holder's result is saved and committed once.
func staleResult(t *testing.T, w *world) {
	a := w.mustAccept("r1", 1, "text", "d1")
	tok1, n1, err := w.claim(a.JobID, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	tok2, n2, err := w.claim(a.JobID, tok1, t0.Add(2*time.Minute))
	if err != nil || tok2 != tok1+1 {
		t.Fatalf("claim after the lease = %d, %v; want %d", tok2, err, tok1+1)
	}
	if rec, err := w.save(a, tok1, n1); !errors.Is(err, stet.ErrLeaseLost) {
		t.Fatalf("the stale result = %q, %v; want ErrLeaseLost", rec, err)
	}
	if got := w.count(`SELECT COUNT(*) FROM artifacts`) + w.count(`SELECT COUNT(*) FROM review_records`); got != 0 {
		t.Fatalf("artifacts and records after the stale result = %d, want 0", got)
	}
	rec, err := w.save(a, tok2, n2)
	if err != nil || rec == "" {
		t.Fatalf("the current result = %q, %v; want a record", rec, err)
	}
	if again, err := w.save(a, tok2, n2); !errors.Is(err, stet.ErrLeaseLost) {
		t.Errorf("the current result again = %q, %v; want ErrLeaseLost", again, err)
	}
	for table, want := range map[string]int{"artifacts": 1, "review_records": 1} {
		if got := w.count(`SELECT COUNT(*) FROM ` + table); got != want {
			t.Errorf("%s = %d, want %d", table, got, want)
		}
	}
	w.outbox(1)
}

// Revision 2 arrives and commits before revision 1: both get a record,
// revision 2's stays the authoritative one (the pointer only moves
// forward).
func outOfOrderRevisions(t *testing.T, w *world) {
	a2 := w.mustAccept("r1", 2, "second", "d2")
	a1 := w.mustAccept("r1", 1, "first", "d1")
	rec2 := w.extract(a2)
	rec1 := w.extract(a1)
	if auth := w.authoritative(); auth != rec2 {
		t.Errorf("authoritative = %s, want revision 2's %s (revision 1's is %s)", auth, rec2, rec1)
	}
	if got := w.count(`SELECT COUNT(*) FROM review_records`); got != 2 {
		t.Errorf("records = %d, want 2", got)
	}
	w.outbox(2)
}

// Two revisions of one report commit at once: one authoritative record,
// revision 2's.
func racingCommits(t *testing.T, w *world) {
	as := []ledger.AcceptResult{w.mustAccept("r1", 1, "first", "d1"), w.mustAccept("r1", 2, "second", "d2")}
	type claimed struct {
		token int64
		n     int
	}
	cs := make([]claimed, 2)
	for i, a := range as {
		token, n, err := w.claim(a.JobID, 0, t0)
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = claimed{token, n}
	}
	recs := make([]string, 2)
	errs := make([]error, 2)
	racing(2, func(i int) { recs[i], errs[i] = w.save(as[i], cs[i].token, cs[i].n) })
	for i := range 2 {
		if errs[i] != nil || recs[i] == "" {
			t.Fatalf("save of revision %d = %q, %v; want a record", i+1, recs[i], errs[i])
		}
	}
	if auth := w.authoritative(); auth != recs[1] {
		t.Errorf("authoritative = %s, want revision 2's %s", auth, recs[1])
	}
	w.outbox(2)
}

// Committing a committed job returns its record and writes nothing.
func idempotentCommit(t *testing.T, w *world) {
	a := w.mustAccept("r1", 1, "text", "d1")
	rec := w.extract(a)
	for range 2 {
		var again string
		err := w.db.InTx(context.Background(), func(tx *sql.Tx) error {
			var err error
			again, err = w.db.WriteRecord(context.Background(), tx, a.JobID, t0)
			return err
		})
		if err != nil || again != rec {
			t.Errorf("WriteRecord again = %q, %v; want %s", again, err, rec)
		}
	}
	if got := w.count(`SELECT COUNT(*) FROM review_records`); got != 1 {
		t.Errorf("records = %d, want 1", got)
	}
	w.outbox(1)
}

func (w *world) requestDeletion(a ledger.AcceptResult) {
	w.t.Helper()
	err := w.db.InTx(context.Background(), func(tx *sql.Tx) error {
		_, err := w.db.RequestDeletion(context.Background(), tx, ledger.DeletionRequest{Tenant: "demo", ReportID: a.ReportID, Actor: "suite", Now: t0})
		return err
	})
	if err != nil {
		w.t.Fatalf("RequestDeletion = %v", err)
	}
}

// After a deletion, a delivery of the identity (a later revision, under a
// new webhook-id) is answered gone and stores nothing.
func tombstone(t *testing.T, w *world) {
	a := w.mustAccept("r-del", 1, "text", "d1")
	w.extract(a)
	w.requestDeletion(a)
	before := w.count(`SELECT COUNT(*) FROM jobs`)
	res, err := w.accept(w.params("r-del", 2, "new text", "d2"))
	if err != nil || res.Outcome != ledger.OutcomeGone {
		t.Fatalf("delivery of the deleted identity = %s, %v; want gone", res.Outcome, err)
	}
	group, err := w.acceptGroup([]ledger.AcceptParams{w.params("r-del", 3, "newer text", "d3")})
	if err != nil || group[0].Outcome != ledger.OutcomeGone {
		t.Fatalf("a group with the deleted identity = %v, %v; want gone", group, err)
	}
	if got := w.count(`SELECT COUNT(*) FROM jobs`); got != before {
		t.Errorf("jobs = %d after the gone delivery, want %d", got, before)
	}
	if got := w.count(`SELECT COUNT(*) FROM revisions WHERE revision > 1`); got != 0 {
		t.Errorf("revisions 2 and 3 stored = %d, want 0", got)
	}
}

// A deletion requested while a call runs cancels the job: the call's
// result is refused (ErrCancelled) and no artifact or record is written.
func deletionDuringExtraction(t *testing.T, w *world) {
	a := w.mustAccept("r1", 1, "text", "d1")
	token, n, err := w.claim(a.JobID, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	w.requestDeletion(a)
	if rec, err := w.save(a, token, n); !errors.Is(err, ledger.ErrCancelled) {
		t.Fatalf("the result after the deletion = %q, %v; want ErrCancelled", rec, err)
	}
	if got := w.count(`SELECT COUNT(*) FROM artifacts`) + w.count(`SELECT COUNT(*) FROM review_records`); got != 0 {
		t.Errorf("artifacts and records = %d, want 0", got)
	}
	w.outbox(0)
}
