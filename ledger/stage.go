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

// Stage statements. The stage functions name a job by its public ID; a
// statement reaches the job's rows by its integer key (keys.go).
var (
	// A placeholder for a hash a revision recorded before its content
	// (migration 0019) is filled in when the content comes.
	qRecordPolicy = `INSERT INTO policy_versions (hash, policy_id, content, first_seen) VALUES ($1, $2, $3, $4)
		ON CONFLICT (hash) DO UPDATE SET content = excluded.content WHERE policy_versions.content IS NULL`
	qPolicyVersion = `SELECT content FROM policy_versions WHERE hash = $1`
	qLoadWork      = `SELECT ` + jobColumns + `, v.text, v.sealed, v.text_purged_at,
			EXISTS (SELECT 1 FROM artifacts a WHERE a.job_id = j.id),
			(SELECT COUNT(*) FROM attempts t WHERE t.job_id = j.id AND t.failure_class = 'transient'),
			COALESCE((SELECT t.processor_id FROM attempts t WHERE t.job_id = j.id ORDER BY t.n DESC LIMIT 1), ''),
			COALESCE((SELECT t.failure_class FROM attempts t WHERE t.job_id = j.id ORDER BY t.n DESC LIMIT 1), ''),
			COALESCE((SELECT string_agg(d.scope, '` + "\n" + `') FROM dispatch_pauses d
				WHERE d.scope = 'all' OR d.scope = 'tenant:' || j.tenant_id OR d.scope LIKE 'processor:%'), ''),
			(v.audio_sha256 IS NOT NULL AND v.transcript_sha256 IS NULL)
		FROM ` + jobFrom + ` WHERE j.public_id = $1`
	qClaim = `UPDATE jobs SET attempt = attempt + 1, state = 'extracting', lease_until = $1, lease_holder = $5,
			extracting_at = COALESCE(extracting_at, $2), updated_at = $2
		WHERE public_id = $3 AND attempt = $4
		  AND (state IN ('accepted', 'waiting') OR (state = 'extracting' AND (lease_until IS NULL OR lease_until <= $2)))
		RETURNING id, attempt`
	// qClaimAndStartPG is qClaim and qStartAttempt in one statement
	// (PostgreSQL): no job claimed, no attempt started.
	qClaimAndStartPG = `WITH j AS (` + qClaim + `)
		INSERT INTO attempts (job_id, n, token, processor_id, status, input_sha256, started_at)
		SELECT j.id, (SELECT COALESCE(MAX(n), 0) + 1 FROM attempts WHERE job_id = j.id), j.attempt, $6, 'started', $7, $2 FROM j
		RETURNING token, n`
	// qStartAttempt takes the job's key.
	qStartAttempt = `INSERT INTO attempts (job_id, n, token, processor_id, status, input_sha256, started_at)
		VALUES ($1, (SELECT COALESCE(MAX(n), 0) + 1 FROM attempts WHERE job_id = $1), $2, $3, 'started', $4, $5)
		RETURNING n`
	qFinishAttempt = `UPDATE attempts SET status = $1, failure_class = $2, model = $3, request_id = $4,
			status_code = $5, input_tokens = $6, output_tokens = $7, latency_ms = $8, finished_at = $9, reported_cost_usd = $12
		WHERE job_id = ` + jobKeySQL("$10") + ` AND n = $11`
	qFenceExtracted = `UPDATE jobs SET state = 'extracted', extracted_at = $1, updated_at = $1,
			lease_until = NULL, lease_holder = NULL, failure_class = NULL, processor_id = $2
		WHERE public_id = $3 AND attempt = $4 AND state = 'extracting' RETURNING id, report_id`
	// qInsertArtifact takes the job's key: an artifact is its job's.
	qInsertArtifact = `INSERT INTO artifacts (job_id, attempt_n, raw, output, schema_version, processor_id, model, created_at, sealed)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`
	qSetJobState = `UPDATE jobs SET state = $1, failure_class = $2, lease_until = NULL, lease_holder = NULL, updated_at = $3
		WHERE public_id = $4 AND attempt = $5 AND state = 'extracting'`
	qBlock = `UPDATE jobs SET state = 'blocked', failure_class = $1, lease_until = NULL, lease_holder = NULL, updated_at = $2,
			blocked_processor = $5, blocked_reason = $6
		WHERE public_id = $3 AND attempt = $4 AND state IN ('accepted', 'waiting', 'extracting')`
	// The statements of a commit take keys, but the first.
	qJobForCommit = `SELECT j.id, j.state, j.report_id, rp.public_id, j.tenant_id, j.source_id, j.revision, j.parent_job_id
		FROM jobs j JOIN reports rp ON rp.id = j.report_id WHERE j.public_id = $1`
	qLockJob        = `UPDATE jobs SET updated_at = $1 WHERE id = $2 AND state = 'extracted'`
	qRecordOfJob    = `SELECT public_id FROM review_records WHERE job_id = $1`
	qArtifactOutput = `SELECT COALESCE(legacy_id, ''), output, sealed FROM artifacts WHERE job_id = $1`
	qMarkCommitted  = `UPDATE jobs SET state = 'committed', committed_at = $1, updated_at = $1 WHERE id = $2`
	qMarkManual     = `UPDATE jobs SET state = 'manual', failure_class = $1, lease_until = NULL, lease_holder = NULL,
			committed_at = $2, updated_at = $2
		WHERE public_id = $3 AND ($4 < 0 OR attempt = $4) AND state IN ('accepted', 'extracting', 'waiting', 'blocked', 'batched')
		RETURNING id, report_id, tenant_id, source_id, revision, parent_job_id`
	qLockReport          = `UPDATE reports SET updated_at = $1 WHERE id = $2`
	qAuthoritativeRecord = `SELECT id, revision FROM review_records WHERE report_id = $1 AND authoritative`
	qClearAuthoritative  = `UPDATE review_records SET authoritative = FALSE WHERE id = $1`
	qInsertRecord        = `INSERT INTO review_records (public_id, job_id, report_id, tenant_id, source_id, revision, kind, state,
			authoritative, classification, failure_class, created_at, sealed)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9, $10, $11, $12)`
	qUnblock = `UPDATE jobs SET state = 'accepted', blocked_processor = NULL, blocked_reason = NULL, updated_at = $1
		WHERE public_id = $2 AND state = 'blocked'`
)

