package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger/postgres"
	"github.com/stetlabs/stet/seal"
)

// The save statements are the PostgreSQL driver's (ledger/postgres/save.go).
const (
	qSaveResult       = postgres.SaveResult
	qSaveResultCommit = postgres.SaveResultCommit
)

// saveResultArgs seals and packs p's values under dk and returns the
// arguments of stet_save_result and the review record's new ID ("" when p
// does not commit).
func saveResultArgs(dk *seal.DataKey, p SaveResultParams) ([]any, string, error) {
	id := ArtifactID("", p.JobID)
	raw, err := packRaw(dk, id, p.Raw)
	if err != nil {
		return nil, "", err
	}
	output, err := sealString(dk, colArtifactOutput, id, string(p.Output))
	if err != nil {
		return nil, "", err
	}
	var record string
	var class sql.NullString
	if p.Commit {
		record = stet.NewID(prefixRecord, p.Now)
		if class, err = sealValue(dk, colClassification, record, nullString(string(p.Output))); err != nil {
			return nil, "", err
		}
	}
	r := p.Attempt
	return []any{pub(p.JobID), p.Token, micros(p.Now), p.ProcessorID,
		p.AttemptN, raw, output, p.SchemaVersion, nullString(p.Model),
		string(r.Status), nullString(string(r.FailureClass)), nullString(r.RequestID),
		sql.NullInt64{Int64: int64(r.StatusCode), Valid: r.StatusCode != 0},
		r.InputTokens, r.OutputTokens, r.Latency.Milliseconds(), micros(r.Now),
		blob(pub(record)), class}, record, nil
}

// ErrSaveApart is SaveResultCommit's answer when the result was not
// committed whole (the fence lost, a destination configured, the record
// part failed): nothing was kept, and the caller saves the result again
// with SaveResult in a transaction of its own, which tells it which.
var ErrSaveApart = errors.New("the stage result is saved in a transaction of its own")

// savesCommitted reports whether SaveResultCommit can save and commit p in
// one round trip on this handle: on PostgreSQL without encryption, when a
// commit is asked and the source has no destination.
func (db *DB) savesCommitted(p SaveResultParams) bool {
	if db.dialect.name != Postgres || db.keys != nil || !p.Commit || p.Part {
		return false
	}
	dest := db.destSources.Load()
	return dest == nil || !(*dest)[p.SourceID]
}

// SaveResultCommit is SaveResult with p.Commit in a transaction of its own
// that it commits, in one round trip to PostgreSQL: BEGIN,
// stet_save_result_commit and COMMIT, sent as one pgx batch on a
// connection of the writer pool. The COMMIT rides behind the statement
// only because the statement aborts the transaction (SQLSTATE ST002)
// unless the artifact, the attempt and the review record were all written.
// It returns the review record's ID; an error wrapping ErrCommit when the
// COMMIT itself failed; ErrSaveApart, with nothing kept, when the caller is
// to save the result with SaveResult in a transaction instead: at once
// where the one round trip cannot hold the whole result (SQLite; a data
// key with encryption on, a statement of its own; no commit asked; a
// source whose records go to destinations, whose outbox rows WriteRecord
// writes), and after the round trip when the fence or the record part
// did not hold. Callers always call it first and never ask which.
func (db *DB) SaveResultCommit(ctx context.Context, p SaveResultParams) (string, error) {
	if !db.savesCommitted(p) {
		return "", ErrSaveApart
	}
	args, record, err := saveResultArgs(nil, p)
	if err != nil {
		return "", err
	}
	err = db.onPgx(ctx, ErrSaveApart, func(c *pgx.Conn) error { return saveCommitted(ctx, c, args, p.JobID, p.Attempt) })
	if err != nil {
		return "", err
	}
	return record, nil
}

// qSetReportedCost records a provider's own cost figure on attempt $3 of
// job $2: stet_save_result has no parameter for it, so it rides in the
// same transaction, after the function.
var qSetReportedCost = `UPDATE attempts SET reported_cost_usd = $1 WHERE job_id = ` + jobKeySQL("$2") + ` AND n = $3`

func saveCommitted(ctx context.Context, c *pgx.Conn, args []any, jobID string, r AttemptResult) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(qSaveResultCommit, args...)
	if r.ReportedCostUSD != nil {
		b.Queue(qSetReportedCost, *r.ReportedCostUSD, pub(jobID), r.N)
	}
	b.Queue("COMMIT")
	br := c.SendBatch(ctx, b)
	_, err := br.Exec()
	if err != nil {
		err = fmt.Errorf("begin: %w", err)
	} else {
		var outcome string
		if err = br.QueryRow().Scan(&outcome); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "ST002" {
				err = ErrSaveApart
			} else {
				err = fmt.Errorf("save result: %w", err)
			}
		}
	}
	if err == nil && r.ReportedCostUSD != nil {
		if _, err = br.Exec(); err != nil {
			err = fmt.Errorf("save result: reported cost: %w", err)
		}
	}
	if err != nil {
		// The statement failed, so PostgreSQL skipped the COMMIT and the
		// transaction is aborted. A connection returned to the pool inside
		// a transaction is discarded (pgx's ResetSession), so a ROLLBACK
		// that fails costs only the connection.
		_ = br.Close()
		_, _ = c.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		return err
	}
	return commitBatch(ctx, c, br)
}
