// Package metrics holds stet's Prometheus metrics. Every label is an ID or
// a class from a closed list: never document text, never an external ID.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stetlabs/stet"
)

// Metrics is one registry and stet's collectors on it.
type Metrics struct {
	Registry      *prometheus.Registry
	Intake        *prometheus.CounterVec   // stet_intake_requests_total{status}
	StageDuration *prometheus.HistogramVec // stet_stage_duration_seconds{stage,outcome}
	ProviderCalls *prometheus.CounterVec   // stet_provider_calls_total{processor,failure_class}
	Alerts        *prometheus.CounterVec   // stet_alerts_total{kind}
	Violations    *prometheus.GaugeVec     // stet_invariant_violations{invariant}
	Deliveries    *prometheus.CounterVec   // stet_deliveries_total{source,destination,outcome}
	// Cost, time to record and time to decision (docs/design.md §18).
	CostUSD        *prometheus.CounterVec   // stet_cost_usd_total{processor}
	TimeToRecord   *prometheus.HistogramVec // stet_time_to_record_seconds{source}
	TimeToDecision *prometheus.HistogramVec // stet_time_to_decision_seconds{source}
}

// JobCounter counts jobs by state, for the queue-depth gauge.
type JobCounter interface {
	JobCounts(ctx context.Context) (map[stet.JobState]int, error)
}

// New registers stet's metrics. jobs, if non-nil, is read for
// stet_jobs{state} at a scrape (see jobsCollector for how often).
func New(jobs JobCounter, log *slog.Logger) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		Intake: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stet_intake_requests_total", Help: "Intake requests by HTTP status.",
		}, []string{"status"}),
		StageDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stet_stage_duration_seconds", Help: "Duration of one stage execution.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"stage", "outcome"}),
		ProviderCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stet_provider_calls_total", Help: "Processor calls by processor and failure class (ok for success).",
		}, []string{"processor", "failure_class"}),
		Alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stet_alerts_total", Help: "Alerts raised, by kind.",
		}, []string{"kind"}),
		Violations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stet_invariant_violations", Help: "Violations found by the last periodic invariant check, by invariant (docs/design.md §6).",
		}, []string{"invariant"}),
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stet_deliveries_total", Help: "Outbound webhook POSTs by source, destination and outcome (delivered, retry, gone); source * is the alert webhook.",
		}, []string{"source", "destination", "outcome"}),
		CostUSD: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stet_cost_usd_total", Help: "What processor calls cost, in USD, from their token counts at processors[].price (batch items less the batch discount).",
		}, []string{"processor"}),
		TimeToRecord: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stet_time_to_record_seconds", Help: "From a revision's acceptance to its review record (extracted or manual), by source.",
			Buckets: prometheus.ExponentialBuckets(0.05, 4, 10),
		}, []string{"source"}),
		TimeToDecision: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stet_time_to_decision_seconds", Help: "From a revision's acceptance to its record's first decision, by source.",
			Buckets: prometheus.ExponentialBuckets(60, 3, 10),
		}, []string{"source"}),
	}
	reg.MustRegister(m.Intake, m.StageDuration, m.ProviderCalls, m.Alerts, m.Violations, m.Deliveries,
		m.CostUSD, m.TimeToRecord, m.TimeToDecision,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if jobs != nil {
		reg.MustRegister(&jobsCollector{jobs: jobs, log: log, now: time.Now,
			desc: prometheus.NewDesc("stet_jobs", "Jobs by state (queue depth).", []string{"state"}, nil)})
	}
	return m
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// jobsCollector reads the job counts for a scrape, or gives the last ones
// again while they are younger than countReuse times the time reading them
// took (and at most maxCountAge). Counting reads every job, so with a
// million in the ledger one count takes long enough that a scrape every few
// seconds would keep the database busy; this way counting costs at most
// about 1/countReuse of the time however often the scrape comes. A ledger
// that counts in a millisecond is counted afresh at every scrape more than
// 200 ms after the last.
type jobsCollector struct {
	jobs JobCounter
	log  *slog.Logger
	desc *prometheus.Desc
	now  func() time.Time

	mu     sync.Mutex
	counts map[stet.JobState]int
	at     time.Time     // when counts were read
	took   time.Duration // how long reading them took
}

const (
	countReuse  = 200
	maxCountAge = time.Minute
)

func (c *jobsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *jobsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	start := c.now()
	if c.counts == nil || start.Sub(c.at) >= min(countReuse*c.took, maxCountAge) || start.Before(c.at) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		counts, err := c.jobs.JobCounts(ctx)
		cancel()
		if err != nil {
			if c.log != nil {
				c.log.Warn("count jobs for metrics", "err", err)
			}
			return
		}
		c.counts, c.at, c.took = counts, start, c.now().Sub(start)
	}
	for _, s := range stet.JobStates {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(c.counts[s]), string(s))
	}
}
