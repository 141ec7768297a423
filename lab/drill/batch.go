package drill

import (
	"context"
	"database/sql"
	"os/exec"
	"strings"
	"syscall"
	"time"

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
	// Reconciled counts the drill's operator decisions on batches that
	// went to unknown (batchOperator): "resubmit" when the provider held
	// no batch of the submission, "adopt" when it held exactly one.
	Reconciled map[string]int `json:"operator_reconciles"`
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

// batchOperator does for the drill what docs/batches.md asks of an operator
// when a batch goes to unknown. A worker killed after recording a submission
// as in flight and before the creating call reached the provider leaves a
// batch that reconciliation cannot establish: the provider's listing shows
// none, and stet does not resubmit on that alone. The operator looks at the
// provider's own records (here, the fake's), then runs stet batch reconcile
// with --resubmit if the provider holds no batch of that submission, or
// --adopt with the one it holds. Each batch is decided once.
type batchOperator struct {
	binary, config string
	env            []string
	fake           *openaifake.Server
	res            *BatchResult
	say            func(string, ...any)
	decided        map[string]bool
}

// tend decides every batch in unknown not decided yet. A failed reconcile
// is tried again on the next look.
func (op *batchOperator) tend(ctx context.Context, db *sql.DB) {
	rows, err := db.QueryContext(ctx, `SELECT id FROM batches WHERE state = 'unknown' ORDER BY id`)
	if err != nil {
		return // the ledger does not answer yet (a restart): the next look
	}
	var ids []string
	for rows.Next() {
		var id string
		if rows.Scan(&id) == nil && !op.decided[id] {
			ids = append(ids, id)
		}
	}
	rows.Close()
	for _, id := range ids {
		var held []string
		for _, pb := range op.fake.Batches() {
			if pb.Label == id {
				held = append(held, pb.ID)
			}
		}
		args := []string{"batch", "reconcile", "--config", op.config, "--actor", "drill-operator"}
		decision := "resubmit"
		switch len(held) {
		case 0:
			args = append(args, "--resubmit", id)
		case 1:
			decision = "adopt"
			args = append(args, "--adopt", held[0], id)
		default:
			op.decided[id] = true // created twice: the checks report it
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		cmd := exec.CommandContext(cctx, op.binary, args...)
		cmd.Env = op.env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			op.say("operator: stet batch reconcile %s --%s failed (%v): %s; trying again", id, decision, err, strings.TrimSpace(string(out)))
			continue
		}
		op.decided[id] = true
		op.res.Reconciled[decision]++
		holds := "none of it"
		if len(held) == 1 {
			holds = "one batch of it"
		}
		op.say("operator: batch %s was unknown; the provider holds %s, so stet batch reconcile --%s", id, holds, decision)
	}
}
