package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/openai"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// providerFigures are what `stet bench provider-limited` measures for one
// contender (stet, or the seeds' naive loop).
type providerFigures struct {
	Name        string        `json:"name"`
	Documents   int           `json:"documents"`
	Elapsed     time.Duration `json:"elapsed_ns"`
	LimitShare  float64       `json:"share_of_limit_used"` // admitted calls/s in the steady seconds ÷ RPM/60
	Calls       int           `json:"calls"`
	Limited     int           `json:"calls_answered_429"`
	LimitedRate float64       `json:"share_of_calls_429"`
	P50, P95    time.Duration `json:"-"`
	P50MS       float64       `json:"p50_to_record_ms"`
	P95MS       float64       `json:"p95_to_record_ms"`
	OverheadP95 float64       `json:"ledger_overhead_p95_ms,omitempty"` // stet only
	OverheadP50 float64       `json:"ledger_overhead_p50_ms,omitempty"`
}

type providerBenchOptions struct {
	dir, database string
	binary        string // stet binary for worker processes
	processes     int    // worker processes sharing the limit; > 1 needs --database
	n, rpm        int
	latencyMin    time.Duration
	latencyMax    time.Duration
	concurrency   int
}

// benchProviderLimited measures stet against a fake provider that enforces
// RPM with 1–2 s latency, and, in the same run, the seeds' naive loop
// (send; on 429 sleep Retry-After; resend) against an identical fake.
func benchProviderLimited(ctx context.Context, stdout, stderr io.Writer, o providerBenchOptions, asJSON bool) int {
	run := providerStet
	if o.processes > 1 {
		if o.database == "" {
			fmt.Fprintln(stderr, "stet bench provider-limited: --worker-processes above 1 needs --database postgres://…")
			return exitUsage
		}
		run = providerStetProcesses
	}
	stetFig, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "stet bench provider-limited: stet:", err)
		return exitFailure
	}
	naive, err := providerNaive(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "stet bench provider-limited: naive loop:", err)
		return exitFailure
	}
	settings := fmt.Sprintf("fake OpenAI enforcing %d RPM as a %d-per-second bucket, latency %s–%s; %d documents; concurrency %d; %d stet worker process(es) sharing the limit",
		o.rpm, o.rpm/60, o.latencyMin, o.latencyMax, o.n, o.concurrency, max(o.processes, 1))
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"name": "provider-limited", "settings": settings, "stet": stetFig, "baseline": naive})
		return exitOK
	}
	fmt.Fprintf(stdout, "provider-limited  (%s)\n", settings)
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  \tshare of limit used\tcalls\t429s\tshare 429\tp50 to record\tp95 to record\tledger overhead p50/p95\telapsed")
	for _, f := range []providerFigures{stetFig, naive} {
		over := "-"
		if f.OverheadP95 > 0 {
			over = fmt.Sprintf("%.1f / %.1f ms", f.OverheadP50, f.OverheadP95)
		}
		fmt.Fprintf(tw, "  %s\t%.3f\t%d\t%d\t%.3f\t%s\t%s\t%s\t%s\n", f.Name, f.LimitShare, f.Calls, f.Limited, f.LimitedRate,
			f.P50.Round(time.Millisecond), f.P95.Round(time.Millisecond), over, f.Elapsed.Round(time.Millisecond))
	}
	tw.Flush()
	return exitOK
}

func (o providerBenchOptions) fake() *openaifake.Server {
	return openaifake.New(openaifake.Options{RPM: o.rpm, LimitWindow: time.Second, LimitRetryAfter: true,
		LatencyMin: o.latencyMin, LatencyMax: o.latencyMax, Seed: 1})
}

// limitShare is the mean admitted calls per second over the steady seconds
// (the first and last two seconds of traffic left out) ÷ the limit.
func limitShare(st openaifake.Stats, rpm int) float64 {
	ws := st.Windows
	if len(ws) > 6 {
		ws = ws[2 : len(ws)-2]
	}
	if len(ws) == 0 {
		return 0
	}
	admitted := 0
	for _, w := range ws {
		admitted += w.Admitted
	}
	span := ws[len(ws)-1].Start.Sub(ws[0].Start).Seconds() + 1
	return float64(admitted) / span / (float64(rpm) / 60)
}