// RecordPolicy stores a policy version's content under its hash, once.
func RecordPolicy(ctx context.Context, q Querier, p *stet.Policy, now time.Time) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	_, err = q.ExecContext(ctx, qRecordPolicy, p.Hash(), p.ID, string(b), micros(now))
	if err != nil {
		return fmt.Errorf("record policy %s: %w", p.ID, err)
	}
	return nil
}

// PolicyVersion returns the recorded content of a policy version.
func PolicyVersion(ctx context.Context, q Querier, hash string) (*stet.Policy, error) {
	var content sql.NullString // NULL: a hash recorded without its content (0019)
	err := q.QueryRowContext(ctx, qPolicyVersion, hash).Scan(&content)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !content.Valid {
		return nil, notFound("policy version")
	}
	if err != nil {
		return nil, fmt.Errorf("read policy version: %w", err)
	}
	var p stet.Policy
	if err := json.Unmarshal([]byte(content.String), &p); err != nil {
		return nil, fmt.Errorf("decode policy version: %w", err)
	}
	return &p, nil
}

// WorkItem is what the extract stage needs to know about a job.
type WorkItem struct {
	Job            stet.Job
	Text           stet.Text
	TextPurged     bool
	HasArtifact    bool
	TransientFails int // failed transient attempts so far
	// LastProcessor and LastClass describe the job's latest attempt, which
	// decides whether the next one may use an approved fallback.
	LastProcessor string
	LastClass     stet.FailureClass
	// Pauses are the dispatch pauses in force when the job was read that
	// could cover it: the scopes "all", its tenant's, and every
	// processor's (the processor is chosen later). Paused answers from
	// them.
	Pauses []string
	// AwaitsTranscript: the revision came as audio and has no transcript
	// yet (docs/design.md §19); its text is empty until the transcribe
	// step saves one.
	AwaitsTranscript bool
}

// Paused reports whether one of w.Pauses covers dispatch of the job to
// processorID, as ActivePause would have answered when w was read.
func (w *WorkItem) Paused(processorID string) bool {
	for _, s := range w.Pauses {
		if s == "all" || s == "tenant:"+w.Job.TenantID || s == "processor:"+processorID {
			return true
		}
	}
	return false
}

// jobFrom joins what jobColumns reads.
const jobFrom = `jobs j JOIN revisions v ON v.id = j.revision_id JOIN reports rp ON rp.id = j.report_id
	JOIN policy_versions pv ON pv.id = v.policy_version`

