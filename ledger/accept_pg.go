package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger/postgres"
	"github.com/stetlabs/stet/seal"
)

// The set-based intake statements are the PostgreSQL driver's
// (ledger/postgres/intake.go); this file binds their arguments.
var (
	qGroupReports        = postgres.GroupReports
	qGroupRecords        = postgres.GroupRecords
	qGroupRecordsEnqueue = postgres.GroupRecordsEnqueue
)

// groupItem is one delivery of a set-based group on its way through.
type groupItem struct {
	i        int // index into the group
	p        *AcceptParams
	identity string // the plain identity hash
	// The hashes as stored (blindindex.go): identity, tombstone, content
	// and body; the plain ones without a blind-index key.
	storedIdentity, tomb, body string
	now                        int64
	dk                         *seal.DataKey
	key                        newKey // the data key made before the report row (prepareReportKey)
	meta                       string // River job metadata (Enqueue), '' for none

	reportID   string // the report's public ID and key
	reportKey  int64
	newReport  bool
	contentSHA string
	revision   int64
	extraction string
	jobID      string
}

// acceptSetTx records a group of deliveries inside tx on PostgreSQL with
// two statements for the whole group (qGroupReports, qGroupRecords; plus
// one per report for its data key when encryption is on) instead of
// acceptOne's statements per delivery, with its outcomes exactly. ps
// must be in lock order (by tenant, source and identity hash), as the
// caller takes report rows in that order; the items that share an
// identity or webhook-id with an earlier item of the group run as a
// second set after the first, so that they see the earlier items' rows as
// they would one by one (intake holds such deliveries back for its next
// group, so that set is rare there).
//
// With enq, the River jobs of the new sync jobs are written too; without,
// the caller enqueues them (newJob says which).
//
// Any error (ErrRetryItem included) leaves tx unusable for the group:
// Accept rolls back and runs the group again, item by item under
// savepoints.
func (db *DB) acceptSetTx(ctx context.Context, tx Querier, ps []AcceptParams, enq *Enqueue) ([]AcceptResult, []bool, error) {
	if db.index != nil && db.mixed.Load() {
		// Plain hashes may remain (blindindex.go): acceptOne looks both
		// forms up, the set-based statements only one.
		return nil, nil, errGroupMixed
	}
	res := make([]AcceptResult, len(ps))
	newJob := make([]bool, len(ps))
	set, later := splitGroup(ps, enq)
	if err := db.acceptSet(ctx, tx, set, res, newJob, enq); err != nil {
		return nil, nil, err
	}
	if len(later) == 0 {
		return res, newJob, nil
	}
	// The items that share a key with an earlier one run as a set of their
	// own after the first, which they then see as acceptOne would.
	rest := make([]AcceptParams, len(later))
	var restEnq *Enqueue
	if enq != nil {
		e := *enq
		e.Metadata = make([][]byte, len(later))
		restEnq = &e
	}
	for k, i := range later {
		rest[k] = ps[i]
		if restEnq != nil && i < len(enq.Metadata) {
			restEnq.Metadata[k] = enq.Metadata[i]
		}
	}
	r, nj, err := db.acceptSetTx(ctx, tx, rest, restEnq)
	if err != nil {
		return nil, nil, err
	}
	for k, i := range later {
		res[i], newJob[i] = r[k], nj[k]
	}
	return res, newJob, nil
}

// errGroupMixed is acceptSetTx's answer while the ledger converts to the
// blind index: Accept runs the group item by item.
var errGroupMixed = errors.New("the ledger converts to the blind index: accept item by item")

// sealedBits is qGroupRecords' $21: sealedText when the texts are sealed,
// sealedBlind when the hashes are blind.
func sealedBits(db *DB) int {
	bits := db.blindBit()
	if db.keys != nil {
		bits |= sealedText
	}
	return bits
}

// splitGroup returns the items of the group's first set and the indexes
// of those that share an identity or webhook-id with an earlier item.
func splitGroup(ps []AcceptParams, enq *Enqueue) (set []*groupItem, later []int) {
	seenIdentity := map[string]bool{}
	seenDelivery := map[string]bool{}
	for i := range ps {
		p := &ps[i]
		identity := IdentityHash(p.Identity, p.ExternalID, p.Text)
		ik := p.TenantID + "\x00" + p.SourceID + "\x00" + identity
		dkey := p.SourceID + "\x00" + p.DeliveryKey
		if seenIdentity[ik] || seenDelivery[dkey] {
			later = append(later, i)
		} else {
			it := &groupItem{i: i, p: p, identity: identity, now: micros(p.Now)}
			if enq != nil && i < len(enq.Metadata) {
				it.meta = string(enq.Metadata[i])
			}
			set = append(set, it)
		}
		seenIdentity[ik], seenDelivery[dkey] = true, true
	}
	return set, later
}

