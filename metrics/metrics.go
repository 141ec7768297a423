// Package metrics holds stet's Prometheus metrics. Every label is an ID or
// a class from a closed list: never document text, never an external ID.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
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
}

// JobCounter counts jobs by state, for the queue-depth gauge.
type JobCounter interface {
	JobCounts(ctx context.Context) (map[stet.JobState]int, error)
}

// New registers stet's metrics. jobs, if non-nil, is read at every scrape
// for stet_jobs{state}.
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
			Name: "stet_invariant_violations", Help: "Violations found by the last periodic invariant check, by invariant (DESIGN §6).",
		}, []string{"invariant"}),
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stet_deliveries_total", Help: "Outbound webhook POSTs by source, destination and outcome (delivered, retry, gone); source * is the alert webhook.",
		}, []string{"source", "destination", "outcome"}),
	}
	reg.MustRegister(m.Intake, m.StageDuration, m.ProviderCalls, m.Alerts, m.Violations, m.Deliveries,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if jobs != nil {
		reg.MustRegister(&jobsCollector{jobs: jobs, log: log, desc: prometheus.NewDesc("stet_jobs", "Jobs by state (queue depth).", []string{"state"}, nil)})
	}
	return m
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

type jobsCollector struct {
	jobs JobCounter
	log  *slog.Logger
	desc *prometheus.Desc
}

func (c *jobsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *jobsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.jobs.JobCounts(ctx)
	if err != nil {
		if c.log != nil {
			c.log.Warn("count jobs for metrics", "err", err)
		}
		return
	}
	for _, s := range stet.JobStates {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
}
