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
	"github.com/stetlabs/stet/seal"
)

// Set-based intake statements (PostgreSQL): two statements for a whole
// group, its rows passed as arrays and unnested in the group's order, each
// table's rows written by one data-modifying CTE. A CTE's lookups see the
// statement's snapshot, not rows committed after it started nor rows the
// statement itself inserts; a lookup that misses a row its insert found
// taken returns an empty column, and the group runs again item by item.
// Each lookup is a LATERAL subquery with LIMIT 1, so that it stays one
// index probe per item: a join would let the planner hash a whole table
// whose statistics are stale (a fresh ledger filling up). The arrays are
// unnested from a materialized row rather than from the parameters, so
// the row estimate does not depend on their values: PostgreSQL then plans
// each statement once per connection (a generic plan) instead of at every
// execution, which for these statements cost more than executing them.
var (
	// The tombstone and the receipt of every item, then the report rows of
	// the items neither answers: inserted or taken in the group's (lock)
	// order. A row that exists is locked and touched as qLockLiveReport
	// does, unless it was deleted (then no id comes back: gone).
	qGroupReports = `WITH a AS MATERIALIZED (
			SELECT $1::text[] AS a1, $2::bigint[] AS a2, $3::text[] AS a3, $4::text[] AS a4, $5::bytea[] AS a5,
				$6::text[] AS a6, $7::text[] AS a7, $8::bytea[] AS a8, $9::int AS blind),
		u AS (
			SELECT u.* FROM a, unnest(a.a1, a.a2, a.a3, a.a4, a.a5, a.a6, a.a7, a.a8)
				WITH ORDINALITY AS u(th, at, s, k, id, t, e, h, ord)),
		l AS (
			SELECT u.ord,
				EXISTS (SELECT 1 FROM tombstones t WHERE t.identity_hash = u.th AND t.expires_at > u.at) AS gone,
				d.source_id IS NOT NULL AS found,
				d.body_sha256 AS b, jb.public_id AS j, rp.public_id AS rep,
				COALESCE(d.revision, 0) AS rev, COALESCE(jb.state, '') AS state
			FROM u
			LEFT JOIN LATERAL (SELECT * FROM deliveries d WHERE d.source_id = u.s AND d.delivery_key = u.k LIMIT 1) d ON true
			LEFT JOIN LATERAL (SELECT jb.state, jb.public_id FROM jobs jb WHERE jb.id = d.job_id LIMIT 1) jb ON true
			LEFT JOIN LATERAL (SELECT rp.public_id FROM reports rp WHERE rp.id = d.report_id LIMIT 1) rp ON true),
		ins AS (
			INSERT INTO reports (public_id, tenant_id, source_id, external_id, identity_hash, created_at, updated_at,
				sealed, tombstone_hash)
			SELECT u.id, u.t, u.s, NULLIF(u.e, ''), u.h, u.at, u.at,
				-- sealedBlind, and sealedExternalID for an external ID sealed;
				-- with the hashes blind, the tombstone kept (blindindex.go)
				(a.blind & 4) + CASE WHEN u.e <> '' THEN a.blind & 1 ELSE 0 END,
				CASE WHEN (a.blind & 4) <> 0 THEN decode(u.th, 'hex') END
			FROM a, u JOIN l ON l.ord = u.ord
			WHERE NOT l.gone AND NOT l.found
			ORDER BY u.ord
			ON CONFLICT (tenant_id, source_id, identity_hash) DO UPDATE SET updated_at = EXCLUDED.updated_at
				WHERE reports.deleted_at IS NULL
			RETURNING id, public_id, tenant_id, source_id, identity_hash)
		SELECT l.ord, l.gone, l.found, l.b, l.j, l.rep, l.rev, l.state, ins.id, ins.public_id
		FROM u JOIN l ON l.ord = u.ord
		LEFT JOIN ins ON ins.tenant_id = u.t AND ins.source_id = u.s AND ins.identity_hash = u.h
		ORDER BY l.ord`
	// For the items with a live report: a tombstone recheck of the reports
	// just created (a deletion that committed since qGroupReports started
	// is seen here), the revision number (content revisions of an existing
	// report: an earlier revision with the same content, else the next),
	// then the revisions, jobs and receipts. A revision number taken for
	// other content gets no job and no receipt. Each row goes through
	// stet_group_retry (migration 0013), which raises SQLSTATE ST001 for an
	// item whose outcome needs the group to run again item by item, so that
	// a COMMIT sent behind the statement does not commit the group.
	qGroupRecords = groupRecords("")
	// qGroupRecordsEnqueue is qGroupRecords that also enqueues River's job
	// for each job it creates (a sync job: a batch job waits for assembly),
	// as River's own multi-row insert would, but in the same statement
	// instead of a round trip of its own: its args name the ledger job, its
	// metadata comes from $22 (one per item, '' for none), its kind, queue,
	// priority and attempts from $23-$26; River's column defaults do the
	// rest (state available, scheduled now). No insert notification goes
	// with it: stet's River client polls (riverdatabasesql has no
	// listener), so nothing would hear one.
	qGroupRecordsEnqueue = groupRecords(`,
		b AS MATERIALIZED (SELECT $22::text[] AS m),
		qm AS (SELECT q.* FROM b, unnest(b.m) WITH ORDINALITY AS q(meta, ord)),
		iq AS (
			INSERT INTO river_job (args, kind, max_attempts, metadata, priority, queue)
			SELECT jsonb_build_object('job_id', n.jname), $23::text, $26::smallint,
				COALESCE(NULLIF(qm.meta, '')::jsonb, '{}'::jsonb), $25::smallint, $24::text
			FROM n JOIN ij ON ij.public_id = n.jid JOIN qm ON qm.ord = n.ord
			WHERE n.mode <> 'batch'
			ORDER BY n.ord)`)
)

