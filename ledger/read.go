package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stetlabs/stet"
)

// JobDetail is a job with its attempts and artifact metadata.
type JobDetail struct {
	Job      stet.Job
	Attempts []stet.Attempt
	Artifact *ArtifactMeta
	// TextPurgedAt is when the revision's text and metadata were purged
	// (retention or deletion); zero while they are kept.
	TextPurgedAt time.Time
	// Deliveries are the outbox rows of the job's review record (docs/design.md §13).
	Deliveries []Delivery
	// Record is the job's review record, without its content; nil before
	// there is one.
	Record *RecordMeta
	// Decisions are the operators' boundary decisions on the job, oldest
	// first (stet reroute).
	Decisions []BoundaryDecision
	// Parts are its parts' jobs, for a job of a profile with parts
	// (docs/design.md §16).
	Parts []PartDetail
	// Audio describes the revision's audio and transcript, for an audio
	// report (docs/design.md §19).
	Audio AudioInfo
}

// AudioInfo is what a revision delivered as audio records: hashes and who
// transcribed it, never the audio or the transcript. Empty for a text
// revision.
type AudioInfo struct {
	AudioSHA256      string
	TranscriptSHA256 string // "" until transcribed
	Transcriber      string
	Model            string
}

// audioColumns reads an AudioInfo from the revision aliased v.
const audioColumns = `COALESCE(v.audio_sha256, ''), COALESCE(v.transcript_sha256, ''), COALESCE(v.transcriber_id, ''), COALESCE(v.transcriber_model, '')`

// audioDest are the scan destinations of audioColumns.
func (a *AudioInfo) dest() []any {
	return []any{&a.AudioSHA256, &a.TranscriptSHA256, &a.Transcriber, &a.Model}
}

// ArtifactMeta describes an artifact without its content.
type ArtifactMeta struct {
	ID             string
	AttemptN       int
	SchemaVersion  string
	Processor      string
	Model          string
	CreatedAt      time.Time
	RawPurged      bool
	RawPurgedAt    time.Time
	OutputPurgedAt time.Time
}

// GetJob reads a job of tenant. An empty tenant finds nothing: it is
// never a wildcard (GetJobAnyTenant is the CLI's).
func (db *DB) GetJob(ctx context.Context, tenant, jobID string) (*JobDetail, error) {
	return getJob(ctx, db.r, tenant, jobID)
}

// GetJobAnyTenant reads a job of any tenant, from the writer pool: for the
// local operator commands (stet inspect), never for the API.
func (db *DB) GetJobAnyTenant(ctx context.Context, jobID string) (*JobDetail, error) {
	return getJobOf(ctx, db.w, anyTenant, jobID)
}

// AnyTenant is the explicit marker of an any-tenant read, for the local
// operator tools and the leader's own work: a value no tenant id can take
// (ids are lowercase letters, digits, '.', '_', '-'). An empty tenant is
// never read as every tenant: the reads below refuse it.
const AnyTenant = "*any*"

const anyTenant = AnyTenant

func getJob(ctx context.Context, q Querier, tenant, jobID string) (*JobDetail, error) {
	if tenant == anyTenant {
		return nil, notFound("job")
	}
	return getJobOf(ctx, q, tenant, jobID)
}

