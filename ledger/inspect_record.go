package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stetlabs/stet"
)

// RecordMeta describes a job's review record without its classification
// or note: what stet inspect shows of it.
type RecordMeta struct {
	ID            string
	Kind          stet.RecordKind
	Authoritative bool
	FailureClass  stet.FailureClass // why a manual record is manual
	CreatedAt     time.Time
}

// jobRecordMeta reads the review record of jobID; nil when it has none.
func jobRecordMeta(ctx context.Context, q Querier, jobID string) (*RecordMeta, error) {
	var m RecordMeta
	var kind string
	var failure sql.NullString
	var created int64
	err := q.QueryRowContext(ctx, `SELECT public_id, kind, authoritative, failure_class, created_at FROM review_records
		WHERE job_id = `+jobKeySQL("$1"), pub(jobID)).
		Scan(recordPub(&m.ID), &kind, &m.Authoritative, &failure, &created)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read review record: %w", err)
	}
	m.Kind, m.FailureClass, m.CreatedAt = stet.RecordKind(kind), stet.FailureClass(failure.String), time.UnixMicro(created).UTC()
	return &m, nil
}
