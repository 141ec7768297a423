package ledger

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/boundary"
)

// Set-based intake statements (PostgreSQL): one statement per table for a
// whole group, its rows passed as arrays and unnested in the group's order.
var (
	// The tombstone and the receipt of every item, in one round trip.
	qGroupLookup = `SELECT u.ord,
			EXISTS (SELECT 1 FROM tombstones t WHERE t.identity_hash = u.th AND t.expires_at > u.at),
			COALESCE(d.body_sha256, ''), COALESCE(d.job_id, ''), COALESCE(d.report_id, ''), COALESCE(d.revision, 0),
			COALESCE(j.state, '')
		FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[]) WITH ORDINALITY AS u(th, at, s, k, ord)
		LEFT JOIN deliveries d ON d.source_id = u.s AND d.delivery_key = u.k
		LEFT JOIN jobs j ON j.id = d.job_id
		WHERE d.source_id IS NOT NULL
			OR EXISTS (SELECT 1 FROM tombstones t WHERE t.identity_hash = u.th AND t.expires_at > u.at)`
	// Insert or take each report row, in the group's (lock) order: a row
	// that exists is locked and touched as qLockLiveReport does, unless it
	// was deleted (then it is not returned: gone).
	qGroupReports = `INSERT INTO reports (id, tenant_id, source_id, external_id, identity_hash, created_at, updated_at)
		SELECT u.id, u.t, u.s, NULLIF(u.e, ''), u.h, u.at, u.at
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[]) WITH ORDINALITY AS u(id, t, s, e, h, at, ord)
		ORDER BY u.ord
		ON CONFLICT (tenant_id, source_id, identity_hash) DO UPDATE SET updated_at = EXCLUDED.updated_at
			WHERE reports.deleted_at IS NULL
		RETURNING id, tenant_id, source_id, identity_hash`
	qGroupTombstones = `SELECT u.ord FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(th, at, ord)
		WHERE EXISTS (SELECT 1 FROM tombstones t WHERE t.identity_hash = u.th AND t.expires_at > u.at)`
	qGroupRevisionNumbers = `SELECT u.ord,
			COALESCE((SELECT r.revision FROM revisions r WHERE r.report_id = u.rep AND r.content_sha256 = u.c ORDER BY r.revision LIMIT 1), 0),
			(SELECT COALESCE(MAX(r.revision), 0) + 1 FROM revisions r WHERE r.report_id = u.rep)
		FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(rep, c, ord)`
	qGroupRevisions = `INSERT INTO revisions (id, report_id, revision, content_sha256, text, metadata,
			policy_id, policy_hash, profile_id, profile_version, received_at)
		SELECT u.id, u.rep, u.rev, u.c, u.txt, NULLIF(u.m, ''), u.pid, u.ph, u.prof, u.pv, u.at
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[],
			$7::text[], $8::text[], $9::text[], $10::bigint[], $11::bigint[])
			WITH ORDINALITY AS u(id, rep, rev, c, txt, m, pid, ph, prof, pv, at, ord)
		ORDER BY u.ord
		ON CONFLICT (report_id, revision) DO NOTHING RETURNING id`
	qGroupRevisionByNumber = `SELECT u.ord, r.id, r.content_sha256
		FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(rep, rev, ord)
		JOIN revisions r ON r.report_id = u.rep AND r.revision = u.rev`
	qGroupJobs = `INSERT INTO jobs (id, revision_id, report_id, tenant_id, source_id, revision,
			extraction_version, state, attempt, created_at, updated_at, mode)
		SELECT u.id, u.rv, u.rep, u.t, u.s, u.rev, u.ev, 'accepted', 0, u.at, u.at, u.mode
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::bigint[], $9::text[])
			WITH ORDINALITY AS u(id, rv, rep, t, s, rev, ev, at, mode, ord)
		ORDER BY u.ord
		ON CONFLICT (revision_id, extraction_version) DO NOTHING RETURNING id`
	qGroupJobByRevision = `SELECT u.ord, j.id, j.state
		FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(rv, ev, ord)
		JOIN jobs j ON j.revision_id = u.rv AND j.extraction_version = u.ev`
	qGroupDeliveries = `INSERT INTO deliveries (source_id, delivery_key, body_sha256, job_id, report_id, revision, received_at)
		SELECT u.s, u.k, u.b, u.j, u.rep, u.rev, u.at
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[])
			WITH ORDINALITY AS u(s, k, b, j, rep, rev, at, ord)
		ORDER BY u.ord
		ON CONFLICT (source_id, delivery_key) DO NOTHING RETURNING source_id, delivery_key`
)