// pipelines reports whether acceptCommitted can record the group ps:
// on PostgreSQL, with encryption off (a data key is a statement of its
// own between the two) and enq given, when no delivery shares an identity
// or webhook-id with an earlier one (those run as a second set).
func (db *DB) pipelines(ps []AcceptParams, enq *Enqueue) bool {
	if db.dialect.name != Postgres || db.keys != nil || enq == nil {
		return false
	}
	_, later := splitGroup(ps, nil)
	return len(later) == 0
}

// errNotPipelined is acceptCommitted's answer to a group that pipelines
// refuses. Nothing was sent.
var errNotPipelined = errors.New("the group needs a transaction of its own")

// ErrCommit wraps the failure of a COMMIT: whether the transaction
// committed is unknown, so the group must not run again as if it had not.
var ErrCommit = errors.New("commit")

// acceptCommitted records a group as acceptSetTx does with enq, in a
// transaction of its own that it commits, in two round trips to
// PostgreSQL instead of four (BEGIN, two statements, COMMIT): BEGIN with
// qGroupReports, then qGroupRecordsEnqueue with COMMIT, each pair sent as
// one pgx batch on a connection of the writer pool. The group must be one
// pipelines accepts. It returns an error wrapping ErrCommit when the
// COMMIT itself failed; any other error after rolling back (or sending
// nothing), when Accept runs the group again item by item.
// A COMMIT rides behind the second statement only because that statement
// aborts the transaction (stet_group_retry) wherever the group would run
// again.
func (db *DB) acceptCommitted(ctx context.Context, ps []AcceptParams, enq *Enqueue) ([]AcceptResult, error) {
	if !db.pipelines(ps, enq) || hasAudio(ps) {
		// Audio is written item by item, beside its revision.
		return nil, errNotPipelined
	}
	set, _ := splitGroup(ps, enq)
	res := make([]AcceptResult, len(ps))
	err := db.onPgx(ctx, errNotPipelined, func(c *pgx.Conn) error {
		return db.acceptPipelined(ctx, c, set, res, enq)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// onPgx runs fn on the pgx connection under one connection of the writer
// pool, held for fn's duration; notPgx when the driver is not pgx's.
func (db *DB) onPgx(ctx context.Context, notPgx error, fn func(*pgx.Conn) error) error {
	conn, err := db.w.Conn(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return notPgx
		}
		return fn(c.Conn())
	})
}

// commitBatch reads the answer to the COMMIT that ends br, the batch's
// last statement, and closes br; a failure wraps ErrCommit, after a
// ROLLBACK in case the transaction is still open.
func commitBatch(ctx context.Context, c *pgx.Conn, br pgx.BatchResults) error {
	_, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_, _ = c.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		return fmt.Errorf("%w: %w", ErrCommit, err)
	}
	return nil
}

func (db *DB) acceptPipelined(ctx context.Context, c *pgx.Conn, items []*groupItem, res []AcceptResult, enq *Enqueue) error {
	// A failed statement leaves the transaction aborted, and a connection
	// returned to the pool inside a transaction is discarded (pgx's
	// ResetSession), so a ROLLBACK that fails costs only the connection.
	rollback := func() { _, _ = c.Exec(context.WithoutCancel(ctx), "ROLLBACK") }
	done := make([]bool, len(items))
	args, err := db.groupReportsArgs(items)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(qGroupReports, args...)
	br := c.SendBatch(ctx, b)
	_, err = br.Exec()
	if err != nil {
		err = fmt.Errorf("begin: %w", err)
	} else {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			err = readGroupReports(rows, items, res, done)
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			err = fmt.Errorf("insert report: %w", err)
		}
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("insert report: %w", cerr)
	}
	if err != nil {
		rollback()
		return err
	}
	items = keep(items, done)
	if len(items) == 0 {
		// Every delivery was answered by the first statement, which then
		// wrote nothing.
		if _, err := c.Exec(ctx, "COMMIT"); err != nil {
			return fmt.Errorf("%w: %w", ErrCommit, err)
		}
		return nil
	}
	query, args, err := db.groupRecordsArgs(items, enq)
	if err != nil {
		rollback()
		return err
	}
	b = &pgx.Batch{}
	b.Queue(query, args...)
	b.Queue("COMMIT")
	br = c.SendBatch(ctx, b)
	var outs []groupOutcome
	rows, err := br.Query()
	if err == nil {
		outs, err = readGroupRecords(rows, len(items))
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		_ = br.Close()
		rollback()
		return groupRecordsError(err)
	}
	if err := commitBatch(ctx, c, br); err != nil {
		return err
	}
	// Committed: stet_group_retry let every row through, so each outcome
	// is final (resolveGroupRecords finds no retry).
	if err := resolveGroupRecords(items, outs, res, nil); err != nil {
		return fmt.Errorf("after commit: %w", err)
	}
	return nil
}

