package ledgertest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	// groups counts the groups AcceptGroup accepted (not item by item).
	groups atomic.Int64
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
	return &world{t: t, db: db, v: v}
}

func (w *world) params(ext string, rev int64, text, delivery string) ledger.AcceptParams {
	return ledger.AcceptParams{
		TenantID: "demo", SourceID: "reports", Identity: stet.IdentityExternalID, Revisions: stet.RevisionsExplicit,
		ExternalID: ext, Revision: rev, Text: stet.NewText(text), DeliveryKey: delivery, BodySHA256: stet.SHA256Hex([]byte(ext + text)),
		PolicyID: policy.ID, PolicyHash: policy.Hash(), ProfileID: "moderation", ProfileVersion: 1, Now: t0,
	}
}

// accept accepts one delivery in a transaction of its own, again after a
// concurrent writer won a race on a unique constraint (as intake does).
func (w *world) accept(p ledger.AcceptParams) (ledger.AcceptResult, error) {
	ctx := context.Background()
	for try := 0; ; try++ {
		var res ledger.AcceptResult
		err := w.db.InTx(ctx, func(tx *sql.Tx) error {
			var err error
			res, _, err = w.db.Accept(ctx, tx, p)
			return err
		})
		if errors.Is(err, ledger.ErrRetryItem) && try < 5 {
			continue
		}
		return res, err
	}
}

// acceptGroup accepts ps as one group in set-based statements where the
// database has them (AcceptGroup, in a transaction of its own), as intake
// does; where it has none, or the group must go item by item (a retry,
// plain hashes left to convert), each delivery is accepted on its own.
func (w *world) acceptGroup(ps []ledger.AcceptParams) ([]ledger.AcceptResult, error) {
	ctx := context.Background()
	if w.db.AcceptsGroups() {
		for try := 0; try < 5; try++ {
			var res []ledger.AcceptResult
			err := w.db.InTx(ctx, func(tx *sql.Tx) error {
				var err error
				res, _, err = w.db.AcceptGroup(ctx, tx, ps, nil)
				return err
			})
			if err == nil {
				w.groups.Add(1)
				return res, nil
			}
			if !errors.Is(err, ledger.ErrRetryItem) {
				break // item by item, as intake does after a failed group
			}
		}
	}
	out := make([]ledger.AcceptResult, len(ps))
	for i, p := range ps {
		var err error
		if out[i], err = w.accept(p); err != nil {
			return nil, err
		}
	}
	return out, nil
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
		ReportID: a.ReportID, Commit: true,
		Attempt: ledger.AttemptResult{JobID: a.JobID, N: n, Status: stet.AttemptSucceeded, Model: "m1", StatusCode: 200, Now: t0},
	}
	if !w.v.inTx && w.db.SavesCommitted() && !w.v.destinations {
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
// own webhook-id, half accepted one by one and half as groups (where the
// database accepts groups), and then a group holding two more: one report,
// one revision, one job; one accepted, the others duplicates resolving to
// that job.
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
		var rs []ledger.AcceptResult
		if rs, errs[i] = w.acceptGroup([]ledger.AcceptParams{p}); errs[i] == nil {
			res[i] = rs[0]
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
	if w.db.AcceptsGroups() && w.groups.Load() == 0 {
		t.Errorf("no group was accepted as a group: the set-based path went untested")
	}
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
	for table, want := range map[string]int{"reports": 1, "revisions": 1, "jobs": 1, "deliveries": n + 2} {
		if got := w.count(`SELECT COUNT(*) FROM ` + table); got != want {
			t.Errorf("%s = %d, want %d", table, got, want)
		}
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