// getJobOf reads a job of tenant, or of any tenant when tenant is anyTenant.
func getJobOf(ctx context.Context, q Querier, tenant, jobID string) (*JobDetail, error) {
	var d JobDetail
	var textPurged, deleted sql.NullInt64
	var jobKey int64
	row := q.QueryRowContext(ctx, `SELECT `+jobColumns+`, v.text_purged_at, rp.deleted_at, j.id, `+audioColumns+` FROM `+jobFrom+`
		WHERE j.public_id = $1 AND ($2 = '*any*' OR j.tenant_id = $2)`, pub(jobID), tenant)
	if _, err := scanJob(row, &d.Job, append([]any{&textPurged, &deleted, &jobKey}, d.Audio.dest()...)...); errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("job")
	} else if err != nil {
		return nil, fmt.Errorf("read job: %w", err)
	}
	if deleted.Valid {
		return nil, ErrGone
	}
	d.TextPurgedAt = fromMicros(textPurged)
	var err error
	if d.Attempts, err = readAttempts(ctx, q, jobKey, jobID); err != nil {
		return nil, err
	}
	var m ArtifactMeta
	var model sql.NullString
	var legacy string
	var created, purged, outPurged sql.NullInt64
	err = q.QueryRowContext(ctx, `SELECT COALESCE(legacy_id, ''), attempt_n, schema_version, processor_id, model, created_at, raw_purged_at, output_purged_at
		FROM artifacts WHERE job_id = $1`, jobKey).Scan(&legacy, &m.AttemptN, &m.SchemaVersion, &m.Processor, &model, &created, &purged, &outPurged)
	switch {
	case err == nil:
		m.ID = ArtifactID(legacy, jobID)
		m.Model, m.CreatedAt, m.RawPurged = model.String, fromMicros(created), purged.Valid
		m.RawPurgedAt, m.OutputPurgedAt = fromMicros(purged), fromMicros(outPurged)
		d.Artifact = &m
	case errors.Is(err, sql.ErrNoRows):
	default:
		return nil, fmt.Errorf("read artifact: %w", err)
	}
	if d.Deliveries, err = JobDeliveries(ctx, q, jobID); err != nil {
		return nil, err
	}
	if d.Decisions, err = boundaryDecisions(ctx, q, jobKey, jobID); err != nil {
		return nil, err
	}
	if d.Record, err = jobRecordMeta(ctx, q, jobID); err != nil {
		return nil, err
	}
	if d.Parts, err = readParts(ctx, q, jobKey); err != nil {
		return nil, err
	}
	return &d, nil
}

// PartDetail is one part's job under a job of a profile with parts.
type PartDetail struct {
	JobID     string
	PartID    string
	State     stet.JobState
	Processor string // of its artifact, or of its last attempt; "" before one
	Attempts  []stet.Attempt
}

// readParts reads the part jobs under the job jobKey, in config order.
func readParts(ctx context.Context, q Querier, jobKey int64) ([]PartDetail, error) {
	rows, err := q.QueryContext(ctx, `SELECT j.id, j.public_id, COALESCE(j.part_id, ''), j.state, COALESCE(a.processor_id, j.processor_id, '')
		FROM jobs j LEFT JOIN artifacts a ON a.job_id = j.id WHERE j.parent_job_id = $1 ORDER BY j.id`, jobKey)
	if err != nil {
		return nil, fmt.Errorf("read parts: %w", err)
	}
	var keys []int64
	var out []PartDetail
	for rows.Next() {
		var p PartDetail
		var key int64
		var state string
		if err := rows.Scan(&key, jobPub(&p.JobID), &p.PartID, &state, &p.Processor); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read parts: %w", err)
		}
		p.State = stet.JobState(state)
		keys, out = append(keys, key), append(out, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read parts: %w", err)
	}
	for i := range out {
		if out[i].Attempts, err = readAttempts(ctx, q, keys[i], out[i].JobID); err != nil {
			return nil, err
		}
		// A part that failed for good has no artifact, and may have lost
		// its processor: its last attempt names the one that refused.
		if n := len(out[i].Attempts); out[i].Processor == "" && n > 0 {
			out[i].Processor = out[i].Attempts[n-1].Processor
		}
	}
	return out, nil
}