// column builds one array argument from the items.
func column[T any](items []*groupItem, f func(*groupItem) T) []T {
	out := make([]T, len(items))
	for i, it := range items {
		out[i] = f(it)
	}
	return out
}

// errGroupMiss means a statement of the group found a row taken that its
// snapshot cannot show (committed by another transaction after the
// statement started), or another transaction's delivery took a revision
// number or webhook-id: the group runs again item by item, where each
// lookup is a statement of its own.
var errGroupMiss = fmt.Errorf("set-based intake group: a row committed during the statement: %w", ErrRetryItem)

// groupRecordsError is the error of qGroupRecords: errGroupMiss when
// stet_group_retry stopped it.
func groupRecordsError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "ST001" {
		return errGroupMiss
	}
	return fmt.Errorf("insert revision: %w", err)
}

// rowReader is what reading a group statement's rows needs, from
// database/sql or from pgx.
type rowReader interface {
	Next() bool
	Scan(dest ...any) error
}

// groupReportsArgs draws each item's report ID, fills in its stored
// hashes and returns qGroupReports' arguments.
func (db *DB) groupReportsArgs(items []*groupItem) ([]any, error) {
	bits := 0
	if db.keys != nil {
		bits = sealedExternalID
	}
	for _, it := range items {
		it.reportID = stet.NewID(prefixReport, it.p.Now)
		var err error
		if it.key, err = db.prepareReportKey(it.reportID, it.p.ExternalID); err != nil {
			return nil, err
		}
		it.storedIdentity = db.blind(hashIdentity, it.identity)
		it.tomb = db.tombstoneOf(it.p.TenantID, it.p.SourceID, it.identity)
		it.body = db.blind(hashBody, it.p.BodySHA256)
	}
	return []any{
		column(items, func(it *groupItem) string { return it.tomb }),
		column(items, func(it *groupItem) int64 { return it.now }),
		column(items, func(it *groupItem) string { return it.p.SourceID }),
		column(items, func(it *groupItem) string { return it.p.DeliveryKey }),
		column(items, func(it *groupItem) []byte { return pub(it.reportID) }),
		column(items, func(it *groupItem) string { return it.p.TenantID }),
		column(items, func(it *groupItem) string { return it.key.externalID.String }),
		column(items, func(it *groupItem) []byte { return sha(it.storedIdentity) }),
		db.blindBit() | bits, // $9: sealedBlind, sealedExternalID
	}, nil
}

// readGroupReports reads qGroupReports' rows: the outcome of each item the
// first statement answers (marked done), the report of each other.
func readGroupReports(rows rowReader, items []*groupItem, res []AcceptResult, done []bool) error {
	seen := 0
	for rows.Next() {
		var ord, revision int64
		var gone, found bool
		var bodySHA, jobID, reportID, state, id string
		var key sql.NullInt64
		if err := rows.Scan(&ord, &gone, &found, shaScan{&bodySHA}, jobPub(&jobID), reportPub(&reportID), &revision, &state,
			&key, reportPub(&id)); err != nil {
			return err
		}
		seen++
		k := ord - 1
		if k < 0 || k >= int64(len(items)) {
			return fmt.Errorf("row %d for %d items", ord, len(items))
		}
		it := items[k]
		switch {
		case gone:
			res[it.i] = AcceptResult{Outcome: OutcomeGone}
			done[k] = true
		case found && bodySHA != it.body:
			res[it.i] = AcceptResult{Outcome: OutcomeDeliveryConflict}
			done[k] = true
		case found && state == "":
			return fmt.Errorf("read job state: %w", sql.ErrNoRows)
		case found:
			res[it.i] = AcceptResult{Outcome: OutcomeDuplicate, JobID: jobID, ReportID: reportID, Revision: revision, State: stet.JobState(state)}
			done[k] = true
		case id == "":
			// The report exists and was deleted.
			res[it.i] = AcceptResult{Outcome: OutcomeGone}
			done[k] = true
		default:
			it.newReport = id == it.reportID
			it.reportID, it.reportKey = id, key.Int64
		}
	}
	if seen != len(items) {
		return fmt.Errorf("%d rows for %d items", seen, len(items))
	}
	return nil
}