func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func providerStet(ctx context.Context, o providerBenchOptions) (providerFigures, error) {
	f := providerFigures{Name: "stet"}
	fake := o.fake()
	defer fake.Close()
	database, drop, err := scratchDatabase(ctx, o.database)
	if err != nil {
		return f, err
	}
	defer drop()
	dir := filepath.Join(o.dir, "stet")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, err
	}
	cfgPath, env, err := writeBenchConfigWith(dir, database, fake.URL(), fmt.Sprintf("{rpm: %d, concurrency: %d}", o.rpm, o.concurrency), o.concurrency)
	if err != nil {
		return f, err
	}
	cfg, err := config.Load(cfgPath, func(k string) string { return env[k] })
	if err != nil {
		return f, err
	}
	a, err := openApp(ctx, cfg, appOptions{role: "all", migrate: true, pollInterval: config.DefaultPollInterval.Std()})
	if err != nil {
		return f, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		a.close()
		return f, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = a.serve(sctx, ln, "all"); close(done) }()
	defer func() { cancel(); <-done; a.close() }()
	b := &benchEnv{base: "http://" + ln.Addr().String(), secret: env["STET_BENCH_SECRET"]}
	start := time.Now()
	jobs, _, err := b.deliverAll(ctx, o.n*5/4, 16) // 20 % duplicates: o.n distinct documents
	if err != nil {
		return f, err
	}
	if err := waitCommitted(ctx, a.db, len(jobs), 30*time.Minute); err != nil {
		return f, err
	}
	f.Elapsed, f.Documents = time.Since(start), len(jobs)
	st := fake.Stats()
	f.Calls, f.Limited = st.Calls, st.Limited
	f.LimitedRate = float64(st.Limited) / float64(max(st.Calls, 1))
	f.LimitShare = limitShare(st, o.rpm)
	toRecord, overhead, err := stageTimes(ctx, a.db.Writer())
	if err != nil {
		return f, err
	}
	f.P50, f.P95 = percentile(toRecord, 0.5), percentile(toRecord, 0.95)
	f.P50MS, f.P95MS = ms(f.P50), ms(f.P95)
	f.OverheadP50, f.OverheadP95 = ms(percentile(overhead, 0.5)), ms(percentile(overhead, 0.95))
	return f, nil
}

// stageTimes reads, per committed job, the time from acceptance to its
// review record, and the ledger's overhead: from the claim of the attempt
// that succeeded to the commit, less that call's provider latency.
func stageTimes(ctx context.Context, db *sql.DB) (toRecord, overhead []time.Duration, err error) {
	// From the claim of the attempt that succeeded: a job whose earlier
	// attempt was answered 429 waited out the provider's Retry-After in
	// between, which is neither the ledger's time nor the provider's latency.
	rows, err := db.QueryContext(ctx, `SELECT j.created_at, t.started_at, j.committed_at, COALESCE(t.latency_ms, 0)
		FROM jobs j JOIN attempts t ON t.job_id = j.id AND t.status = 'succeeded'
		WHERE j.state = 'committed'`)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var created, extracting, committed, latencyMS int64
		if err := rows.Scan(&created, &extracting, &committed, &latencyMS); err != nil {
			return nil, nil, err
		}
		toRecord = append(toRecord, time.Duration(committed-created)*time.Microsecond)
		overhead = append(overhead, time.Duration(committed-extracting)*time.Microsecond-time.Duration(latencyMS)*time.Millisecond)
	}
	return toRecord, overhead, rows.Err()
}