// readAttempts reads the attempts of the job jobKey (public ID jobID),
// oldest first.
func readAttempts(ctx context.Context, q Querier, jobKey int64, jobID string) ([]stet.Attempt, error) {
	rows, err := q.QueryContext(ctx, `SELECT a.n, a.token, a.processor_id, a.model, a.request_id, a.status_code, a.status, a.failure_class,
			a.input_tokens, a.output_tokens, a.latency_ms, a.input_sha256, a.started_at, a.batch_id, `+attemptCost+`
		FROM attempts a WHERE a.job_id = $1 ORDER BY a.n`, jobKey)
	if err != nil {
		return nil, fmt.Errorf("read attempts: %w", err)
	}
	defer rows.Close()
	var out []stet.Attempt
	for rows.Next() {
		a := stet.Attempt{JobID: jobID}
		var model, requestID, failure, batchID sql.NullString
		var inputSHA string
		var status string
		var code, inTok, outTok, latency, started sql.NullInt64
		var cost sql.NullFloat64
		if err := rows.Scan(&a.N, &a.Token, &a.Processor, &model, &requestID, &code, &status, &failure,
			&inTok, &outTok, &latency, shaScan{&inputSHA}, &started, &batchID, &cost); err != nil {
			return nil, fmt.Errorf("read attempt: %w", err)
		}
		if cost.Valid {
			a.CostUSD = &cost.Float64
		}
		a.Model, a.RequestID, a.FailureClass, a.InputSHA256 = model.String, requestID.String, stet.FailureClass(failure.String), inputSHA
		a.Status = stet.AttemptStatus(status)
		a.StatusCode, a.InputTokens, a.OutputTokens, a.LatencyMS = int(code.Int64), int(inTok.Int64), int(outTok.Int64), latency.Int64
		a.StartedAt, a.BatchID = fromMicros(started), batchID.String
		out = append(out, a)
	}
	return out, rows.Err()
}

// ReportDetail is a report and its revisions.
type ReportDetail struct {
	Report    stet.Report
	Revisions []RevisionSummary
}

// RevisionSummary is one revision's job and record as the report view shows them.
type RevisionSummary struct {
	Revision       int64
	JobID          string
	State          stet.JobState
	ReviewRecordID string
	Authoritative  bool
	ReceivedAt     time.Time
	TextPurgedAt   time.Time
	Audio          AudioInfo
}

// ReportLookup finds a report by ID, or by source and external ID.
type ReportLookup struct {
	Tenant     string
	ReportID   string
	SourceID   string
	ExternalID string
	Now        time.Time // a tombstone answers 410 until it expires
}

// GetReport reads a report of l.Tenant with its revisions. An empty tenant
// finds nothing.
func (db *DB) GetReport(ctx context.Context, l ReportLookup) (*ReportDetail, error) {
	if l.Tenant == anyTenant {
		return nil, notFound("report")
	}
	return db.getReport(ctx, l)
}

// GetReportAnyTenant reads a report of any tenant (l.Tenant is ignored):
// for the local operator commands, never for the API.
func (db *DB) GetReportAnyTenant(ctx context.Context, l ReportLookup) (*ReportDetail, error) {
	l.Tenant = anyTenant
	return db.getReport(ctx, l)
}

// A report by its external ID's identity hash: for a tenant ($1), with the
// unique (tenant_id, source_id, identity_hash) key's index; for any tenant
// (operator commands only), a scan of that index.
const (
	qReportByExternalID = `SELECT id, public_id, tenant_id, source_id, external_id, identity_hash, created_at, deleted_at, sealed FROM reports
		WHERE tenant_id = $1 AND source_id = $2 AND identity_hash IN ($3, $4)`
	qReportByIdentityAnyTenant = `SELECT id, public_id, tenant_id, source_id, external_id, identity_hash, created_at, deleted_at, sealed FROM reports
		WHERE source_id = $1 AND identity_hash IN ($2, $3)`
)

