package postgres

// Set-based intake statements (PostgreSQL): two statements for a whole
// group, its rows passed as arrays and unnested in the group's order, each
// table's rows written by one data-modifying CTE. A CTE's lookups see the
// statement's snapshot, not rows committed after it started nor rows the
// statement itself inserts; a lookup that misses a row its insert found
// taken returns an empty column, and the group runs again item by item.
// The ledger (ledger/accept_pg.go) binds their arguments: $21 of
// GroupRecords carries the ledger's sealed bits (ledger/crypt.go).
// Each lookup is a LATERAL subquery with LIMIT 1, so that it stays one
// index probe per item: a join would let the planner hash a whole table
// whose statistics are stale (a fresh ledger filling up). The arrays are
// unnested from a materialized row rather than from the parameters, so
// the row estimate does not depend on their values: PostgreSQL then plans
// each statement once per connection (a generic plan) instead of at every
// execution, which for these statements cost more than executing them.
var (
	// GroupReports reads the tombstone and the receipt of every item, then
	// inserts or takes the report rows of the items neither answers, in the
	// group's (lock) order. A row that exists is locked and touched as the
	// ledger's one-by-one intake does, unless it was deleted (then no id
	// comes back: gone).
	GroupReports = `WITH a AS MATERIALIZED (
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
	// GroupRecords, for the items with a live report: a tombstone recheck
	// of the reports just created (a deletion that committed since
	// GroupReports started is seen here), the revision number (content revisions of an existing
	// report: an earlier revision with the same content, else the next),
	// then the revisions, jobs and receipts. A revision number taken for
	// other content gets no job and no receipt. Each row goes through
	// stet_group_retry (migration 0013), which raises SQLSTATE ST001 for an
	// item whose outcome needs the group to run again item by item, so that
	// a COMMIT sent behind the statement does not commit the group.
	GroupRecords = groupRecords("")
	// GroupRecordsEnqueue is GroupRecords that also enqueues River's job
	// for each job it creates (a sync job: a batch job waits for assembly),
	// as River's own multi-row insert would, but in the same statement
	// instead of a round trip of its own: its args name the ledger job, its
	// metadata comes from $22 (one per item, '' for none), its kind, queue,
	// priority and attempts from $23-$26; River's column defaults do the
	// rest (state available, scheduled now). No insert notification goes
	// with it: stet's River client polls (riverdatabasesql has no
	// listener), so nothing would hear one.
	GroupRecordsEnqueue = groupRecords(`,
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

// groupRecords is GroupRecords with the CTEs extra (each after a comma)
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