// groupItem is one delivery of a set-based group on its way through.
type groupItem struct {
	i        int // index into the group
	p        *AcceptParams
	identity string
	now      int64
	dk       *boundary.DataKey

	reportID   string
	newReport  bool
	contentSHA string
	revision   int64
	revisionID string
	extraction string
	jobID      string
	newJob     bool
	state      stet.JobState
}

// AcceptGroup records a group of deliveries inside tx on PostgreSQL with
// one multi-row statement per table instead of Accept's statements per
// delivery, with Accept's outcomes exactly. ps must be in lock order (by
// tenant, source and identity hash), as the caller takes report rows in
// that order; the items that share an identity or webhook-id with an
// earlier item of the group run as a second set after the first, so that
// they see the earlier items' rows as they would one by one.
//
// Any error (ErrRetryItem included) leaves tx unusable for the group: the
// caller rolls back and runs the group again, item by item under
// savepoints with Accept.
func (db *DB) AcceptGroup(ctx context.Context, tx Querier, ps []AcceptParams) ([]AcceptResult, []bool, error) {
	res := make([]AcceptResult, len(ps))
	newJob := make([]bool, len(ps))
	var set []*groupItem
	var later []int
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
			set = append(set, &groupItem{i: i, p: p, identity: identity, now: micros(p.Now)})
		}
		seenIdentity[ik], seenDelivery[dkey] = true, true
	}
	if err := db.acceptSet(ctx, tx, set, res, newJob); err != nil {
		return nil, nil, err
	}
	if len(later) == 0 {
		return res, newJob, nil
	}
	// The items that share a key with an earlier one run as a set of their
	// own after the first, which they then see as Accept would.
	rest := make([]AcceptParams, len(later))
	for k, i := range later {
		rest[k] = ps[i]
	}
	r, nj, err := db.AcceptGroup(ctx, tx, rest)
	if err != nil {
		return nil, nil, err
	}
	for k, i := range later {
		res[i], newJob[i] = r[k], nj[k]
	}
	return res, newJob, nil
}

// column builds one array argument from the items.
func column[T any](items []*groupItem, f func(*groupItem) T) []T {
	out := make([]T, len(items))
	for i, it := range items {
		out[i] = f(it)
	}
	return out
}

