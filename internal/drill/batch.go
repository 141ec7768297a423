package drill

import (
	"context"
	"database/sql"

	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// BatchResult is the batch-fault variant's outcome (Options.BatchFaults).
type BatchResult struct {
	// Armed counts worker processes started with each crash point,
	// Crashes those that reached it.
	Armed   map[string]int `json:"armed"`
	Crashes map[string]int `json:"crashes"`
	// Jobs are the ledger's batch-mode jobs.
	Jobs          int `json:"jobs"`
	JobsCommitted int `json:"jobs_committed"`
	JobsManual    int `json:"jobs_manual"`
	// Ledger counts the ledger's batches by state.
	Ledger        int            `json:"ledger_batches"`
	LedgerByState map[string]int `json:"ledger_batches_by_state"`
	// Creates are the batches the fake provider created (those whose answer
	// was lost included), CreateCalls its POST /v1/batches, Distinct the
	// stet batch IDs they carry. CreatedTwice counts stet batches created
	// more than once; Unknown, provider batches without a ledger batch.
	Creates      int `json:"provider_creates"`
	CreateCalls  int `json:"provider_create_calls"`
	Distinct     int `json:"distinct_batches"`
	CreatedTwice int `json:"created_twice"`
	Unknown      int `json:"unknown_to_ledger"`
	// Unfinished counts the ledger's batches stet still had to move on by
	// itself after the drain: not yet ended at the provider, or ended and
	// not yet applied. (A batch in unknown waits for an operator; it shows
	// in LedgerByState.)
	Unfinished int `json:"unfinished"`
}

// evaluateBatches fills b from the ledger and the fake's batches.
func evaluateBatches(ctx context.Context, b *BatchResult, db *sql.DB, fake *openaifake.Server) error {
	err := db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(*) FILTER (WHERE state = 'committed'), COUNT(*) FILTER (WHERE state = 'manual')
		FROM jobs WHERE mode = 'batch'`).Scan(&b.Jobs, &b.JobsCommitted, &b.JobsManual)
	if err != nil {
		return err
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM batches WHERE `+unfinishedBatch).Scan(&b.Unfinished); err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, `SELECT id, state FROM batches`)
	if err != nil {
		return err
	}
	defer rows.Close()
	ledger := map[string]bool{}
	b.LedgerByState = map[string]int{}
	for rows.Next() {
		var id, state string
		if err := rows.Scan(&id, &state); err != nil {
			return err
		}
		ledger[id] = true
		b.Ledger++
		b.LedgerByState[state]++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	st := fake.BatchStats()
	b.Creates, b.CreateCalls = st.Created, st.CreateCalls
	per := map[string]int{}
	for _, pb := range fake.Batches() {
		per[pb.Label]++
	}
	b.Distinct = len(per)
	for label, n := range per {
		if n > 1 {
			b.CreatedTwice++
		}
		if !ledger[label] {
			b.Unknown++
		}
	}
	return nil
}

// unfinishedBatch selects the batches stet moves on by itself that have not
// ended: waiting to be submitted or polled, or ended at the provider and not
// yet applied.
const unfinishedBatch = `(state IN ('intent', 'submitted', 'in_progress') OR (state IN ('completed', 'failed', 'expired', 'cancelled') AND applied_at IS NULL))`