const jobColumns = `j.public_id, COALESCE(v.legacy_id, ''), v.content_sha256, rp.public_id, j.tenant_id, j.source_id, j.revision, j.extraction_version,
	v.profile_id, v.profile_version, pv.policy_id, pv.hash, j.state, j.attempt, j.lease_until,
	j.failure_class, j.created_at, j.updated_at, j.extracting_at, j.extracted_at, j.committed_at,
	(SELECT r.public_id FROM review_records r WHERE r.job_id = j.id),
	COALESCE(j.blocked_processor, ''), COALESCE(j.blocked_reason, ''), COALESCE(j.routed_to, ''),
	(SELECT pj.public_id FROM jobs pj WHERE pj.id = j.parent_job_id), COALESCE(j.part_id, '')`

// scanJob scans jobColumns into j, then any extra columns into extra. It
// returns the binding of the revision's sealed values.
func scanJob(row interface{ Scan(...any) error }, j *stet.Job, extra ...any) (string, error) {
	var lease, created, updated, extracting, extracted, committed sql.NullInt64
	var failure sql.NullString
	var state, legacy, content string
	err := row.Scan(append([]any{jobPub(&j.ID), &legacy, shaScan{&content}, reportPub(&j.ReportID), &j.TenantID, &j.SourceID, &j.Revision, &j.ExtractionVersion,
		&j.ProfileID, &j.ProfileVersion, &j.PolicyID, &j.PolicyHash, &state, &j.Attempt, &lease,
		&failure, &created, &updated, &extracting, &extracted, &committed, recordPub(&j.ReviewRecordID),
		&j.BlockedProcessor, &j.BlockedReason, &j.RoutedTo, jobPub(&j.ParentID), &j.PartID}, extra...)...)
	if err != nil {
		return "", err
	}
	j.State = stet.JobState(state)
	j.LeaseUntil = fromMicros(lease)
	j.FailureClass = stet.FailureClass(failure.String)
	j.CreatedAt, j.UpdatedAt = fromMicros(created), fromMicros(updated)
	j.ExtractingAt, j.ExtractedAt, j.CommittedAt = fromMicros(extracting), fromMicros(extracted), fromMicros(committed)
	return RevisionBinding(legacy, j.ReportID, content), nil
}

// LoadWork reads a job for the extract stage. Read it from the writer pool:
// it decides what happens next. Sealed text is opened.
func (db *DB) LoadWork(ctx context.Context, q Querier, jobID string) (*WorkItem, error) {
	var w WorkItem
	var text sql.NullString
	var sealed int
	var purged sql.NullInt64
	var lastClass, pauses string
	binding, err := scanJob(q.QueryRowContext(ctx, qLoadWork, pub(jobID)), &w.Job, &text, &sealed, &purged, &w.HasArtifact, &w.TransientFails,
		&w.LastProcessor, &lastClass, &pauses, &w.AwaitsTranscript)
	w.LastClass = stet.FailureClass(lastClass)
	if pauses != "" {
		w.Pauses = strings.Split(pauses, "\n") // ValidScope refuses a newline
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("job")
	}
	if err != nil {
		return nil, fmt.Errorf("load job: %w", err)
	}
	text, err = db.opener(q).open(ctx, w.Job.ReportID, colRevisionText, binding, text, sealed)
	switch {
	case errors.Is(err, ErrKeyDestroyed):
		// A deleted report's text is gone: its job (cancelled) reads as
		// purged, so no stage retries on it and no batch stalls.
		text = sql.NullString{}
	case err != nil:
		return nil, fmt.Errorf("load job %s: %w", jobID, err)
	}
	w.Text = stet.NewText(text.String)
	w.TextPurged = purged.Valid || !text.Valid
	return &w, nil
}

// ClaimParams claims a job for one extraction attempt.
type ClaimParams struct {
	JobID    string
	Expected int64 // the attempt token LoadWork saw
	Now      time.Time
	LeaseFor time.Duration
	// Holder is the worker process taking the lease (its heartbeat's
	// process ID): when that heartbeat stops, TakeOverDead ends the lease
	// at once. "" for a process without heartbeats: the lease then only
	// expires.
	Holder      string
	ProcessorID string
	InputSHA256 string
}

// ErrNotClaimable means another worker claimed the job since it was loaded,
// or its lease is still held. Load it again.
var ErrNotClaimable = errors.New("job not claimable")

