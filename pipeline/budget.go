package pipeline

// Cost and budgets (docs/design.md §18). Every finished call adds what its
// provider reported it cost, else its tokens at its processor's price, to
// stet_cost_usd_total; a processor with
// a day's budget is admitted only while what was spent today (every
// process's attempts, read from the ledger at most every few seconds, plus
// this process's calls since) and the estimated cost of this process's
// calls in flight stay under the cap. At the cap the processor pauses
// itself, with a processor.budget_exhausted alert, until the next UTC day
// (the leader lifts the pause) or an operator's resume.

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// spentRefresh is how old the ledger's figure of a day's spend may get
// before a budget check reads it again.
const spentRefresh = 5 * time.Second

// budgets holds the day's spend and the calls in flight, by processor.
type budgets struct {
	mu       sync.Mutex
	day      time.Time // the UTC day the figures are of
	spent    map[string]float64
	readAt   map[string]time.Time
	inflight map[string]float64
}

// cost is what a call of processorID with these token counts costs; ok is
// false when the processor has no price.
func (p *Pipeline) cost(processorID string, in, out int, batch bool) (float64, bool) {
	pr, ok := p.cfg.Prices[processorID]
	if !ok || pr == (ledger.Price{}) {
		return 0, false
	}
	c := (float64(in)*pr.InputPerMTok + float64(out)*pr.OutputPerMTok) / 1e6
	if batch {
		c *= 1 - pr.BatchDiscount
	}
	return c, true
}

// countCost records a finished call's cost in the metric and the day's
// spend: what the provider reported, else its tokens at the price.
func (p *Pipeline) countCost(processorID string, ext *stet.Extraction, batch bool) {
	var c float64
	var ok bool
	if ext.CostUSD != nil {
		c, ok = *ext.CostUSD, true
	} else {
		c, ok = p.cost(processorID, ext.InputTokens, ext.OutputTokens, batch)
	}
	if !ok {
		return
	}
	p.cfg.Metrics.CostUSD.WithLabelValues(processorID).Add(c)
	b := &p.budget
	b.mu.Lock()
	if b.spent != nil {
		b.spent[processorID] += c
	}
	b.mu.Unlock()
}

// reserveBudget admits a call of processorID estimated at estTokens
// against the processor's day budget: while the day's spend and the calls
// in flight stay under the cap it counts the call in flight and returns
// its release (call it when the call returned); at the cap it pauses the
// processor and returns ok false. A processor without a budget is always
// admitted.
func (p *Pipeline) reserveBudget(ctx context.Context, log *slog.Logger, processorID string, estTokens int) (release func(), ok bool, err error) {
	limit := p.cfg.Budgets[processorID]
	if limit <= 0 {
		return func() {}, true, nil
	}
	now := p.clock.Now().UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	b := &p.budget
	b.mu.Lock()
	if !b.day.Equal(day) || b.spent == nil {
		b.day, b.spent, b.readAt = day, map[string]float64{}, map[string]time.Time{}
		if b.inflight == nil {
			b.inflight = map[string]float64{}
		}
	}
	stale := now.Sub(b.readAt[processorID]) > spentRefresh
	b.mu.Unlock()
	if stale {
		spent, err := p.db.SpentSince(ctx, processorID, day)
		if err != nil {
			return nil, false, err
		}
		b.mu.Lock()
		if b.day.Equal(day) {
			b.spent[processorID], b.readAt[processorID] = spent, now
		}
		b.mu.Unlock()
	}
	est, _ := p.cost(processorID, estTokens-estimatedOutputTokens, estimatedOutputTokens, false)
	b.mu.Lock()
	used := b.spent[processorID] + b.inflight[processorID]
	if used >= limit {
		b.mu.Unlock()
		isNew, err := p.db.PauseForBudget(ctx, processorID, limit, now)
		if err != nil {
			return nil, false, err
		}
		if isNew {
			p.alert(log, "processor.budget_exhausted", "processor", processorID)
		}
		return nil, false, nil
	}
	b.inflight[processorID] += est
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			b.inflight[processorID] -= est
			b.mu.Unlock()
		})
	}, true, nil
}

// liftBudgetPauses resumes the processors a budget paused on an earlier
// UTC day; the leader runs it with the invariant checks.
func (p *Pipeline) liftBudgetPauses(ctx context.Context) {
	now := p.clock.Now().UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	scopes, err := p.db.LiftBudgetPauses(ctx, day)
	if err != nil {
		p.log.Warn("lift budget pauses failed", "err", err)
		return
	}
	for _, sc := range scopes {
		p.log.Info("budget pause lifted: a new UTC day", "scope", sc)
	}
}
