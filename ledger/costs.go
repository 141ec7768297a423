package ledger

// Costs (docs/design.md §18): the configured processor prices, recorded
// when they change, and what attempts cost at them.

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Price is a processor's price per million tokens and its batch discount
// (the share off for a provider batch's items).
type Price struct {
	InputPerMTok, OutputPerMTok, BatchDiscount float64
}

// attemptCost is the SQL for the cost in USD of the attempt aliased a: what
// its provider reported it cost, else its tokens at the price of its
// processor in force when it started, less the batch discount for a batch
// item; NULL with neither.
const attemptCost = `COALESCE(a.reported_cost_usd, (SELECT (COALESCE(a.input_tokens, 0) * pp.input_per_mtok + COALESCE(a.output_tokens, 0) * pp.output_per_mtok) / 1000000.0
		* (CASE WHEN a.batch_id IS NULL THEN 1 ELSE 1 - pp.batch_discount END)
	FROM processor_prices pp WHERE pp.processor_id = a.processor_id AND pp.from_at <= a.started_at
	ORDER BY pp.from_at DESC LIMIT 1))`

// RecordPrices records each processor's price where it differs from the
// one in force (a processor without a row and a zero price needs none).
// The process that serves calls it at start.
func (db *DB) RecordPrices(ctx context.Context, prices map[string]Price, now time.Time) error {
	return db.InTx(ctx, func(tx *sql.Tx) error {
		for id, p := range prices {
			var cur Price
			err := tx.QueryRowContext(ctx, `SELECT input_per_mtok, output_per_mtok, batch_discount FROM processor_prices
				WHERE processor_id = $1 ORDER BY from_at DESC, id DESC LIMIT 1`, id).Scan(&cur.InputPerMTok, &cur.OutputPerMTok, &cur.BatchDiscount)
			switch {
			case err == sql.ErrNoRows:
				if p == (Price{}) {
					continue
				}
			case err != nil:
				return fmt.Errorf("read price of %s: %w", id, err)
			case cur == p:
				continue
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO processor_prices (processor_id, input_per_mtok, output_per_mtok, batch_discount, from_at)
				VALUES ($1, $2, $3, $4, $5)`, id, p.InputPerMTok, p.OutputPerMTok, p.BatchDiscount, micros(now)); err != nil {
				return fmt.Errorf("record price of %s: %w", id, err)
			}
		}
		return nil
	})
}

// SpentSince is what processorID's attempts started at or after since
// cost, in every tenant.
func (db *DB) SpentSince(ctx context.Context, processorID string, since time.Time) (float64, error) {
	var spent sql.NullFloat64
	err := db.r.QueryRowContext(ctx, `SELECT SUM(`+attemptCost+`) FROM attempts a WHERE a.processor_id = $1 AND a.started_at >= $2`,
		processorID, micros(since)).Scan(&spent)
	if err != nil {
		return 0, fmt.Errorf("read spend of %s: %w", processorID, err)
	}
	return spent.Float64, nil
}

// CostRow is what one processor or source spent in a window.
type CostRow struct {
	Key          string // the processor's or the source's ID
	Calls        int
	InputTokens  int64
	OutputTokens int64
	CostUSD      float64
	// Unpriced counts the calls whose processor had no price when they
	// started: their tokens are not in CostUSD.
	Unpriced int
}

// Costs sums a tenant's attempts started in [since, until) by processor
// or by source (group "processor" or "source").
func (db *DB) Costs(ctx context.Context, tenant string, since, until time.Time, group string) ([]CostRow, error) {
	col := "a.processor_id"
	switch group {
	case "processor":
	case "source":
		col = "j.source_id"
	default:
		return nil, fmt.Errorf("costs: group %q is not processor or source", group)
	}
	rows, err := db.r.QueryContext(ctx, `SELECT k, COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0),
			COALESCE(SUM(cost), 0), SUM(CASE WHEN cost IS NULL THEN 1 ELSE 0 END)
		FROM (SELECT `+col+` AS k, a.input_tokens, a.output_tokens, `+attemptCost+` AS cost
			FROM attempts a JOIN jobs j ON j.id = a.job_id
			WHERE j.tenant_id = $1 AND a.started_at >= $2 AND a.started_at < $3) c
		GROUP BY k ORDER BY k`, tenant, micros(since), micros(until))
	if err != nil {
		return nil, fmt.Errorf("read costs: %w", err)
	}
	defer rows.Close()
	out := []CostRow{}
	for rows.Next() {
		var r CostRow
		if err := rows.Scan(&r.Key, &r.Calls, &r.InputTokens, &r.OutputTokens, &r.CostUSD, &r.Unpriced); err != nil {
			return nil, fmt.Errorf("read costs: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
