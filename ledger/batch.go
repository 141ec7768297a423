package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stetlabs/stet"
)

// Batch is one provider batch in the ledger.
type Batch struct {
	ID               string          `json:"id"`
	ProcessorID      string          `json:"processor_id"`
	State            stet.BatchState `json:"state"`
	ProviderState    string          `json:"provider_state,omitempty"`
	ProviderBatchID  string          `json:"provider_batch_id,omitempty"`
	InputFileID      string          `json:"input_file_id,omitempty"`
	OutputFileID     string          `json:"output_file_id,omitempty"`
	ErrorFileID      string          `json:"error_file_id,omitempty"`
	ResultsURL       string          `json:"results_url,omitempty"`
	ItemCount        int             `json:"item_count"`
	AppliedCount     int             `json:"applied_count"`
	SubmitStartedAt  time.Time       `json:"submit_started_at,omitzero"`
	SubmittedAt      time.Time       `json:"submitted_at,omitzero"`
	EndedAt          time.Time       `json:"ended_at,omitzero"`
	ResultsFetchedAt time.Time       `json:"results_fetched_at,omitzero"`
	ResultsExpireAt  time.Time       `json:"results_expire_at,omitzero"`
	AppliedAt        time.Time       `json:"applied_at,omitzero"`
	NextPollAt       time.Time       `json:"next_poll_at,omitzero"`
	PollCount        int             `json:"poll_count"`
	LastPolledAt     time.Time       `json:"last_polled_at,omitzero"`
	LeaseUntil       time.Time       `json:"-"`
	UnknownReason    string          `json:"unknown_reason,omitempty"`
	CreatedAt        time.Time       `json:"created_at"`
	UpdatedAt        time.Time       `json:"updated_at"`
}

const batchColumns = `id, processor_id, state, provider_state, provider_batch_id, input_file_id, output_file_id,
	error_file_id, results_url, item_count, applied_count, submit_started_at, submitted_at, ended_at,
	results_fetched_at, results_expire_at, applied_at, next_poll_at, poll_count, last_polled_at, lease_until,
	unknown_reason, created_at, updated_at`

func scanBatch(row interface{ Scan(...any) error }) (*Batch, error) {
	var b Batch
	var state string
	var pstate, pid, in, out, errf, url, reason sql.NullString
	var started, submitted, ended, fetched, expire, applied, next, polled, lease, created, updated sql.NullInt64
	err := row.Scan(&b.ID, &b.ProcessorID, &state, &pstate, &pid, &in, &out, &errf, &url, &b.ItemCount, &b.AppliedCount,
		&started, &submitted, &ended, &fetched, &expire, &applied, &next, &b.PollCount, &polled, &lease, &reason, &created, &updated)
	if err != nil {
		return nil, err
	}
	b.State = stet.BatchState(state)
	b.ProviderState, b.ProviderBatchID, b.InputFileID, b.OutputFileID = pstate.String, pid.String, in.String, out.String
	b.ErrorFileID, b.ResultsURL, b.UnknownReason = errf.String, url.String, reason.String
	b.SubmitStartedAt, b.SubmittedAt, b.EndedAt = fromMicros(started), fromMicros(submitted), fromMicros(ended)
	b.ResultsFetchedAt, b.ResultsExpireAt, b.AppliedAt = fromMicros(fetched), fromMicros(expire), fromMicros(applied)
	b.NextPollAt, b.LastPolledAt, b.LeaseUntil = fromMicros(next), fromMicros(polled), fromMicros(lease)
	b.CreatedAt, b.UpdatedAt = fromMicros(created), fromMicros(updated)
	return &b, nil
}