// groupRecords is qGroupRecords with the CTEs extra (each after a comma)
// added after its own.
func groupRecords(extra string) string {
	return `WITH a AS MATERIALIZED (
			SELECT $1::bigint[] AS a1, $2::bigint[] AS a2, $3::bool[] AS a3, $4::bytea[] AS a4, $5::text[] AS a5,
				$6::text[] AS a6, $7::text[] AS a7, $8::text[] AS a8, $9::bigint[] AS a9, $10::bigint[] AS a10,
				$11::bytea[] AS a11, $12::text[] AS a12, $13::text[] AS a13, $14::text[] AS a14, $15::text[] AS a15,
				$16::text[] AS a16, $17::bytea[] AS a17, $18::text[] AS a18, $19::bool[] AS a19, $20::text[] AS a20),
		u AS (
			SELECT u.* FROM a, unnest(a.a1, a.a2, a.a3, a.a4, a.a5, a.a6, a.a7, a.a8, a.a9, a.a10,
				a.a11, a.a12, a.a13, a.a14, a.a15, a.a16, a.a17, a.a18, a.a19, a.a20)
				WITH ORDINALITY AS u(rep, rev0, look, c, txt, m, ph, prof, pv, at, jid, t, s, ev, mode, k, b, th, cr, jname, ord)),
		n AS (
			SELECT u.*, CASE WHEN u.look THEN COALESCE(
					(SELECT r.revision FROM revisions r WHERE r.report_id = u.rep AND r.content_sha256 = u.c ORDER BY r.revision LIMIT 1),
					(SELECT COALESCE(MAX(r.revision), 0) + 1 FROM revisions r WHERE r.report_id = u.rep))
				ELSE u.rev0 END AS rev,
				(SELECT p.id FROM policy_versions p WHERE p.hash = u.ph) AS pver
			FROM u),
		ir AS (
			INSERT INTO revisions (report_id, revision, content_sha256, text, metadata,
				policy_version, profile_id, profile_version, received_at, sealed)
			SELECT n.rep, n.rev, n.c, n.txt, NULLIF(n.m, ''), n.pver, n.prof, n.pv, n.at,
				($21::int & 5) + CASE WHEN ($21::int & 1) <> 0 AND n.m <> '' THEN 2 ELSE 0 END -- sealedText, sealedBlind, sealedMetadata
			FROM n ORDER BY n.ord
			ON CONFLICT (report_id, revision) DO NOTHING RETURNING id, report_id, revision),
		rv AS (
			SELECT n.ord, COALESCE(ir.id, r.id) AS id, CASE WHEN ir.id IS NOT NULL THEN n.c ELSE r.content_sha256 END AS sha
			FROM n LEFT JOIN ir ON ir.report_id = n.rep AND ir.revision = n.rev
			LEFT JOIN LATERAL (SELECT r.id, r.content_sha256 FROM revisions r
				WHERE ir.id IS NULL AND r.report_id = n.rep AND r.revision = n.rev LIMIT 1) r ON true),
		ij AS (
			INSERT INTO jobs (public_id, revision_id, report_id, tenant_id, source_id, revision,
				extraction_version, state, attempt, created_at, updated_at, mode)
			SELECT n.jid, rv.id, n.rep, n.t, n.s, n.rev, n.ev, 'accepted', 0, n.at, n.at, n.mode
			FROM n JOIN rv ON rv.ord = n.ord
			WHERE rv.id IS NOT NULL AND rv.sha = n.c
			ORDER BY n.ord
			ON CONFLICT (revision_id, extraction_version) DO NOTHING RETURNING id, public_id),
		jb AS (
			SELECT n.ord, COALESCE(ij.id, j.id) AS id, COALESCE(ij.public_id, j.public_id) AS pid,
				ij.id IS NOT NULL AS new, COALESCE(j.state, 'accepted') AS state
			FROM n JOIN rv ON rv.ord = n.ord
			LEFT JOIN ij ON ij.public_id = n.jid
			LEFT JOIN LATERAL (SELECT j.id, j.public_id, j.state FROM jobs j
				WHERE ij.id IS NULL AND j.revision_id = rv.id AND j.extraction_version = n.ev LIMIT 1) j ON true
			WHERE rv.id IS NOT NULL AND rv.sha = n.c),
		idl AS (
			INSERT INTO deliveries (source_id, delivery_key, body_sha256, job_id, report_id, revision, received_at, sealed)
			SELECT n.s, n.k, n.b, jb.id, n.rep, n.rev, n.at, $21::int & 4 -- sealedBlind
			FROM n JOIN jb ON jb.ord = n.ord
			WHERE jb.id IS NOT NULL
			ORDER BY n.ord
			ON CONFLICT (source_id, delivery_key) DO NOTHING RETURNING source_id, delivery_key)` + extra + `
		SELECT f.*, stet_group_retry(f.gone OR f.rid = 0 OR (f.sha <> f.c AND f.cr)
				OR (f.sha = f.c AND (f.jid IS NULL OR NOT f.recpt)))
		FROM (SELECT n.ord, n.rev,
				n.th <> '' AND EXISTS (SELECT 1 FROM tombstones t WHERE t.identity_hash = n.th AND t.expires_at > n.at) AS gone,
				COALESCE(rv.id, 0) AS rid, COALESCE(rv.sha, ''::bytea) AS sha,
				jb.pid AS jid, COALESCE(jb.new, false) AS new, COALESCE(jb.state, '') AS state,
				EXISTS (SELECT 1 FROM idl WHERE idl.source_id = n.s AND idl.delivery_key = n.k) AS recpt,
				n.c, n.cr
			FROM n LEFT JOIN rv ON rv.ord = n.ord LEFT JOIN jb ON jb.ord = n.ord) f
		ORDER BY f.ord`
}

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
	if !db.pipelines(ps, enq) {
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
