package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/lab/cluster"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/openai"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// ProviderOptions are the settings of ProviderLimited.
type ProviderOptions struct {
	Stet        Stet
	Dir         string // scratch folder
	Database    string // a postgres:// server for a scratch schema; "": a scratch SQLite file
	Binary      string // the stet binary for worker processes; required
	Processes   int    // worker processes sharing the limit; above 1 needs Database
	N           int    // distinct documents
	RPM         int    // the limit the fake enforces and stet is configured with
	LatencyMin  time.Duration
	LatencyMax  time.Duration
	Concurrency int // calls in flight: stet's limits.concurrency and workers, the naive loop's goroutines
}

// Figures are what ProviderLimited measures for one contender (stet, or
// the seeds' naive loop).
type Figures struct {
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

// ProviderResult is what ProviderLimited measures.
type ProviderResult struct {
	Name     string  `json:"name"`
	Settings string  `json:"settings"`
	Stet     Figures `json:"stet"`
	Baseline Figures `json:"baseline"`
}

// ProviderLimited measures stet against a fake provider that enforces RPM
// with o.LatencyMin–o.LatencyMax latency, and, in the same run, the seeds'
// naive loop (send; on 429 sleep Retry-After; resend) against an identical
// fake.
func ProviderLimited(ctx context.Context, o ProviderOptions) (*ProviderResult, error) {
	run := providerStet
	if o.Processes > 1 {
		if o.Database == "" {
			return nil, errors.New("more than one worker process needs --database postgres://…")
		}
		run = providerStetProcesses
	}
	res := &ProviderResult{Name: "provider-limited"}
	var err error
	if res.Stet, err = run(ctx, o); err != nil {
		return nil, fmt.Errorf("stet: %w", err)
	}
	if res.Baseline, err = providerNaive(ctx, o); err != nil {
		return nil, fmt.Errorf("naive loop: %w", err)
	}
	res.Settings = fmt.Sprintf("fake OpenAI enforcing %d RPM as a %d-per-second bucket, latency %s–%s; %d documents; concurrency %d; %d stet worker process(es) sharing the limit",
		o.RPM, o.RPM/60, o.LatencyMin, o.LatencyMax, o.N, o.Concurrency, max(o.Processes, 1))
	return res, nil
}

// WriteText prints the two contenders' figures for a reader.
func (r *ProviderResult) WriteText(w io.Writer) {
	fmt.Fprintf(w, "provider-limited  (%s)\n", r.Settings)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  \tshare of limit used\tcalls\t429s\tshare 429\tp50 to record\tp95 to record\tledger overhead p50/p95\telapsed")
	for _, f := range []Figures{r.Stet, r.Baseline} {
		over := "-"
		if f.OverheadP95 > 0 {
			over = fmt.Sprintf("%.1f / %.1f ms", f.OverheadP50, f.OverheadP95)
		}
		fmt.Fprintf(tw, "  %s\t%.3f\t%d\t%d\t%.3f\t%s\t%s\t%s\t%s\n", f.Name, f.LimitShare, f.Calls, f.Limited, f.LimitedRate,
			f.P50.Round(time.Millisecond), f.P95.Round(time.Millisecond), over, f.Elapsed.Round(time.Millisecond))
	}
	tw.Flush()
}

func (o ProviderOptions) fake() *openaifake.Server {
	return openaifake.New(openaifake.Options{RPM: o.RPM, LimitWindow: time.Second, LimitRetryAfter: true,
		LatencyMin: o.LatencyMin, LatencyMax: o.LatencyMax, Seed: 1})
}

func (o ProviderOptions) limits() string {
	return fmt.Sprintf("{rpm: %d, concurrency: %d}", o.RPM, o.Concurrency)
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

func providerStet(ctx context.Context, o ProviderOptions) (Figures, error) {
	f := Figures{Name: "stet"}
	fake := o.fake()
	defer fake.Close()
	database, drop, err := cluster.ScratchSchema(ctx, o.Database)
	if err != nil {
		return f, err
	}
	defer drop()
	dir := filepath.Join(o.Dir, "stet")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, err
	}
	cfgPath, env, err := writeConfig(dir, database, fake.URL(), o.limits(), o.Concurrency)
	if err != nil {
		return f, err
	}
	cfg, err := loadConfig(cfgPath, env)
	if err != nil {
		return f, err
	}
	b, err := serve(ctx, o.Stet, cfg, OpenOptions{Role: "all", PollInterval: config.DefaultPollInterval.Std()}, env[envSecret])
	if err != nil {
		return f, err
	}
	defer b.stop()
	start := time.Now()
	jobs, _, err := deliverAll(ctx, b.client, o.N*5/4, 16) // 20 % duplicates: o.N distinct documents
	if err != nil {
		return f, err
	}
	return stetFigures(ctx, f, b.app.DB(), fake, o, start, len(jobs))
}

// stetFigures waits for n jobs and fills f from the fake's stats and the
// ledger's stage times.
func stetFigures(ctx context.Context, f Figures, db *ledger.DB, fake *openaifake.Server, o ProviderOptions, start time.Time, n int) (Figures, error) {
	end, err := waitCommitted(ctx, db, n, 30*time.Minute)
	if err != nil {
		return f, err
	}
	f.Elapsed, f.Documents = end.Sub(start), n
	st := fake.Stats()
	f.Calls, f.Limited = st.Calls, st.Limited
	f.LimitedRate = float64(st.Limited) / float64(max(st.Calls, 1))
	f.LimitShare = limitShare(st, o.RPM)
	toRecord, overhead, err := stageTimes(ctx, db.Writer())
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

// providerNaive is the seeds' loop: o.Concurrency workers each take a
// document, send it, and on a 429 sleep Retry-After (or 1 s) and resend.
func providerNaive(ctx context.Context, o ProviderOptions) (Figures, error) {
	f := Figures{Name: "naive loop (baseline)"}
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
	err = parallel(o.N, o.Concurrency, func(i int) error {
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
	f.Elapsed, f.Documents = time.Since(start), o.N
	st := fake.Stats()
	f.Calls, f.Limited = st.Calls, st.Limited
	f.LimitedRate = float64(st.Limited) / float64(max(st.Calls, 1))
	f.LimitShare = limitShare(st, o.RPM)
	f.P50, f.P95 = percentile(times, 0.5), percentile(times, 0.95)
	f.P50MS, f.P95MS = ms(f.P50), ms(f.P95)
	return f, nil
}

// providerStetProcesses is providerStet with one api process and
// o.Processes worker processes of the real binary sharing the limit through
// their heartbeats.
func providerStetProcesses(ctx context.Context, o ProviderOptions) (Figures, error) {
	f := Figures{Name: fmt.Sprintf("stet, %d processes", o.Processes)}
	binary, err := needBinary(o.Binary)
	if err != nil {
		return f, err
	}
	fake := o.fake()
	defer fake.Close()
	run, err := startProcesses(ctx, processOptions{dir: filepath.Join(o.Dir, "stet-procs"), database: o.Database, binary: binary,
		workers: o.Processes, fake: fake, limits: o.limits(), concurrency: o.Concurrency})
	if err != nil {
		return f, err
	}
	defer run.stop()
	// Let every worker's heartbeat be seen before the load starts.
	time.Sleep(6 * time.Second)
	start := time.Now()
	jobs, _, err := deliverAll(ctx, run.client, o.N*5/4, 16)
	if err != nil {
		return f, err
	}
	return stetFigures(ctx, f, run.db, fake, o, start, len(jobs))
}