// Claim bumps the job's attempt token (the fencing token), takes a lease and
// records the intent of a processor call, in tx. It returns the new token and
// the attempt number. Only jobs waiting for extraction, or held by an expired
// lease, can be claimed.
func (db *DB) Claim(ctx context.Context, tx Querier, p ClaimParams) (token int64, n int, err error) {
	now := micros(p.Now)
	if db.dialect.name == Postgres {
		// One round trip: the claim and the attempt's intent in one
		// statement (SQLite has no UPDATE in a WITH clause, and no round
		// trip to save).
		err = tx.QueryRowContext(ctx, qClaimAndStartPG, micros(p.Now.Add(p.LeaseFor)), now, pub(p.JobID), p.Expected, nullString(p.Holder),
			p.ProcessorID, blob(sha(p.InputSHA256))).Scan(&token, &n)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, 0, ErrNotClaimable
		}
		if err != nil {
			return 0, 0, fmt.Errorf("claim job: %w", err)
		}
		return token, n, nil
	}
	var key int64
	err = tx.QueryRowContext(ctx, qClaim, micros(p.Now.Add(p.LeaseFor)), now, pub(p.JobID), p.Expected, nullString(p.Holder)).Scan(&key, &token)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, ErrNotClaimable
	}
	if err != nil {
		return 0, 0, fmt.Errorf("claim job: %w", err)
	}
	n, err = startAttempt(ctx, tx, key, token, p.ProcessorID, p.InputSHA256, p.Now)
	return token, n, err
}

// StartAttempt records the intent of one processor call before it is made,
// so a call cut short by a crash is still counted.
func StartAttempt(ctx context.Context, q Querier, jobID string, token int64, processorID, inputSHA string, now time.Time) (int, error) {
	key, err := jobKeyByID(ctx, q, jobID)
	if err != nil {
		return 0, fmt.Errorf("start attempt: %w", err)
	}
	return startAttempt(ctx, q, key, token, processorID, inputSHA, now)
}

func startAttempt(ctx context.Context, q Querier, jobKey, token int64, processorID, inputSHA string, now time.Time) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, qStartAttempt, jobKey, token, processorID, blob(sha(inputSHA)), micros(now)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("start attempt: %w", err)
	}
	return n, nil
}

// AttemptResult is what one processor call came to.
type AttemptResult struct {
	JobID        string
	N            int
	Status       stet.AttemptStatus
	FailureClass stet.FailureClass
	Model        string
	RequestID    string
	StatusCode   int
	InputTokens  int
	OutputTokens int
	Latency      time.Duration
	Now          time.Time
	// ReportedCostUSD is the provider's own figure for the call, when it
	// gives one: the attempt's cost_usd is then this, not its tokens at
	// the price.
	ReportedCostUSD *float64
}

// FinishAttempt records the outcome of a call.
func FinishAttempt(ctx context.Context, q Querier, r AttemptResult) error {
	_, err := q.ExecContext(ctx, qFinishAttempt,
		string(r.Status), nullString(string(r.FailureClass)), nullString(r.Model), nullString(r.RequestID),
		sql.NullInt64{Int64: int64(r.StatusCode), Valid: r.StatusCode != 0}, r.InputTokens, r.OutputTokens,
		r.Latency.Milliseconds(), micros(r.Now), pub(r.JobID), r.N, nullFloat(r.ReportedCostUSD))
	if err != nil {
		return fmt.Errorf("finish attempt: %w", err)
	}
	return nil
}

// SaveArtifactParams is a validated extraction to save.
type SaveArtifactParams struct {
	JobID         string
	Token         int64
	AttemptN      int
	Raw           []byte
	Output        json.RawMessage
	SchemaVersion string
	ProcessorID   string
	Model         string
	Now           time.Time
}

// SaveArtifact saves the artifact only if the job still carries the
// attempt token: a stale worker gets stet.ErrLeaseLost and no artifact.
// With encryption on, the raw response and the output are sealed.
func (db *DB) SaveArtifact(ctx context.Context, tx Querier, p SaveArtifactParams) error {
	now := micros(p.Now)
	var jobKey, reportKey int64
	err := tx.QueryRowContext(ctx, qFenceExtracted, now, p.ProcessorID, pub(p.JobID), p.Token).Scan(&jobKey, &reportKey)
	if errors.Is(err, sql.ErrNoRows) {
		return fenceLost(ctx, tx, p.JobID)
	}
	if err != nil {
		return fmt.Errorf("fence job: %w", err)
	}
	return db.insertArtifact(ctx, tx, jobKey, reportKey, p)
}