// providerNaive is the seeds' loop: o.concurrency workers each take a
// document, send it, and on a 429 sleep Retry-After (or 1 s) and resend.
func providerNaive(ctx context.Context, o providerBenchOptions) (providerFigures, error) {
	f := providerFigures{Name: "naive loop (baseline)"}
	fake := o.fake()
	defer fake.Close()
	client, err := openai.New(openai.Config{Common: processor.Common{ID: "fake", BaseURL: fake.URL(), APIKey: "sk-bench", Model: "fake-instant", Region: "local", Retention: "none"}})
	if err != nil {
		return f, err
	}
	schema := json.RawMessage(`{"type":"object","additionalProperties":false,"required":["category","severity"],"properties":{"category":{"type":"string","enum":["none","spam","harassment"]},"severity":{"type":"string","enum":["none","low","high"]}}}`)
	var mu sync.Mutex
	var times []time.Duration
	start := time.Now()
	err = parallel(o.n, o.concurrency, func(i int) error {
		// Every document arrives at the start, as the backlog does for stet:
		// its time to result counts from there.
		t0 := start
		text := fmt.Sprintf("Classify this report:\nBenchmark report %d: buy cheap pills now.\n", i)
		for {
			_, err := client.Extract(ctx, stet.ExtractParams{JobID: fmt.Sprint(i), Prompt: stet.NewText(text), Input: stet.NewText(text), SchemaName: "bench_v1", Schema: schema})
			if err == nil {
				break
			}
			if stet.ClassOf(err) != stet.FailureRateLimited {
				return err
			}
			var wait time.Duration
			var pe *stet.ProcessorError
			if errors.As(err, &pe) {
				wait = pe.RetryAfter
			}
			if wait <= 0 {
				wait = time.Second
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
		mu.Lock()
		times = append(times, time.Since(t0))
		mu.Unlock()
		return nil
	})
	if err != nil {
		return f, err
	}
	f.Elapsed, f.Documents = time.Since(start), o.n
	st := fake.Stats()
	f.Calls, f.Limited = st.Calls, st.Limited
	f.LimitedRate = float64(st.Limited) / float64(max(st.Calls, 1))
	f.LimitShare = limitShare(st, o.rpm)
	f.P50, f.P95 = percentile(times, 0.5), percentile(times, 0.95)
	f.P50MS, f.P95MS = ms(f.P50), ms(f.P95)
	return f, nil
}

// providerStetProcesses is providerStet with one api process and
// o.processes worker processes of the real binary sharing the limit through
// their heartbeats.
func providerStetProcesses(ctx context.Context, o providerBenchOptions) (providerFigures, error) {
	f := providerFigures{Name: fmt.Sprintf("stet, %d processes", o.processes)}
	binary := o.binary
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return f, err
		}
		binary = exe
	}
	fake := o.fake()
	defer fake.Close()
	run, err := startProcesses(ctx, filepath.Join(o.dir, "stet-procs"), o.database, binary, o.processes, fake,
		fmt.Sprintf("{rpm: %d, concurrency: %d}", o.rpm, o.concurrency), o.concurrency)
	if err != nil {
		return f, err
	}
	defer run.stop()
	// Let every worker's heartbeat be seen before the load starts.
	time.Sleep(6 * time.Second)
	start := time.Now()
	jobs, _, err := run.bench.deliverAll(ctx, o.n*5/4, 16)
	if err != nil {
		return f, err
	}
	if err := waitCommitted(ctx, run.db, len(jobs), 30*time.Minute); err != nil {
		return f, err
	}
	f.Elapsed, f.Documents = time.Since(start), len(jobs)
	st := fake.Stats()
	f.Calls, f.Limited = st.Calls, st.Limited
	f.LimitedRate = float64(st.Limited) / float64(max(st.Calls, 1))
	f.LimitShare = limitShare(st, o.rpm)
	toRecord, overhead, err := stageTimes(ctx, run.db.Writer())
	if err != nil {
		return f, err
	}
	f.P50, f.P95 = percentile(toRecord, 0.5), percentile(toRecord, 0.95)
	f.P50MS, f.P95MS = ms(f.P50), ms(f.P95)
	f.OverheadP50, f.OverheadP95 = ms(percentile(overhead, 0.5)), ms(percentile(overhead, 0.95))
	return f, nil
}