func (db *DB) acceptSet(ctx context.Context, tx Querier, items []*groupItem, res []AcceptResult, newJob []bool, enq *Enqueue) error {
	if len(items) == 0 {
		return nil
	}
	// 0-2. Tombstones and receipts, then the reports, inserted or taken in
	// lock order.
	done := make([]bool, len(items))
	args, err := db.groupReportsArgs(items)
	if err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, qGroupReports, args...)
	if err != nil {
		return fmt.Errorf("insert report: %w", err)
	}
	err = readGroupReports(rows, items, res, done)
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return fmt.Errorf("insert report: %w", err)
	}
	items = keep(items, done)
	// The data keys (encryption on): one per report, as acceptOne.
	if db.keys != nil {
		for _, it := range items {
			var err error
			if it.newReport {
				it.dk, err = db.storeReportKey(ctx, tx, it.reportKey, it.key, it.p.Now)
			} else {
				it.dk, err = db.writeKey(ctx, tx, it.reportID, it.p.Now)
			}
			if err != nil {
				return err
			}
		}
	}
	if len(items) == 0 {
		return nil
	}

	// 3-5. The revisions, jobs and receipts.
	query, args, err := db.groupRecordsArgs(items, enq)
	if err != nil {
		return err
	}
	rows, err = tx.QueryContext(ctx, query, args...)
	if err != nil {
		return groupRecordsError(err)
	}
	// The whole result is read before any verdict, so that a retry is
	// decided on the group, not on the first row.
	outs, err := readGroupRecords(rows, len(items))
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return groupRecordsError(err)
	}
	return resolveGroupRecords(items, outs, res, newJob)
}

// groupRecordsArgs fills in each item's revision, job and sealed text and
// returns qGroupRecords (qGroupRecordsEnqueue with enq) and its arguments.
func (db *DB) groupRecordsArgs(items []*groupItem, enq *Enqueue) (string, []any, error) {
	texts := make([]string, len(items))
	metas := make([]string, len(items))
	for k, it := range items {
		it.contentSHA = db.blind(hashContent, it.p.Text.SHA256())
		it.revision = it.p.Revision
		if it.p.Revisions == stet.RevisionsContent && it.newReport {
			it.revision = 1 // a report created here has no revisions yet
		}
		it.extraction = (&stet.Profile{ID: it.p.ProfileID, Version: it.p.ProfileVersion}).ExtractionVersion()
		it.jobID = stet.NewID(prefixJob, it.p.Now)
		var metadata sql.NullString
		if len(it.p.Metadata) > 0 {
			metadata = sql.NullString{String: string(it.p.Metadata), Valid: true}
		}
		binding := RevisionBinding("", it.reportID, it.contentSHA)
		var err error
		if texts[k], err = sealString(it.dk, colRevisionText, binding, it.p.Text.Reveal()); err != nil {
			return "", nil, err
		}
		if metadata, err = sealValue(it.dk, colRevisionMetadata, binding, metadata); err != nil {
			return "", nil, err
		}
		metas[k] = metadata.String // NULL travels as '' (a stored value is never empty)
	}
	query, args := qGroupRecords, []any{
		column(items, func(it *groupItem) int64 { return it.reportKey }),
		column(items, func(it *groupItem) int64 { return it.revision }),
		column(items, func(it *groupItem) bool { return it.p.Revisions == stet.RevisionsContent && !it.newReport }),
		column(items, func(it *groupItem) []byte { return sha(it.contentSHA) }),
		texts, metas,
		column(items, func(it *groupItem) string { return it.p.PolicyHash }),
		column(items, func(it *groupItem) string { return it.p.ProfileID }),
		column(items, func(it *groupItem) int64 { return int64(it.p.ProfileVersion) }),
		column(items, func(it *groupItem) int64 { return it.now }),
		column(items, func(it *groupItem) []byte { return pub(it.jobID) }),
		column(items, func(it *groupItem) string { return it.p.TenantID }),
		column(items, func(it *groupItem) string { return it.p.SourceID }),
		column(items, func(it *groupItem) string { return it.extraction }),
		column(items, func(it *groupItem) string {
			if it.p.Mode == stet.ModeBatch {
				return string(stet.ModeBatch)
			}
			return string(stet.ModeSync)
		}),
		column(items, func(it *groupItem) string { return it.p.DeliveryKey }),
		column(items, func(it *groupItem) []byte { return sha(it.body) }),
		column(items, func(it *groupItem) string {
			if !it.newReport {
				return "" // only a report created here needs the recheck
			}
			return it.tomb
		}),
		column(items, func(it *groupItem) bool { return it.p.Revisions == stet.RevisionsContent }),
		column(items, func(it *groupItem) string { return it.jobID }),
		sealedBits(db), // $21: the texts and metadata are sealed (1), the hashes blind (4)
	}
	if enq != nil {
		query = qGroupRecordsEnqueue
		args = append(args, column(items, func(it *groupItem) string { return it.meta }),
			enq.Kind, enq.Queue, enq.Priority, enq.MaxAttempts)
	}
	return query, args, nil
}