// insertArtifact writes the artifact of the job with key jobKey (public ID
// p.JobID), sealed under the report's data key when encryption is on.
func (db *DB) insertArtifact(ctx context.Context, tx Querier, jobKey, reportKey int64, p SaveArtifactParams) error {
	dk, err := db.writeKeyOf(ctx, tx, reportKey, p.Now)
	if err != nil {
		return err
	}
	id := ArtifactID("", p.JobID)
	raw, err := packRaw(dk, id, p.Raw)
	if err != nil {
		return err
	}
	output, err := sealString(dk, colArtifactOutput, id, string(p.Output))
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, qInsertArtifact,
		jobKey, p.AttemptN, raw, output, p.SchemaVersion, p.ProcessorID, nullString(p.Model), micros(p.Now),
		artifactSealed(dk, raw))
	if err != nil {
		return fmt.Errorf("insert artifact: %w", err)
	}
	return nil
}

// ErrCancelled means the job was cancelled by a deletion: a result that
// arrives for it is discarded (DiscardAttempt), never saved. It is also a
// lost lease, so every fenced write treats it as one.
var ErrCancelled = fmt.Errorf("job cancelled by a deletion: %w", stet.ErrLeaseLost)

// fenceLost tells a cancelled job from one a newer attempt holds.
func fenceLost(ctx context.Context, q Querier, jobID string) error {
	if s, err := jobState(ctx, q, jobID); err == nil && s == stet.JobCancelled {
		return ErrCancelled
	}
	return stet.ErrLeaseLost
}

// DiscardAttempt counts a call whose result arrived for a cancelled job:
// the attempt is finished superseded and stamped discarded_at, and nothing
// of the result (request ID, model, output) is stored.
func DiscardAttempt(ctx context.Context, q Querier, jobID string, n int, now time.Time) error {
	_, err := q.ExecContext(ctx, `UPDATE attempts SET status = 'superseded', discarded_at = $1, finished_at = COALESCE(finished_at, $1)
		WHERE job_id = `+jobKeySQL("$2")+` AND n = $3`, micros(now), pub(jobID), n)
	if err != nil {
		return fmt.Errorf("discard attempt: %w", err)
	}
	return nil
}

// HoldsJob returns nil if the job is still extracting under token, and
// ErrCancelled or stet.ErrLeaseLost otherwise: the fence before a repair
// call, which must not reach a processor for a job deleted meanwhile.
func HoldsJob(ctx context.Context, q Querier, jobID string, token int64) error {
	var state string
	var attempt int64
	if err := q.QueryRowContext(ctx, `SELECT state, attempt FROM jobs WHERE public_id = $1`, pub(jobID)).Scan(&state, &attempt); err != nil {
		return fmt.Errorf("read job: %w", err)
	}
	switch {
	case stet.JobState(state) == stet.JobCancelled:
		return ErrCancelled
	case stet.JobState(state) != stet.JobExtracting || attempt != token:
		return stet.ErrLeaseLost
	}
	return nil
}