func (db *DB) acceptSet(ctx context.Context, tx Querier, items []*groupItem, res []AcceptResult, newJob []bool) error {
	if len(items) == 0 {
		return nil
	}
	// 0-1. Tombstones and receipts.
	done := make([]bool, len(items))
	{
		rows, err := tx.QueryContext(ctx, qGroupLookup,
			column(items, func(it *groupItem) string { return TombstoneHash(it.p.TenantID, it.p.SourceID, it.identity) }),
			column(items, func(it *groupItem) int64 { return it.now }),
			column(items, func(it *groupItem) string { return it.p.SourceID }),
			column(items, func(it *groupItem) string { return it.p.DeliveryKey }))
		if err != nil {
			return fmt.Errorf("read deliveries: %w", err)
		}
		for rows.Next() {
			var ord, revision int64
			var gone bool
			var bodySHA, jobID, reportID, state string
			if err := rows.Scan(&ord, &gone, &bodySHA, &jobID, &reportID, &revision, &state); err != nil {
				rows.Close()
				return fmt.Errorf("read deliveries: %w", err)
			}
			it := items[ord-1]
			done[ord-1] = true
			switch {
			case gone:
				res[it.i] = AcceptResult{Outcome: OutcomeGone}
			case bodySHA != it.p.BodySHA256:
				res[it.i] = AcceptResult{Outcome: OutcomeDeliveryConflict}
			case state == "":
				rows.Close()
				return fmt.Errorf("read job state: %w", sql.ErrNoRows)
			default:
				res[it.i] = AcceptResult{Outcome: OutcomeDuplicate, JobID: jobID, ReportID: reportID, Revision: revision, State: stet.JobState(state)}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read deliveries: %w", err)
		}
		items = keep(items, done)
	}
	if len(items) == 0 {
		return nil
	}

	// 2. The reports, inserted or taken in lock order.
	{
		for _, it := range items {
			it.reportID = stet.NewID("rep", it.p.Now)
		}
		byKey := make(map[string]*groupItem, len(items))
		for _, it := range items {
			byKey[it.p.TenantID+"\x00"+it.p.SourceID+"\x00"+it.identity] = it
		}
		proposed := column(items, func(it *groupItem) string { return it.reportID })
		rows, err := tx.QueryContext(ctx, qGroupReports, proposed,
			column(items, func(it *groupItem) string { return it.p.TenantID }),
			column(items, func(it *groupItem) string { return it.p.SourceID }),
			column(items, func(it *groupItem) string { return it.p.ExternalID }),
			column(items, func(it *groupItem) string { return it.identity }),
			column(items, func(it *groupItem) int64 { return it.now }))
		if err != nil {
			return fmt.Errorf("insert report: %w", err)
		}
		live := map[*groupItem]bool{}
		for rows.Next() {
			var id, tenant, source, identity string
			if err := rows.Scan(&id, &tenant, &source, &identity); err != nil {
				rows.Close()
				return fmt.Errorf("insert report: %w", err)
			}
			it := byKey[tenant+"\x00"+source+"\x00"+identity]
			if it == nil {
				rows.Close()
				return fmt.Errorf("insert report: unexpected row")
			}
			it.newReport = id == it.reportID
			it.reportID = id
			live[it] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("insert report: %w", err)
		}
		done = make([]bool, len(items))
		var created []*groupItem
		for k, it := range items {
			switch {
			case !live[it]:
				// The report exists and was deleted.
				res[it.i] = AcceptResult{Outcome: OutcomeGone}
				done[k] = true
			case it.newReport:
				created = append(created, it)
			}
		}
		// A deletion that committed since step 0 freed an identity hash:
		// run the group again item by item, and step 0 answers gone.
		if len(created) > 0 {
			rows, err := tx.QueryContext(ctx, qGroupTombstones,
				column(created, func(it *groupItem) string { return TombstoneHash(it.p.TenantID, it.p.SourceID, it.identity) }),
				column(created, func(it *groupItem) int64 { return it.now }))
			if err != nil {
				return fmt.Errorf("read tombstone: %w", err)
			}
			hit := rows.Next()
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("read tombstone: %w", err)
			}
			if hit {
				return ErrRetryItem
			}
		}
		items = keep(items, done)
		// The data keys (encryption on): one per report, as Accept.
		if db.keys != nil {
			for _, it := range items {
				var err error
				if it.newReport {
					it.dk, err = db.newReportKey(ctx, tx, it.reportID, it.p.Now)
				} else {
					it.dk, err = db.writeKey(ctx, tx, it.reportID, it.p.Now)
				}
				if err != nil {
					return err
				}
			}
		}
	}
	if len(items) == 0 {
		return nil
	}

	// 3. The revisions.
	{
		var lookup []*groupItem
		for _, it := range items {
			it.contentSHA = it.p.Text.SHA256()
			it.revision = it.p.Revision
			if it.p.Revisions == stet.RevisionsContent {
				if it.newReport {
					it.revision = 1 // a report created here has no revisions yet
				} else {
					lookup = append(lookup, it)
				}
			}
		}
		if len(lookup) > 0 {
			rows, err := tx.QueryContext(ctx, qGroupRevisionNumbers,
				column(lookup, func(it *groupItem) string { return it.reportID }),
				column(lookup, func(it *groupItem) string { return it.contentSHA }))
			if err != nil {
				return fmt.Errorf("read revision: %w", err)
			}
			for rows.Next() {
				var ord, existing, next int64
				if err := rows.Scan(&ord, &existing, &next); err != nil {
					rows.Close()
					return fmt.Errorf("read revision: %w", err)
				}
				it := lookup[ord-1]
				// The same content as any earlier revision is that
				// revision: a late replay must not become a new revision.
				if existing > 0 {
					it.revision = existing
				} else {
					it.revision = next
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("read revision: %w", err)
			}
		}
		texts := make([]string, len(items))
		metas := make([]string, len(items))
		for k, it := range items {
			it.revisionID = stet.NewID("rev", it.p.Now)
			var metadata sql.NullString
			if len(it.p.Metadata) > 0 {
				metadata = sql.NullString{String: string(it.p.Metadata), Valid: true}
			}
			var err error
			if texts[k], err = sealString(it.dk, colRevisionText, it.revisionID, it.p.Text.Reveal()); err != nil {
				return err
			}
			if metadata, err = seal(it.dk, colRevisionMetadata, it.revisionID, metadata); err != nil {
				return err
			}
			metas[k] = metadata.String // NULL travels as '' (a stored value is never empty)
		}
		rows, err := tx.QueryContext(ctx, qGroupRevisions,
			column(items, func(it *groupItem) string { return it.revisionID }),
			column(items, func(it *groupItem) string { return it.reportID }),
			column(items, func(it *groupItem) int64 { return it.revision }),
			column(items, func(it *groupItem) string { return it.contentSHA }),
			texts, metas,
			column(items, func(it *groupItem) string { return it.p.PolicyID }),
			column(items, func(it *groupItem) string { return it.p.PolicyHash }),
			column(items, func(it *groupItem) string { return it.p.ProfileID }),
			column(items, func(it *groupItem) int64 { return int64(it.p.ProfileVersion) }),
			column(items, func(it *groupItem) int64 { return it.now }))
		if err != nil {
			return fmt.Errorf("insert revision: %w", err)
		}
		inserted := map[string]bool{}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("insert revision: %w", err)
			}
			inserted[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("insert revision: %w", err)
		}
		var taken []*groupItem
		for _, it := range items {
			if !inserted[it.revisionID] {
				taken = append(taken, it)
			}
		}
		done = make([]bool, len(items))
		if len(taken) > 0 {
			index := map[*groupItem]int{}
			for k, it := range items {
				index[it] = k
			}
			found := make([]bool, len(taken))
			rows, err := tx.QueryContext(ctx, qGroupRevisionByNumber,
				column(taken, func(it *groupItem) string { return it.reportID }),
				column(taken, func(it *groupItem) int64 { return it.revision }))
			if err != nil {
				return fmt.Errorf("read revision: %w", err)
			}
			for rows.Next() {
				var ord int64
				var id, sha string
				if err := rows.Scan(&ord, &id, &sha); err != nil {
					rows.Close()
					return fmt.Errorf("read revision: %w", err)
				}
				it := taken[ord-1]
				found[ord-1] = true
				it.revisionID = id
				if sha != it.contentSHA {
					if it.p.Revisions == stet.RevisionsContent {
						// Another delivery took this number for other content.
						rows.Close()
						return ErrRetryItem
					}
					res[it.i] = AcceptResult{Outcome: OutcomeRevisionConflict, ReportID: it.reportID, Revision: it.revision}
					done[index[it]] = true
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("read revision: %w", err)
			}
			for _, f := range found {
				if !f {
					return fmt.Errorf("read revision: %w", sql.ErrNoRows)
				}
			}
		}
		items = keep(items, done)
	}
	if len(items) == 0 {
		return nil
	}

	// 4. The jobs: one per revision and extraction version.
	{
		for _, it := range items {
			it.extraction = (&stet.Profile{ID: it.p.ProfileID, Version: it.p.ProfileVersion}).ExtractionVersion()
			it.jobID = stet.NewID("job", it.p.Now)
			it.state = stet.JobAccepted
		}
		rows, err := tx.QueryContext(ctx, qGroupJobs,
			column(items, func(it *groupItem) string { return it.jobID }),
			column(items, func(it *groupItem) string { return it.revisionID }),
			column(items, func(it *groupItem) string { return it.reportID }),
			column(items, func(it *groupItem) string { return it.p.TenantID }),
			column(items, func(it *groupItem) string { return it.p.SourceID }),
			column(items, func(it *groupItem) int64 { return it.revision }),
			column(items, func(it *groupItem) string { return it.extraction }),
			column(items, func(it *groupItem) int64 { return it.now }),
			column(items, func(it *groupItem) string {
				if it.p.Mode == stet.ModeBatch {
					return string(stet.ModeBatch)
				}
				return string(stet.ModeSync)
			}))
		if err != nil {
			return fmt.Errorf("insert job: %w", err)
		}
		inserted := map[string]bool{}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("insert job: %w", err)
			}
			inserted[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("insert job: %w", err)
		}
		var taken []*groupItem
		for _, it := range items {
			if inserted[it.jobID] {
				it.newJob = true
			} else {
				taken = append(taken, it)
			}
		}
		if len(taken) > 0 {
			found := make([]bool, len(taken))
			rows, err := tx.QueryContext(ctx, qGroupJobByRevision,
				column(taken, func(it *groupItem) string { return it.revisionID }),
				column(taken, func(it *groupItem) string { return it.extraction }))
			if err != nil {
				return fmt.Errorf("read job: %w", err)
			}
			for rows.Next() {
				var ord int64
				var id, state string
				if err := rows.Scan(&ord, &id, &state); err != nil {
					rows.Close()
					return fmt.Errorf("read job: %w", err)
				}
				it := taken[ord-1]
				found[ord-1] = true
				it.jobID, it.state = id, stet.JobState(state)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("read job: %w", err)
			}
			for _, f := range found {
				if !f {
					return fmt.Errorf("read job: %w", sql.ErrNoRows)
				}
			}
		}
	}

	// 5. The receipts, so the same webhook-id answers the same.
	{
		rows, err := tx.QueryContext(ctx, qGroupDeliveries,
			column(items, func(it *groupItem) string { return it.p.SourceID }),
			column(items, func(it *groupItem) string { return it.p.DeliveryKey }),
			column(items, func(it *groupItem) string { return it.p.BodySHA256 }),
			column(items, func(it *groupItem) string { return it.jobID }),
			column(items, func(it *groupItem) string { return it.reportID }),
			column(items, func(it *groupItem) int64 { return it.revision }),
			column(items, func(it *groupItem) int64 { return it.now }))
		if err != nil {
			return fmt.Errorf("insert delivery: %w", err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("insert delivery: %w", err)
		}
		if n != len(items) {
			return ErrRetryItem // a concurrent delivery with the same webhook-id won
		}
	}
	for _, it := range items {
		outcome := OutcomeAccepted
		if !it.newJob {
			outcome = OutcomeDuplicate
		}
		res[it.i] = AcceptResult{Outcome: outcome, JobID: it.jobID, ReportID: it.reportID, Revision: it.revision, State: it.state}
		newJob[it.i] = it.newJob
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