func (db *DB) getReport(ctx context.Context, l ReportLookup) (*ReportDetail, error) {
	var d ReportDetail
	r := &d.Report
	var ext sql.NullString
	var created, key int64
	var deleted sql.NullInt64
	var sealed int
	var err error
	if l.ReportID != "" {
		err = db.r.QueryRowContext(ctx, `SELECT id, public_id, tenant_id, source_id, external_id, identity_hash, created_at, deleted_at, sealed FROM reports
			WHERE public_id = $1 AND ($2 = '*any*' OR tenant_id = $2)`, pub(l.ReportID), l.Tenant).Scan(&key, reportPub(&r.ID), &r.TenantID, &r.SourceID, &ext, shaScan{&r.IdentityHash}, &created, &deleted, &sealed)
	} else {
		// By the identity hash. The tenant is named in the statement, not
		// through an OR, so that SQLite searches the index instead of
		// scanning it.
		identity := IdentityHash(stet.IdentityExternalID, l.ExternalID, stet.Text{})
		stored, plain := db.forms(hashIdentity, identity)
		var row *sql.Row
		if l.Tenant == anyTenant {
			row = db.r.QueryRowContext(ctx, qReportByIdentityAnyTenant, l.SourceID, sha(stored), sha(plain))
		} else {
			row = db.r.QueryRowContext(ctx, qReportByExternalID, l.Tenant, l.SourceID, sha(stored), sha(plain))
		}
		err = row.Scan(&key, reportPub(&r.ID), &r.TenantID, &r.SourceID, &ext, shaScan{&r.IdentityHash}, &created, &deleted, &sealed)
		if errors.Is(err, sql.ErrNoRows) && l.Tenant != anyTenant {
			// A deleted report has a new identity hash and no external ID
			// any more; its tombstone answers, by hash, until the replay
			// horizon.
			gone, terr := db.tombstoned(ctx, db.r, l.Tenant, l.SourceID, identity, l.Now)
			if terr != nil {
				return nil, terr
			}
			if gone {
				return nil, ErrGone
			}
		}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("report")
	}
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	if deleted.Valid {
		return nil, ErrGone
	}
	if ext, err = db.opener(db.r).open(ctx, r.ID, colExternalID, r.ID, ext, sealed&sealedExternalID); err != nil {
		return nil, err
	}
	r.ExternalID = ext.String
	r.CreatedAt = time.UnixMicro(created).UTC()
	rows, err := db.r.QueryContext(ctx, `SELECT v.revision, j.public_id, j.state, rr.public_id, COALESCE(rr.authoritative, FALSE), v.received_at, v.text_purged_at,
			`+audioColumns+`
		FROM revisions v JOIN jobs j ON j.revision_id = v.id LEFT JOIN review_records rr ON rr.job_id = j.id
		WHERE v.report_id = $1 AND j.parent_job_id IS NULL ORDER BY v.revision, j.created_at`, key)
	if err != nil {
		return nil, fmt.Errorf("read revisions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s RevisionSummary
		var state string
		var received int64
		var purged sql.NullInt64
		if err := rows.Scan(append([]any{&s.Revision, jobPub(&s.JobID), &state, recordPub(&s.ReviewRecordID), &s.Authoritative, &received, &purged},
			s.Audio.dest()...)...); err != nil {
			return nil, fmt.Errorf("read revision: %w", err)
		}
		s.TextPurgedAt = fromMicros(purged)
		s.State, s.ReceivedAt = stet.JobState(state), time.UnixMicro(received).UTC()
		d.Revisions = append(d.Revisions, s)
	}
	return &d, rows.Err()
}

// ReviewFilter selects review records.
type ReviewFilter struct {
	Tenant string
	State  stet.RecordState // empty: any
	Source string
	After  string // cursor: the last record ID of the previous page
	Limit  int
	// Superseded keeps, in a list of pending records, those a newer
	// revision superseded (left out otherwise).
	Superseded bool
}

// recordColumns are a review record's columns, read FROM recordFrom: a
// query names the record's own columns rr.*.
const (
	recordColumns = `rr.public_id, j.public_id, rp.public_id, rr.tenant_id, rr.source_id, rr.revision, rr.kind, rr.state,
	rr.authoritative, rr.classification, rr.failure_class, rr.decision, rr.decided_by, rr.decided_at, rr.note, rr.created_at,
	rr.classification_purged_at, rr.note_purged_at, rr.sealed, rr.failed_part, rr.provenance, rr.reopens,
	EXISTS (SELECT 1 FROM revisions nv WHERE nv.report_id = rr.report_id AND nv.revision > rr.revision)`
	recordFrom = `review_records rr JOIN jobs j ON j.id = rr.job_id JOIN reports rp ON rp.id = rr.report_id`
)

// notDeleted keeps out the records of deleted reports (their rows go with
// the deletion's review_records task; until then they answer 410).
const notDeleted = `rp.deleted_at IS NULL`

// notSuperseded keeps out the records whose report has a newer revision.
const notSuperseded = `NOT EXISTS (SELECT 1 FROM revisions nv WHERE nv.report_id = rr.report_id AND nv.revision > rr.revision)`

// scanRecord scans recordColumns into a record, then any extra columns
// into extra. It returns the record's sealed column too, for
// opener.unsealRecord.
func scanRecord(row interface{ Scan(...any) error }, extra ...any) (*stet.ReviewRecord, int, error) {
	var r stet.ReviewRecord
	var kind, state string
	var class, failure, decision, decidedBy, note sql.NullString
	var decidedAt, created, classPurged, notePurged sql.NullInt64
	var sealed int
	var failedPart, provenance sql.NullString
	if err := row.Scan(append([]any{recordPub(&r.ID), jobPub(&r.JobID), reportPub(&r.ReportID), &r.TenantID, &r.SourceID, &r.Revision,
		&kind, &state, &r.Authoritative, &class, &failure, &decision, &decidedBy, &decidedAt, &note, &created, &classPurged,
		&notePurged, &sealed, &failedPart, &provenance, &r.Reopens, &r.Superseded}, extra...)...); err != nil {
		return nil, 0, err
	}
	r.FailedPart = failedPart.String
	if provenance.Valid {
		if err := json.Unmarshal([]byte(provenance.String), &r.Provenance); err != nil {
			return nil, 0, fmt.Errorf("read record provenance: %w", err)
		}
	}
	r.ClassificationPurgedAt, r.NotePurgedAt = fromMicros(classPurged), fromMicros(notePurged)
	r.Kind, r.State = stet.RecordKind(kind), stet.RecordState(state)
	if class.Valid {
		r.Classification = json.RawMessage(class.String)
	}
	r.FailureClass, r.Decision, r.DecidedBy, r.Note = stet.FailureClass(failure.String), stet.Decision(decision.String), decidedBy.String, note.String
	r.DecidedAt, r.CreatedAt = fromMicros(decidedAt), fromMicros(created)
	return &r, sealed, nil
}

// queryRecords reads the review records a query on the read pool selects
// (recordColumns) and opens their sealed classifications and notes.
func (db *DB) queryRecords(ctx context.Context, query string, args ...any) ([]*stet.ReviewRecord, error) {
	rows, err := db.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var out []*stet.ReviewRecord
	var sealed []int
	for rows.Next() {
		r, flags, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("read review record: %w", err)
		}
		out = append(out, r)
		sealed = append(sealed, flags)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// Opened after the rows are closed: the key reads use the same pool.
	o := db.opener(db.r)
	for i, r := range out {
		if err := o.unsealRecord(ctx, r, sealed[i]); errors.Is(err, ErrKeyDestroyed) {
			// A deleted report's record whose rows are not gone yet: its
			// content is gone already, the list goes on.
			r.Classification, r.Note = nil, ""
		} else if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ListReview lists review records oldest first, a page at a time. It
// returns the cursor of the next page, or "" after the last.
func (db *DB) ListReview(ctx context.Context, f ReviewFilter) ([]*stet.ReviewRecord, string, error) {
	if f.Limit <= 0 || f.Limit > 500 {
		f.Limit = 50
	}
	var where []string
	args := []any{f.Tenant}
	where = append(where, "rr.tenant_id = $1", notDeleted)
	if f.State != "" {
		args = append(args, string(f.State))
		where = append(where, fmt.Sprintf("rr.state = $%d", len(args)))
	}
	if f.Source != "" {
		args = append(args, f.Source)
		where = append(where, fmt.Sprintf("rr.source_id = $%d", len(args)))
	}
	if f.State == stet.RecordPending && !f.Superseded {
		// The pending queue leaves out what a newer revision superseded.
		where = append(where, notSuperseded)
	}
	if f.After != "" {
		// The cursor is the last record's public ID; records are listed by
		// key, which grows with time.
		args = append(args, pub(f.After))
		where = append(where, "rr.id > "+recordKeySQL(fmt.Sprintf("$%d", len(args))))
	}
	args = append(args, f.Limit+1)
	out, err := db.queryRecords(ctx, `SELECT `+recordColumns+` FROM `+recordFrom+` WHERE `+strings.Join(where, " AND ")+
		fmt.Sprintf(` ORDER BY rr.id LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, "", fmt.Errorf("list review records: %w", err)
	}
	next := ""
	if len(out) > f.Limit {
		out = out[:f.Limit]
		next = out[len(out)-1].ID
	}
	return out, next, nil
}

// GetReview reads one review record of a tenant (an empty tenant finds
// nothing).
func (db *DB) GetReview(ctx context.Context, tenant, id string) (*stet.ReviewRecord, error) {
	var deleted sql.NullInt64
	r, sealed, err := scanRecord(db.r.QueryRowContext(ctx, `SELECT `+recordColumns+`, rp.deleted_at FROM `+recordFrom+`
		WHERE rr.public_id = $1 AND rr.tenant_id = $2`, pub(id), tenant), &deleted)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("review record")
	}
	if err != nil {
		return nil, fmt.Errorf("read review record: %w", err)
	}
	if deleted.Valid {
		return nil, ErrGone
	}
	if err := db.opener(db.r).unsealRecord(ctx, r, sealed); err != nil {
		return nil, fmt.Errorf("read review record: %w", err)
	}
	if r.Decisions, err = db.readDecisions(ctx, db.r, r); err != nil {
		return nil, err
	}
	return r, nil
}

// DecideParams is a reviewer's decision.
type DecideParams struct {
	Tenant         string
	RecordID       string
	Decision       stet.Decision
	Classification json.RawMessage // required for override, and for a manual record's approval
	Note           string
	Actor          string
	Now            time.Time
}

// Decide records a decision on a pending record, with its audit entry, in
// one transaction. A decided record cannot be decided again (EConflict).
func (db *DB) Decide(ctx context.Context, p DecideParams) (*stet.ReviewRecord, error) {
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		var state string
		var reportID string
		var deleted sql.NullInt64
		err := tx.QueryRowContext(ctx, `SELECT rr.state, rp.public_id, rp.deleted_at FROM review_records rr JOIN reports rp ON rp.id = rr.report_id
			WHERE rr.public_id = $1 AND rr.tenant_id = $2`, pub(p.RecordID), p.Tenant).Scan(&state, reportPub(&reportID), &deleted)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("review record")
		}
		if err != nil {
			return fmt.Errorf("read review record: %w", err)
		}
		if deleted.Valid {
			return ErrGone
		}
		if stet.RecordState(state) != stet.RecordPending {
			return stet.Errorf(stet.EConflict, "review record %s is already decided", p.RecordID)
		}
		var class sql.NullString
		if len(p.Classification) > 0 {
			class = sql.NullString{String: string(p.Classification), Valid: true}
		}
		dk, err := db.writeKey(ctx, tx, reportID, p.Now)
		if err != nil {
			return err
		}
		if class, err = sealValue(dk, colClassification, p.RecordID, class); err != nil {
			return err
		}
		note, err := sealValue(dk, colNote, p.RecordID, nullString(p.Note))
		if err != nil {
			return err
		}
		// The sealed bits follow what is written: an override's
		// classification replaces the old one (sealed or not), a note is
		// always written.
		sealed := sealedFlag(dk, colNote, note)
		keep := sealedClassification
		if class.Valid {
			keep = 0
			sealed |= sealedFlag(dk, colClassification, class)
		}
		res, err := tx.ExecContext(ctx, `UPDATE review_records SET state = 'decided', decision = $1,
				classification = COALESCE($2, classification), note = $3, decided_by = $4, decided_at = $5,
				sealed = (sealed & $7) | $8
			WHERE public_id = $6 AND state = 'pending'`,
			string(p.Decision), class, note, p.Actor, micros(p.Now), pub(p.RecordID), keep, sealed)
		if err != nil {
			return fmt.Errorf("decide: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			// A concurrent decision won between the read and the update.
			return stet.Errorf(stet.EConflict, "review record %s is already decided", p.RecordID)
		}
		// The decision as a row of its own: the record's decided values,
		// copied as stored (sealed ones stay bound to the record).
		if _, err := tx.ExecContext(ctx, `INSERT INTO decisions (record_id, report_id, decision, classification, note, actor, decided_at, sealed)
			SELECT id, report_id, decision, classification, note, decided_by, decided_at, sealed & 3 FROM review_records WHERE public_id = $1`,
			pub(p.RecordID)); err != nil {
			return fmt.Errorf("record decision: %w", err)
		}
		var nth int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM decisions WHERE record_id = `+recordKeySQL("$1"), pub(p.RecordID)).Scan(&nth); err != nil {
			return fmt.Errorf("count decisions: %w", err)
		}
		if err := enqueueDecided(ctx, tx, p.RecordID, EventDecided, nth, p.Now); err != nil {
			return err
		}
		return Audit(ctx, tx, AuditEntry{Tenant: p.Tenant, Actor: p.Actor, Action: "review.decide." + string(p.Decision),
			ObjectType: "review_record", ObjectID: p.RecordID, Now: p.Now})
	})
	if err != nil {
		return nil, err
	}
	return db.GetReviewPrimary(ctx, p.Tenant, p.RecordID)
}

// GetReviewPrimary reads a review record from the writer pool.
func (db *DB) GetReviewPrimary(ctx context.Context, tenant, id string) (*stet.ReviewRecord, error) {
	r, sealed, err := scanRecord(db.w.QueryRowContext(ctx, `SELECT `+recordColumns+` FROM `+recordFrom+`
		WHERE rr.public_id = $1 AND rr.tenant_id = $2`, pub(id), tenant))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("review record")
	}
	if err != nil {
		return nil, err
	}
	if err := db.opener(db.w).unsealRecord(ctx, r, sealed); err != nil {
		return nil, fmt.Errorf("read review record: %w", err)
	}
	if r.Decisions, err = db.readDecisions(ctx, db.w, r); err != nil {
		return nil, err
	}
	return r, nil
}

// RevisionJobCounts counts the revisions' jobs by state, leaving out the
// jobs of parts (docs/design.md §16): a job whose part is blocked counts
// as blocked, since it waits on that part.
func (db *DB) RevisionJobCounts(ctx context.Context) (map[stet.JobState]int, error) {
	return db.countJobs(ctx, `SELECT CASE WHEN j.state = 'extracting' AND EXISTS (SELECT 1 FROM jobs c
			WHERE c.parent_job_id = j.id AND c.state = 'blocked') THEN 'blocked' ELSE j.state END AS st, COUNT(*)
		FROM jobs j WHERE j.parent_job_id IS NULL GROUP BY st`)
}

// JobCounts counts jobs by state.
func (db *DB) JobCounts(ctx context.Context) (map[stet.JobState]int, error) {
	return db.countJobs(ctx, `SELECT state, COUNT(*) FROM jobs GROUP BY state`)
}

func (db *DB) countJobs(ctx context.Context, query string) (map[stet.JobState]int, error) {
	rows, err := db.r.QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	defer rows.Close()
	out := map[stet.JobState]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[stet.JobState(s)] = n
	}
	return out, rows.Err()
}