// GetBatch reads one batch by stet's batch ID, or by the provider's batch ID.
func GetBatch(ctx context.Context, q Querier, id string) (*Batch, error) {
	b, err := scanBatch(q.QueryRowContext(ctx, `SELECT `+batchColumns+` FROM batches WHERE id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		b, err = scanBatch(q.QueryRowContext(ctx, `SELECT `+batchColumns+` FROM batches WHERE provider_batch_id = $1 ORDER BY created_at LIMIT 1`, id))
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("batch")
	}
	if err != nil {
		return nil, fmt.Errorf("read batch: %w", err)
	}
	return b, nil
}

// ListBatches returns batches, newest first; states filters when not empty.
func ListBatches(ctx context.Context, q Querier, states []stet.BatchState, limit int) ([]*Batch, error) {
	query := `SELECT ` + batchColumns + ` FROM batches`
	var args []any
	if len(states) > 0 {
		ph := make([]string, len(states))
		for i, s := range states {
			args = append(args, string(s))
			ph[i] = fmt.Sprintf("$%d", i+1)
		}
		query += ` WHERE state IN (` + strings.Join(ph, ", ") + `)`
	}
	args = append(args, limit)
	query += fmt.Sprintf(` ORDER BY created_at DESC, id DESC LIMIT $%d`, len(args))
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list batches: %w", err)
	}
	defer rows.Close()
	var out []*Batch
	for rows.Next() {
		b, err := scanBatch(rows)
		if err != nil {
			return nil, fmt.Errorf("list batches: %w", err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// PendingJob is a batch-mode job waiting for the assembler.
type PendingJob struct {
	ID                string
	TenantID          string
	PolicyHash        string
	ExtractionVersion string
	TextPurged        bool // the revision's text is gone: it can never be sent
	Attempt           int64
	CreatedAt         time.Time
}

// PendingBatchJobs returns batch-mode jobs waiting in 'accepted', oldest
// first.
func PendingBatchJobs(ctx context.Context, q Querier, limit int) ([]PendingJob, error) {
	rows, err := q.QueryContext(ctx, `SELECT j.public_id, j.tenant_id, pv.hash, j.extraction_version,
			(v.text IS NULL OR v.text_purged_at IS NOT NULL), j.attempt, j.created_at
		FROM jobs j JOIN revisions v ON v.id = j.revision_id JOIN policy_versions pv ON pv.id = v.policy_version
		WHERE j.mode = 'batch' AND j.state = 'accepted' ORDER BY j.created_at, j.id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("read pending batch jobs: %w", err)
	}
	defer rows.Close()
	var out []PendingJob
	for rows.Next() {
		var j PendingJob
		var created int64
		if err := rows.Scan(jobPub(&j.ID), &j.TenantID, &j.PolicyHash, &j.ExtractionVersion, &j.TextPurged, &j.Attempt, &created); err != nil {
			return nil, fmt.Errorf("read pending batch jobs: %w", err)
		}
		j.CreatedAt = time.UnixMicro(created).UTC()
		out = append(out, j)
	}
	return out, rows.Err()
}

// CreateBatch writes a batch in state intent with its items, in tx: each job
// still waiting with the attempt token the caller saw moves to 'batched'
// with a new token (the batch item holds it). Jobs another assembler took
// meanwhile are skipped. It returns how many items the batch holds; with
// none, nothing is written.
func CreateBatch(ctx context.Context, tx Querier, id, processorID string, jobs []PendingJob, now time.Time) (int, error) {
	ts := micros(now)
	type taken struct {
		key   int64
		token int64
	}
	var items []taken
	for _, j := range jobs {
		var key, token int64
		err := tx.QueryRowContext(ctx, `UPDATE jobs SET state = 'batched', attempt = attempt + 1, processor_id = $1, updated_at = $2
			WHERE public_id = $3 AND attempt = $4 AND state = 'accepted' AND mode = 'batch' RETURNING id, attempt`,
			processorID, ts, pub(j.ID), j.Attempt).Scan(&key, &token)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("batch job: %w", err)
		}
		items = append(items, taken{key, token})
	}
	if len(items) == 0 {
		return 0, nil
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO batches (id, processor_id, state, item_count, created_at, updated_at)
		VALUES ($1, $2, 'intent', $3, $4, $4)`, id, processorID, len(items), ts)
	if err != nil {
		return 0, fmt.Errorf("insert batch: %w", err)
	}
	for _, it := range items {
		if _, err := tx.ExecContext(ctx, `INSERT INTO batch_items (batch_id, job_id, token) VALUES ($1, $2, $3)`,
			id, it.key, it.token); err != nil {
			return 0, fmt.Errorf("insert batch item: %w", err)
		}
	}
	return len(items), nil
}

// BatchItem is one item of a batch with what applying it needs.
type BatchItem struct {
	JobID             string
	Token             int64
	AttemptN          int // 0 until the submission recorded the attempt
	Applied           bool
	TenantID          string
	ExtractionVersion string
	PolicyHash        string
	TransientFails    int
}

// BatchItems returns a batch's items in job order.
func BatchItems(ctx context.Context, q Querier, batchID string) ([]BatchItem, error) {
	rows, err := q.QueryContext(ctx, `SELECT j.public_id, i.token, COALESCE(i.attempt_n, 0), i.applied_at IS NOT NULL,
			j.tenant_id, j.extraction_version, pv.hash,
			(SELECT COUNT(*) FROM attempts t WHERE t.job_id = i.job_id AND t.failure_class = 'transient')
		FROM batch_items i JOIN jobs j ON j.id = i.job_id JOIN revisions v ON v.id = j.revision_id
			JOIN policy_versions pv ON pv.id = v.policy_version
		WHERE i.batch_id = $1 ORDER BY i.job_id`, batchID)
	if err != nil {
		return nil, fmt.Errorf("read batch items: %w", err)
	}
	defer rows.Close()
	var out []BatchItem
	for rows.Next() {
		var it BatchItem
		if err := rows.Scan(jobPub(&it.JobID), &it.Token, &it.AttemptN, &it.Applied, &it.TenantID, &it.ExtractionVersion,
			&it.PolicyHash, &it.TransientFails); err != nil {
			return nil, fmt.Errorf("read batch items: %w", err)
		}
		out = append(out, it)
	}
	return out, rows.Err()
}

// ClaimBatch takes a batch's lease so that one worker at a time submits,
// polls or applies it. It returns ErrNotClaimable while another holds it.
// The lease names no holder: it only expires (ClaimBatchAs names one).
func ClaimBatch(ctx context.Context, q Querier, id string, now time.Time, leaseFor time.Duration) (*Batch, error) {
	return ClaimBatchAs(ctx, q, id, "", now, leaseFor)
}

// ClaimBatchAs is ClaimBatch for holder, the worker process taking the
// lease (its heartbeat's process ID): when that heartbeat stops,
// TakeOverDead ends the lease at once. The holder renews a short lease
// while it works (RenewBatch).
func ClaimBatchAs(ctx context.Context, q Querier, id, holder string, now time.Time, leaseFor time.Duration) (*Batch, error) {
	b, err := scanBatch(q.QueryRowContext(ctx, `UPDATE batches SET lease_until = $1, lease_holder = $4
		WHERE id = $2 AND (lease_until IS NULL OR lease_until <= $3) RETURNING `+batchColumns,
		micros(now.Add(leaseFor)), id, micros(now), nullString(holder)))
	if errors.Is(err, sql.ErrNoRows) {
		if _, gerr := GetBatch(ctx, q, id); gerr != nil {
			return nil, gerr
		}
		return nil, ErrNotClaimable
	}
	if err != nil {
		return nil, fmt.Errorf("claim batch: %w", err)
	}
	return b, nil
}

// RenewBatch extends holder's lease on a batch to now+leaseFor. It returns
// stet.ErrLeaseLost if holder no longer holds it (taken over, or expired
// and claimed by another run).
func RenewBatch(ctx context.Context, q Querier, id, holder string, now time.Time, leaseFor time.Duration) error {
	res, err := q.ExecContext(ctx, `UPDATE batches SET lease_until = $1
		WHERE id = $2 AND lease_until IS NOT NULL AND COALESCE(lease_holder, '') = $3`, micros(now.Add(leaseFor)), id, holder)
	if err != nil {
		return fmt.Errorf("renew batch lease: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return stet.ErrLeaseLost
	}
	return nil
}

// ReleaseBatch ends a batch's lease.
func ReleaseBatch(ctx context.Context, q Querier, id string) error {
	if _, err := q.ExecContext(ctx, `UPDATE batches SET lease_until = NULL, lease_holder = NULL WHERE id = $1`, id); err != nil {
		return fmt.Errorf("release batch: %w", err)
	}
	return nil
}

// ReleaseBatchAs ends holder's lease on a batch, if holder still holds it.
func ReleaseBatchAs(ctx context.Context, q Querier, id, holder string) error {
	if _, err := q.ExecContext(ctx, `UPDATE batches SET lease_until = NULL, lease_holder = NULL
		WHERE id = $1 AND COALESCE(lease_holder, '') = $2`, id, holder); err != nil {
		return fmt.Errorf("release batch: %w", err)
	}
	return nil
}

// ReleaseBatchLeases ends every batch lease; like ReleaseLeases, only for a
// process alone on its database after a crash.
func ReleaseBatchLeases(ctx context.Context, q Querier) error {
	if _, err := q.ExecContext(ctx, `UPDATE batches SET lease_until = NULL, lease_holder = NULL WHERE lease_until IS NOT NULL`); err != nil {
		return fmt.Errorf("release batch leases: %w", err)
	}
	return nil
}

// SubmitItem is one item's attempt as it is submitted.
type SubmitItem struct {
	JobID       string
	Token       int64
	InputSHA256 string
}

// MarkSubmitStarted records, just before the provider's creating call,
// that a submission is in flight (from now on an interrupted submission is
// ambiguous and is reconciled, never blindly repeated), the uploaded input
// file, and one attempt per item not yet recorded. Run it in a transaction.
func MarkSubmitStarted(ctx context.Context, tx Querier, batchID, processorID, inputFileID string, items []SubmitItem, now time.Time) error {
	ts := micros(now)
	res, err := tx.ExecContext(ctx, `UPDATE batches SET submit_started_at = COALESCE(submit_started_at, $1),
			input_file_id = COALESCE($2, input_file_id), updated_at = $1
		WHERE id = $3 AND state = 'intent'`, ts, nullString(inputFileID), batchID)
	if err != nil {
		return fmt.Errorf("mark batch submitting: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return stet.Errorf(stet.EConflict, "batch is no longer waiting for submission")
	}
	for _, it := range items {
		var key int64
		var n int
		err := tx.QueryRowContext(ctx, `SELECT i.job_id, COALESCE(i.attempt_n, 0) FROM batch_items i JOIN jobs j ON j.id = i.job_id
			WHERE i.batch_id = $1 AND j.public_id = $2`, batchID, pub(it.JobID)).Scan(&key, &n)
		if err != nil {
			return fmt.Errorf("read batch item: %w", err)
		}
		if n != 0 {
			continue // an earlier, ambiguous submission recorded it
		}
		if err := tx.QueryRowContext(ctx, `INSERT INTO attempts (job_id, n, token, processor_id, status, input_sha256, started_at, batch_id)
			VALUES ($1, (SELECT COALESCE(MAX(n), 0) + 1 FROM attempts WHERE job_id = $1), $2, $3, 'started', $4, $5, $6)
			RETURNING n`, key, it.Token, processorID, blob(sha(it.InputSHA256)), ts, batchID).Scan(&n); err != nil {
			return fmt.Errorf("start batch attempt: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE batch_items SET attempt_n = $1 WHERE batch_id = $2 AND job_id = $3`,
			n, batchID, key); err != nil {
			return fmt.Errorf("record batch attempt: %w", err)
		}
	}
	return nil
}