// SetJobState moves a job held with token to state, recording the last
// failure class. It returns stet.ErrLeaseLost if a newer attempt holds the job.
func SetJobState(ctx context.Context, tx Querier, jobID string, token int64, state stet.JobState, class stet.FailureClass, now time.Time) error {
	res, err := tx.ExecContext(ctx, qSetJobState,
		string(state), nullString(string(class)), micros(now), pub(jobID), token)
	if err != nil {
		return fmt.Errorf("set job state: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return stet.ErrLeaseLost
	}
	return nil
}

// Block moves a job that was never claimed, or whose claim is ours, to
// blocked: no processor call is made until an operator acts. processor
// and reason are the processor the gate refused and its reason code, kept
// while the job is blocked.
func Block(ctx context.Context, tx Querier, jobID string, expected int64, class stet.FailureClass, processor, reason string, now time.Time) error {
	res, err := tx.ExecContext(ctx, qBlock,
		string(class), micros(now), pub(jobID), expected, nullString(processor), nullString(reason))
	if err != nil {
		return fmt.Errorf("block job: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return stet.ErrLeaseLost
	}
	return nil
}

// ErrNothingToCommit means the job has no artifact to write a record
// from (yet).
var ErrNothingToCommit = errors.New("job has no artifact to commit")

// WriteRecord writes the review record for an extracted job and marks the job
// committed, in tx. It is idempotent: a committed job returns its record.
// With encryption on, the artifact's output is opened and the record's
// classification sealed (each value is bound to its own row). The job of
// one part of a profile with parts is marked committed and settles its
// part (parts.go): it returns PartSettled, or the parent's record when it
// was the last part.
func (db *DB) WriteRecord(ctx context.Context, tx Querier, jobID string, now time.Time) (recordID string, err error) {
	var state string
	var jobKey, reportKey int64
	var reportID, tenantID, sourceID string
	var revision int64
	var parent sql.NullInt64
	err = tx.QueryRowContext(ctx, qJobForCommit, pub(jobID)).
		Scan(&jobKey, &state, &reportKey, reportPub(&reportID), &tenantID, &sourceID, &revision, &parent)
	if errors.Is(err, sql.ErrNoRows) {
		return "", notFound("job")
	}
	if err != nil {
		return "", fmt.Errorf("read job: %w", err)
	}
	if parent.Valid {
		return db.commitPart(ctx, tx, jobKey, parent.Int64, stet.JobState(state), now)
	}
	switch stet.JobState(state) {
	case stet.JobCommitted, stet.JobManual:
		err := tx.QueryRowContext(ctx, qRecordOfJob, jobKey).Scan(recordPub(&recordID))
		if err != nil {
			return "", fmt.Errorf("read record: %w", err)
		}
		return recordID, nil
	case stet.JobExtracted:
		// Take the job row: of two commits of one job (the extract worker's
		// and the record stage's) the second waits here, then finds no
		// extracted job and returns the first one's record.
		res, err := tx.ExecContext(ctx, qLockJob, micros(now), jobKey)
		if err != nil {
			return "", fmt.Errorf("lock job: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			if err := tx.QueryRowContext(ctx, qRecordOfJob, jobKey).Scan(recordPub(&recordID)); err != nil {
				return "", fmt.Errorf("read record: %w", err)
			}
			return recordID, nil
		}
	default:
		return "", ErrNothingToCommit
	}
	var legacy string
	var output sql.NullString
	var sealed int
	if err := tx.QueryRowContext(ctx, qArtifactOutput, jobKey).Scan(&legacy, &output, &sealed); err != nil {
		return "", fmt.Errorf("read artifact: %w", err)
	}
	if output, err = db.opener(tx).open(ctx, reportID, colArtifactOutput, ArtifactID(legacy, jobID), output, sealed); err != nil {
		return "", fmt.Errorf("read artifact: %w", err)
	}
	dk, err := db.writeKey(ctx, tx, reportID, now)
	if err != nil {
		return "", err
	}
	id := stet.NewID(prefixRecord, now)
	class, err := sealValue(dk, colClassification, id, sql.NullString{String: output.String, Valid: output.String != ""})
	if err != nil {
		return "", err
	}
	recordID, err = insertRecord(ctx, tx, recordParams{
		id: id, jobID: jobID, jobKey: jobKey, reportID: reportID, reportKey: reportKey, tenantID: tenantID, sourceID: sourceID,
		revision: revision, kind: stet.RecordExtracted, classification: class.String,
		sealed: sealedFlag(dk, colClassification, class), now: now,
	})
	if err != nil {
		return "", err
	}
	if _, err := tx.ExecContext(ctx, qMarkCommitted,
		micros(now), jobKey); err != nil {
		return "", fmt.Errorf("mark committed: %w", err)
	}
	return recordID, nil
}

// MarkManual ends extraction for good: the job becomes manual and a manual
// review record carrying the failure class reaches a person. It is fenced on
// token; pass token -1 for a job no worker holds (an exhausted retry).
// The job of one part of a profile with parts gets no record of its own:
// it settles its part, and the parent's record names it as the part that
// failed (PartSettled, or the parent's record when it was the last part).
func (db *DB) MarkManual(ctx context.Context, tx Querier, jobID string, token int64, class stet.FailureClass, now time.Time) (string, error) {
	p := recordParams{jobID: jobID, kind: stet.RecordManual, failureClass: class, now: now}
	var parent sql.NullInt64
	err := tx.QueryRowContext(ctx, qMarkManual,
		string(class), micros(now), pub(jobID), token).Scan(&p.jobKey, &p.reportKey, &p.tenantID, &p.sourceID, &p.revision, &parent)
	if errors.Is(err, sql.ErrNoRows) {
		return "", stet.ErrLeaseLost
	}
	if err != nil {
		return "", fmt.Errorf("mark manual: %w", err)
	}
	if parent.Valid {
		return db.settlePart(ctx, tx, parent.Int64, now)
	}
	return insertRecord(ctx, tx, p)
}

type recordParams struct {
	id                 string // "": a new ID
	jobID              string // the job's public ID and its key
	jobKey             int64
	reportID           string // the report's public ID ("" if not read: the outbox reads it when it needs it) and key
	reportKey          int64
	tenantID, sourceID string
	revision           int64
	kind               stet.RecordKind
	classification     string
	sealed             int // the record's sealed column: sealedClassification when classification is sealed
	failureClass       stet.FailureClass
	now                time.Time
}

// insertRecord writes a review record (its classification already sealed,
// under p.id, when encryption is on), and its record.committed outbox rows
// (docs/design.md §13), and moves the report's authoritative pointer to it if its
// revision is the highest committed one. The report row
// is locked first so two commits for one report serialize; the partial
// unique index is the backstop.
func insertRecord(ctx context.Context, tx Querier, p recordParams) (string, error) {
	now := micros(p.now)
	if _, err := tx.ExecContext(ctx, qLockReport, now, p.reportKey); err != nil {
		return "", fmt.Errorf("lock report: %w", err)
	}
	authoritative := true
	var curKey, curRev int64
	err := tx.QueryRowContext(ctx, qAuthoritativeRecord, p.reportKey).Scan(&curKey, &curRev)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return "", fmt.Errorf("read authoritative record: %w", err)
	case curRev > p.revision:
		authoritative = false // an older revision arrived late: the pointer only moves forward
	default:
		if _, err := tx.ExecContext(ctx, qClearAuthoritative, curKey); err != nil {
			return "", fmt.Errorf("move authoritative pointer: %w", err)
		}
	}
	id := p.id
	if id == "" {
		id = stet.NewID(prefixRecord, p.now)
	}
	_, err = tx.ExecContext(ctx, qInsertRecord,
		pub(id), p.jobKey, p.reportKey, p.tenantID, p.sourceID, p.revision, string(p.kind), authoritative,
		nullString(p.classification), nullString(string(p.failureClass)), now, p.sealed)
	if err != nil {
		return "", fmt.Errorf("insert review record: %w", err)
	}
	if _, err := enqueueRecordEvent(ctx, tx, recordEvent{event: EventCommitted, recordID: id, jobID: p.jobID,
		reportID: p.reportID, reportKey: p.reportKey, tenantID: p.tenantID, sourceID: p.sourceID, now: p.now}); err != nil {
		return "", err
	}
	return id, nil
}

// Unblock returns a blocked job to accepted, for an operator's resume.
func Unblock(ctx context.Context, tx Querier, jobID string, now time.Time) error {
	_, err := tx.ExecContext(ctx, qUnblock, micros(now), pub(jobID))
	if err != nil {
		return fmt.Errorf("unblock job: %w", err)
	}
	return nil
}

// ReleaseLeases ends every extraction lease at now and marks every
// synchronous attempt still started abandoned (a batch's attempts stay
// started: its batch is reconciled and applied to them). Only a process
// that is alone on its database (embedded SQLite, after a crash) may call
// it: the leases and attempts belong to a process that died.
func ReleaseLeases(ctx context.Context, tx Querier, now time.Time) error {
	_, err := tx.ExecContext(ctx, `UPDATE jobs SET lease_until = $1, lease_holder = NULL WHERE state = 'extracting' AND lease_until > $1`, micros(now))
	if err != nil {
		return fmt.Errorf("release leases: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE attempts SET status = 'abandoned', finished_at = $1
		WHERE status = 'started' AND batch_id IS NULL`, micros(now)); err != nil {
		return fmt.Errorf("abandon attempts: %w", err)
	}
	return nil
}

// ReleaseForShutdown gives back a job held with token whose stage a
// graceful shutdown cancelled mid-call: attempt n becomes abandoned with no
// failure class, so it is not counted against max_attempts (which counts
// transient failures), and the job returns to accepted with no lease, for
// the next process. It returns stet.ErrLeaseLost if a newer attempt holds
// the job.
func ReleaseForShutdown(ctx context.Context, tx Querier, jobID string, token int64, n int, now time.Time) error {
	if _, err := tx.ExecContext(ctx, `UPDATE attempts SET status = 'abandoned', finished_at = $1
		WHERE job_id = `+jobKeySQL("$2")+` AND n = $3 AND status = 'started'`, micros(now), pub(jobID), n); err != nil {
		return fmt.Errorf("abandon attempt: %w", err)
	}
	return releaseJob(ctx, tx, jobID, token, now)
}

// releaseJob returns a job held with token to accepted with no lease, for
// the next stage run; stet.ErrLeaseLost if a newer attempt holds it.
func releaseJob(ctx context.Context, tx Querier, jobID string, token int64, now time.Time) error {
	res, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'accepted', lease_until = NULL, lease_holder = NULL, updated_at = $1
		WHERE public_id = $2 AND attempt = $3 AND state = 'extracting'`, micros(now), pub(jobID), token)
	if err != nil {
		return fmt.Errorf("release job: %w", err)
	}
	if k, _ := res.RowsAffected(); k != 1 {
		return stet.ErrLeaseLost
	}
	return nil
}

// SaveResultParams is a validated extraction and its attempt's outcome, to
// save (and, when Commit, commit) in one call.
type SaveResultParams struct {
	SaveArtifactParams
	ReportID string        // the job's report, for its data key
	SourceID string        // the job's source: whether its records go to destinations
	Attempt  AttemptResult // the outcome of the call that produced it
	Commit   bool          // also commit the review record
	// Part says the job is one part of a profile with parts: the record
	// part is then always left to WriteRecord, which settles the part.
	Part bool
}

// SaveResult saves a call's result in tx: the artifact (SaveArtifact, the
// fence on the attempt token: a stale worker gets stet.ErrLeaseLost, or
// ErrCancelled, and nothing is written), the attempt's outcome
// (FinishAttempt) and, with p.Commit where the database can, the review
// record too. It returns the record's ID and recorded true when the record
// part ran: an empty ID then means that part failed and was rolled back
// alone, and the record stage is to retry from the artifact. recorded false
// leaves the record to the caller (WriteRecord in the same tx): no commit was
// asked, the source has destinations (whose outbox rows WriteRecord writes), or
// the database saves the parts one by one. On PostgreSQL it is one round
// trip (stet_save_result); on SQLite the statements of SaveArtifact and
// FinishAttempt, in the same transaction.
func (db *DB) SaveResult(ctx context.Context, tx Querier, p SaveResultParams) (recordID string, recorded bool, err error) {
	if p.Part {
		p.Commit = false // a part's commit settles the part (WriteRecord), never a record of its own
	}
	if db.dialect.name != Postgres {
		if err := db.SaveArtifact(ctx, tx, p.SaveArtifactParams); err != nil {
			return "", false, err
		}
		return "", false, FinishAttempt(ctx, tx, p.Attempt)
	}
	dk, err := db.writeKey(ctx, tx, p.ReportID, p.Now)
	if err != nil {
		return "", false, err
	}
	args, record, err := saveResultArgs(dk, p)
	if err != nil {
		return "", false, err
	}
	var outcome string
	if err := tx.QueryRowContext(ctx, qSaveResult, args...).Scan(&outcome); err != nil {
		return "", false, fmt.Errorf("save result: %w", err)
	}
	if dk != nil && (outcome == "saved" || outcome == "committed" || outcome == "commit_failed") {
		// stet_save_result writes the values as given; that they are
		// sealed is recorded here, in the same transaction.
		if _, err := tx.ExecContext(ctx, `UPDATE artifacts SET sealed = $1 WHERE job_id = (SELECT id FROM jobs WHERE public_id = $2)`,
			artifactSealed(dk, args[5].(string)), pub(p.JobID)); err != nil {
			return "", false, fmt.Errorf("save result: %w", err)
		}
		if outcome == "committed" && len(p.Output) > 0 {
			if _, err := tx.ExecContext(ctx, `UPDATE review_records SET sealed = $1 WHERE public_id = $2`,
				sealedClassification, pub(record)); err != nil {
				return "", false, fmt.Errorf("save result: %w", err)
			}
		}
	}
	if c := p.Attempt.ReportedCostUSD; c != nil && (outcome == "saved" || outcome == "committed" || outcome == "commit_failed") {
		// stet_save_result has no parameter for a provider's own figure:
		// it is recorded here, in the same transaction.
		if _, err := tx.ExecContext(ctx, qSetReportedCost, *c, pub(p.JobID), p.Attempt.N); err != nil {
			return "", false, fmt.Errorf("save result: %w", err)
		}
	}
	switch outcome {
	case "fence_lost":
		return "", false, fenceLost(ctx, tx, p.JobID)
	case "saved":
		return "", false, nil
	case "committed":
		return record, true, nil
	case "commit_failed":
		return "", true, nil
	default:
		return "", false, fmt.Errorf("save result: unexpected outcome %q", outcome)
	}
}