// groupOutcome is one row of qGroupRecords.
type groupOutcome struct {
	revision, revKey    int64
	gone, newJob, recpt bool
	sha, jobID, state   string
}

func readGroupRecords(rows rowReader, n int) ([]groupOutcome, error) {
	outs := make([]groupOutcome, n)
	seen := 0
	for rows.Next() {
		var ord int64
		var o groupOutcome
		// The last three columns are the check's inputs and result
		// (stet_group_retry in the select list measured faster than in a
		// WHERE clause).
		var content []byte
		var contentRevisions, retry bool
		if err := rows.Scan(&ord, &o.revision, &o.gone, &o.revKey, shaScan{&o.sha}, jobPub(&o.jobID), &o.newJob, &o.state, &o.recpt,
			&content, &contentRevisions, &retry); err != nil {
			return nil, err
		}
		if ord < 1 || ord > int64(n) {
			return nil, fmt.Errorf("row %d for %d items", ord, n)
		}
		outs[ord-1] = o
		seen++
	}
	if seen != n {
		return nil, fmt.Errorf("%d rows for %d items", seen, n)
	}
	return outs, nil
}

// resolveGroupRecords turns qGroupRecords' rows into outcomes (newJob may
// be nil). Its retries are those stet_group_retry raises in the statement
// itself; they stay here as the statement's contract, checked in Go.
func resolveGroupRecords(items []*groupItem, outs []groupOutcome, res []AcceptResult, newJob []bool) error {
	for k, it := range items {
		o := outs[k]
		switch {
		case o.gone:
			// A deletion that committed since qGroupReports started freed
			// an identity hash: run the group again item by item, and its
			// first step answers gone.
			return ErrRetryItem
		case o.revKey == 0:
			return errGroupMiss
		}
		it.revision = o.revision
		if o.sha != it.contentSHA {
			if it.p.Revisions == stet.RevisionsContent {
				// Another delivery took this number for other content.
				return ErrRetryItem
			}
			res[it.i] = AcceptResult{Outcome: OutcomeRevisionConflict, ReportID: it.reportID, Revision: it.revision}
			continue
		}
		switch {
		case o.jobID == "":
			return errGroupMiss
		case !o.recpt:
			return ErrRetryItem // a concurrent delivery with the same webhook-id won
		}
		outcome := OutcomeAccepted
		if !o.newJob {
			outcome = OutcomeDuplicate
		}
		res[it.i] = AcceptResult{Outcome: outcome, JobID: o.jobID, ReportID: it.reportID, Revision: it.revision, State: stet.JobState(o.state)}
		if newJob != nil {
			newJob[it.i] = o.newJob
		}
	}
	return nil
}

// keep returns the items not marked done, in order.
func keep(items []*groupItem, done []bool) []*groupItem {
	out := items[:0:0]
	for k, it := range items {
		if !done[k] {
			out = append(out, it)
		}
	}
	return out
}