// RecordInputFile records an uploaded input file before the creating call,
// so that a retry reuses it.
func RecordInputFile(ctx context.Context, q Querier, batchID, fileID string, now time.Time) error {
	_, err := q.ExecContext(ctx, `UPDATE batches SET input_file_id = $1, updated_at = $2 WHERE id = $3`, fileID, micros(now), batchID)
	if err != nil {
		return fmt.Errorf("record input file: %w", err)
	}
	return nil
}

// ClearSubmitStarted records that a submission definitely created nothing
// (the provider refused it with a definitive answer), so the next try
// submits rather than reconciles.
func ClearSubmitStarted(ctx context.Context, q Querier, batchID string, now time.Time) error {
	_, err := q.ExecContext(ctx, `UPDATE batches SET submit_started_at = NULL, updated_at = $1 WHERE id = $2 AND state = 'intent'`,
		micros(now), batchID)
	if err != nil {
		return fmt.Errorf("clear batch submission: %w", err)
	}
	return nil
}

// MarkSubmitted persists the provider's batch ID. Only a batch waiting for
// submission (intent) or for an operator (unknown) takes one, and a
// provider batch ID belongs to one batch (unique).
func MarkSubmitted(ctx context.Context, q Querier, batchID string, h stet.BatchHandle, nextPoll, now time.Time) error {
	state := h.State
	if state == "" || state == stet.BatchIntent || state == stet.BatchUnknown {
		state = stet.BatchSubmitted
	}
	ts := micros(now)
	res, err := q.ExecContext(ctx, `UPDATE batches SET provider_batch_id = $1, state = $2,
			input_file_id = COALESCE($3, input_file_id), submitted_at = $4, next_poll_at = $5, unknown_reason = NULL, updated_at = $4
		WHERE id = $6 AND state IN ('intent', 'unknown')`,
		h.ProviderID, string(state), nullString(h.InputFileID), ts, micros(nextPoll), batchID)
	if err != nil {
		return fmt.Errorf("record provider batch: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return stet.Errorf(stet.EConflict, "batch already has a provider batch")
	}
	return nil
}

// MarkUnknown parks a batch for an operator: a submission whose outcome
// could not be reconciled. reason must hold no provider IDs or text.
func MarkUnknown(ctx context.Context, q Querier, batchID, reason string, now time.Time) error {
	_, err := q.ExecContext(ctx, `UPDATE batches SET state = 'unknown', unknown_reason = $1, next_poll_at = NULL, updated_at = $2
		WHERE id = $3 AND state IN ('intent', 'submitted', 'in_progress', 'completed', 'failed', 'expired', 'cancelled')`,
		reason, micros(now), batchID)
	if err != nil {
		return fmt.Errorf("mark batch unknown: %w", err)
	}
	return nil
}

// ResetForResubmit returns an unknown batch, or one whose submission is
// still in flight, to a fresh intent after an operator decided that nothing
// was created at the provider.
func ResetForResubmit(ctx context.Context, q Querier, batchID string, now time.Time) error {
	res, err := q.ExecContext(ctx, `UPDATE batches SET state = 'intent', submit_started_at = NULL, input_file_id = NULL,
			unknown_reason = NULL, updated_at = $1
		WHERE id = $2 AND provider_batch_id IS NULL
		  AND (state = 'unknown' OR (state = 'intent' AND submit_started_at IS NOT NULL))`, micros(now), batchID)
	if err != nil {
		return fmt.Errorf("reset batch: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return stet.Errorf(stet.EConflict, "only an unknown or in-flight batch without a provider batch can be resubmitted")
	}
	return nil
}

// RecordPoll records one status lookup and the next poll time.
func RecordPoll(ctx context.Context, q Querier, batchID string, st *stet.BatchStatus, nextPoll, now time.Time) error {
	ts := micros(now)
	var ended, next sql.NullInt64
	if st.State.Terminal() {
		ended = sql.NullInt64{Int64: ts, Valid: true}
	} else {
		next = sql.NullInt64{Int64: micros(nextPoll), Valid: true}
	}
	var expire sql.NullInt64
	if !st.ResultsExpireAt.IsZero() {
		expire = sql.NullInt64{Int64: micros(st.ResultsExpireAt), Valid: true}
	}
	_, err := q.ExecContext(ctx, `UPDATE batches SET state = $1, provider_state = $2,
			input_file_id = COALESCE($3, input_file_id), output_file_id = COALESCE($4, output_file_id),
			error_file_id = COALESCE($5, error_file_id), results_url = COALESCE($6, results_url),
			results_expire_at = COALESCE($7, results_expire_at), ended_at = COALESCE(ended_at, $8),
			next_poll_at = $9, poll_count = poll_count + 1, last_polled_at = $10, updated_at = $10
		WHERE id = $11 AND state IN ('submitted', 'in_progress')`,
		string(st.State), nullString(st.ProviderState), nullString(st.InputFileID), nullString(st.OutputFileID),
		nullString(st.ErrorFileID), nullString(st.ResultsURL), expire, ended, next, ts, batchID)
	if err != nil {
		return fmt.Errorf("record batch poll: %w", err)
	}
	return nil
}

// SetNextPoll records when the batch is looked at next (after a 429 or a
// failed lookup), counting the lookup.
func SetNextPoll(ctx context.Context, q Querier, batchID string, next, now time.Time, counted bool) error {
	inc := 0
	if counted {
		inc = 1
	}
	_, err := q.ExecContext(ctx, `UPDATE batches SET next_poll_at = $1, poll_count = poll_count + $2, last_polled_at = $3, updated_at = $3
		WHERE id = $4`, micros(next), inc, micros(now), batchID)
	if err != nil {
		return fmt.Errorf("record next poll: %w", err)
	}
	return nil
}

// ApplyItem is one batch item's outcome, applied once.
type ApplyItem struct {
	BatchID string
	Item    BatchItem
	Result  AttemptResult
	// Artifact is set for a validated result.
	Artifact *SaveArtifactParams
	// Otherwise the job goes to Route: "manual" (a manual review record
	// with Result.FailureClass), "blocked" (an operator decides), or back
	// to extraction: "batch" (the next batch) or "sync" (an extract task;
	// the caller enqueues it in tx).
	Route string
	Now   time.Time
}

// Apply outcomes.
const (
	ApplySkipped    = "skipped"    // applied before: nothing written
	ApplySucceeded  = "succeeded"  // artifact saved; enqueue the record stage
	ApplyFailed     = "failed"     // the job went to its route
	ApplySuperseded = "superseded" // the job no longer carries the item's token
	ApplyDiscarded  = "discarded"  // the job was cancelled by a deletion: counted, not saved
)

// ApplyBatchItem applies one item in tx: it sets the item's applied_at
// marker (only if unset: a second application writes nothing), finishes its
// attempt, and either saves the artifact fenced on the item's token or
// sends the job to its route.
func (db *DB) ApplyBatchItem(ctx context.Context, tx Querier, a ApplyItem) (string, error) {
	ts := micros(a.Now)
	outcome := ApplySucceeded
	if a.Artifact == nil {
		outcome = ApplyFailed
	}
	key, err := jobKeyByID(ctx, tx, a.Item.JobID)
	if err != nil {
		return "", err
	}
	res, err := tx.ExecContext(ctx, `UPDATE batch_items SET applied_at = $1, outcome = $2, failure_class = $3
		WHERE batch_id = $4 AND job_id = $5 AND applied_at IS NULL`,
		ts, outcome, nullString(string(a.Result.FailureClass)), a.BatchID, key)
	if err != nil {
		return "", fmt.Errorf("mark batch item applied: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return ApplySkipped, nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE batches SET applied_count = applied_count + 1, updated_at = $1 WHERE id = $2`,
		ts, a.BatchID); err != nil {
		return "", fmt.Errorf("count applied item: %w", err)
	}
	if s, err := jobState(ctx, tx, a.Item.JobID); err != nil {
		return "", err
	} else if s == stet.JobCancelled {
		// Deleted while the batch ran: the result is counted on its attempt
		// and discarded, never saved.
		if a.Item.AttemptN > 0 {
			if err := DiscardAttempt(ctx, tx, a.Item.JobID, a.Item.AttemptN, a.Now); err != nil {
				return "", err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE batch_items SET outcome = 'superseded' WHERE batch_id = $1 AND job_id = $2`,
			a.BatchID, key); err != nil {
			return "", fmt.Errorf("mark batch item discarded: %w", err)
		}
		return ApplyDiscarded, nil
	}
	if a.Item.AttemptN > 0 {
		a.Result.JobID, a.Result.N = a.Item.JobID, a.Item.AttemptN
		if err := FinishAttempt(ctx, tx, a.Result); err != nil {
			return "", err
		}
	}
	var moved int64
	switch {
	case a.Artifact != nil:
		var reportKey int64
		err := tx.QueryRowContext(ctx, `UPDATE jobs SET state = 'extracted', extracted_at = $1, updated_at = $1,
				failure_class = NULL, processor_id = $2, extracting_at = COALESCE(extracting_at, $1)
			WHERE id = $3 AND attempt = $4 AND state = 'batched' RETURNING report_id`, ts, a.Artifact.ProcessorID, key, a.Item.Token).Scan(&reportKey)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return "", fmt.Errorf("fence batched job: %w", err)
		default:
			moved = 1
			art := *a.Artifact
			art.JobID, art.AttemptN, art.Now = a.Item.JobID, a.Item.AttemptN, a.Now
			if err := db.insertArtifact(ctx, tx, key, reportKey, art); err != nil {
				return "", err
			}
		}
	case a.Route == "manual":
		if _, err := db.MarkManual(ctx, tx, a.Item.JobID, a.Item.Token, a.Result.FailureClass, a.Now); err != nil {
			if errors.Is(err, stet.ErrLeaseLost) {
				break
			}
			return "", err
		}
		moved = 1
	case a.Route == "blocked":
		r, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'blocked', failure_class = $1, lease_until = NULL, updated_at = $2
			WHERE id = $3 AND attempt = $4 AND state = 'batched'`, string(a.Result.FailureClass), ts, key, a.Item.Token)
		if err != nil {
			return "", fmt.Errorf("block batched job: %w", err)
		}
		moved, _ = r.RowsAffected()
	default:
		mode := stet.ModeBatch
		if a.Route == "sync" {
			mode = stet.ModeSync
		}
		r, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'accepted', mode = $1, failure_class = $2, updated_at = $3
			WHERE id = $4 AND attempt = $5 AND state = 'batched'`,
			string(mode), nullString(string(a.Result.FailureClass)), ts, key, a.Item.Token)
		if err != nil {
			return "", fmt.Errorf("return job to extraction: %w", err)
		}
		moved, _ = r.RowsAffected()
	}
	if moved != 1 {
		if _, err := tx.ExecContext(ctx, `UPDATE batch_items SET outcome = 'superseded' WHERE batch_id = $1 AND job_id = $2`,
			a.BatchID, key); err != nil {
			return "", fmt.Errorf("mark batch item superseded: %w", err)
		}
		return ApplySuperseded, nil
	}
	return outcome, nil
}

// FinishApply records that a batch's results were fetched and, when every
// item is applied, that the batch is applied.
func FinishApply(ctx context.Context, q Querier, batchID string, now time.Time) error {
	ts := micros(now)
	_, err := q.ExecContext(ctx, `UPDATE batches SET results_fetched_at = COALESCE(results_fetched_at, $1),
			applied_at = CASE WHEN applied_count >= item_count THEN COALESCE(applied_at, $1) ELSE applied_at END,
			next_poll_at = NULL, updated_at = $1
		WHERE id = $2`, ts, batchID)
	if err != nil {
		return fmt.Errorf("finish batch apply: %w", err)
	}
	return nil
}

// OverdueBatches returns unfinished batches nobody has looked at for grace
// past their next poll (or, never polled, since their last change), and
// whose lease is free: their River job was lost (discarded, or deleted by
// hand). The caller enqueues a new one; a duplicate is harmless because a
// batch run takes the batch's lease.
func OverdueBatches(ctx context.Context, q Querier, now time.Time, grace time.Duration, limit int) ([]string, error) {
	cut := micros(now.Add(-grace))
	rows, err := q.QueryContext(ctx, `SELECT id FROM batches
		WHERE (state IN ('intent', 'submitted', 'in_progress') OR (state IN ('completed', 'failed', 'expired', 'cancelled') AND applied_at IS NULL))
		  AND COALESCE(next_poll_at, updated_at) < $1 AND updated_at < $1
		  AND (lease_until IS NULL OR lease_until < $2)
		ORDER BY created_at LIMIT $3`, cut, micros(now), limit)
	if err != nil {
		return nil, fmt.Errorf("read overdue batches: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("read overdue batches: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// ProviderStateRejected is the provider state of a batch whose submission
// the provider refused for good (an invalid request): nothing was created.
const ProviderStateRejected = "rejected"

// MarkBatchRejected ends a batch whose submission was refused for good; its
// items are then applied as failed, like a failed batch's.
func MarkBatchRejected(ctx context.Context, q Querier, batchID string, now time.Time) error {
	ts := micros(now)
	_, err := q.ExecContext(ctx, `UPDATE batches SET state = 'failed', provider_state = $1, submit_started_at = NULL,
			ended_at = $2, next_poll_at = NULL, updated_at = $2
		WHERE id = $3 AND state = 'intent'`, ProviderStateRejected, ts, batchID)
	if err != nil {
		return fmt.Errorf("mark batch rejected: %w", err)
	}
	return nil
}

// RouteToSync sends a waiting batch-mode job to synchronous extraction (its
// processor has no batch API). It reports whether the job was still
// waiting; the caller enqueues its extract task in tx.
func RouteToSync(ctx context.Context, tx Querier, jobID string, now time.Time) (bool, error) {
	res, err := tx.ExecContext(ctx, `UPDATE jobs SET mode = 'sync', updated_at = $1 WHERE public_id = $2 AND state = 'accepted' AND mode = 'batch'`,
		micros(now), pub(jobID))
	if err != nil {
		return false, fmt.Errorf("route job to sync: %w", err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// TouchBatch records that a batch was handled now without polling it (a
// lost River job enqueued again), so OverdueBatches leaves it for a while.
func TouchBatch(ctx context.Context, q Querier, batchID string, now time.Time) error {
	if _, err := q.ExecContext(ctx, `UPDATE batches SET updated_at = $1 WHERE id = $2`, micros(now), batchID); err != nil {
		return fmt.Errorf("touch batch: %w", err)
	}
	return nil
}
