package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// batchBenchResult is what stet bench batch measures.
type batchBenchResult struct {
	Documents       int           `json:"documents"`
	BatchSize       int           `json:"batch_max_items"`
	Import          time.Duration `json:"import_ns"`
	Wall            time.Duration `json:"wall_ns"` // import start to the last review record
	ProviderWait    time.Duration `json:"provider_wait_ns"`
	OverheadPerItem time.Duration `json:"ledger_overhead_per_item_ns"`
	Batches         int           `json:"batches"`
	Uploads         int           `json:"provider_uploads"`
	CreateCalls     int           `json:"provider_create_calls"`
	StatusCalls     int           `json:"provider_status_calls"`
	ListCalls       int           `json:"provider_list_calls"`
	ResultFetches   int           `json:"provider_result_fetches"`
	SyncCalls       int           `json:"provider_sync_calls"`
	Records         int           `json:"review_records"`
}

// benchBatch backfills n documents through stet import --mode batch into
// the OpenAI fake's Batch API, and measures wall time, the ledger's time
// per item beyond the time batches spent at the provider, and the provider
// calls made (a handful of submissions and polls, not n requests). The
// baseline is the naive backfill's n synchronous requests.
func benchBatch(ctx context.Context, stdout, stderr io.Writer, dir string, n, batchSize int, asJSON bool) int {
	fake := openaifake.New(openaifake.Options{})
	defer fake.Close()
	cfgPath, env, err := writeBenchConfig(dir, "", fake.URL())
	if err != nil {
		fmt.Fprintln(stderr, "stet bench:", err)
		return exitFailure
	}
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "stet bench:", err)
		return exitFailure
	}
	y := strings.Replace(string(b), "retention: none", fmt.Sprintf("retention: none, batch: {max_items: %d, max_wait: 2s, poll_first: 500ms, poll_max: 2s}", batchSize), 1)
	y = strings.Replace(y, "workers: {concurrency: 16}", "workers: {concurrency: 16, assemble_every: 250ms}", 1)
	if err := os.WriteFile(cfgPath, []byte(y), 0o600); err != nil {
		fmt.Fprintln(stderr, "stet bench:", err)
		return exitFailure
	}
	file := filepath.Join(dir, "backfill.ndjson")
	f, err := os.Create(file)
	if err != nil {
		fmt.Fprintln(stderr, "stet bench:", err)
		return exitFailure
	}
	for i := range n {
		line, _ := json.Marshal(map[string]any{"external_id": fmt.Sprintf("doc-%06d", i), "revision": 1,
			"text": fmt.Sprintf("Backfill report %d: call 555-01%02d about the account. You are all idiots.", i, i%100)})
		f.Write(append(line, '\n'))
	}
	if err := f.Close(); err != nil {
		fmt.Fprintln(stderr, "stet bench:", err)
		return exitFailure
	}

	res := batchBenchResult{Documents: n, BatchSize: batchSize}
	start := time.Now()
	if code := cmdImport(ctx, []string{"--config", cfgPath, "--source", "bench", "--mode", "batch", file}, io.Discard, io.Discard); code != exitOK {
		fmt.Fprintf(stderr, "stet bench: import exited %d\n", code)
		return exitFailure
	}
	res.Import = time.Since(start)

	cfg, err := config.Load(cfgPath, func(k string) string { return env[k] })
	if err != nil {
		fmt.Fprintln(stderr, "stet bench:", err)
		return exitFailure
	}
	a, err := openApp(ctx, cfg, appOptions{role: "all", migrate: true, pollInterval: 20 * time.Millisecond, logger: newLogger(io.Discard, "error")})
	if err != nil {
		fmt.Fprintln(stderr, "stet bench:", err)
		return exitFailure
	}
	defer a.close()
	if err := a.pipeline.Start(ctx); err != nil {
		fmt.Fprintln(stderr, "stet bench:", err)
		return exitFailure
	}
	defer a.pipeline.Stop(context.WithoutCancel(ctx))
	db := a.db.Writer()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM review_records`).Scan(&res.Records); err != nil {
			fmt.Fprintln(stderr, "stet bench:", err)
			return exitFailure
		}
		if res.Records >= n {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			fmt.Fprintf(stderr, "stet bench: %d of %d records after 10 minutes\n", res.Records, n)
			return exitFailure
		}
		time.Sleep(50 * time.Millisecond)
	}
	res.Wall = time.Since(start)

	// Time batches spent at the provider: the union of [submitted, ended].
	rows, err := db.QueryContext(ctx, `SELECT submitted_at, ended_at FROM batches WHERE submitted_at IS NOT NULL AND ended_at IS NOT NULL`)
	if err != nil {
		fmt.Fprintln(stderr, "stet bench:", err)
		return exitFailure
	}
	type span struct{ from, to int64 }
	var spans []span
	for rows.Next() {
		var s span
		if err := rows.Scan(&s.from, &s.to); err == nil {
			spans = append(spans, s)
		}
	}
	rows.Close()
	res.Batches = len(spans)
	sort.Slice(spans, func(i, j int) bool { return spans[i].from < spans[j].from })
	var waitUS, curFrom, curTo int64
	for i, s := range spans {
		switch {
		case i == 0:
			curFrom, curTo = s.from, s.to
		case s.from <= curTo:
			curTo = max(curTo, s.to)
		default:
			waitUS += curTo - curFrom
			curFrom, curTo = s.from, s.to
		}
	}
	if len(spans) > 0 {
		waitUS += curTo - curFrom
	}
	res.ProviderWait = time.Duration(waitUS) * time.Microsecond
	res.OverheadPerItem = (res.Wall - res.ProviderWait) / time.Duration(n)
	st := fake.BatchStats()
	res.Uploads, res.CreateCalls, res.StatusCalls, res.ListCalls, res.ResultFetches = st.Uploads, st.CreateCalls, st.StatusCalls, st.ListCalls, st.ResultFetches
	res.SyncCalls = fake.Calls()

	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
		return exitOK
	}
	calls := res.Uploads + res.CreateCalls + res.StatusCalls + res.ListCalls + res.ResultFetches + res.SyncCalls
	fmt.Fprintf(stdout, "batch backfill  (%d documents through stet import --mode batch, OpenAI Batch API fake, max_items %d, SQLite)\n", n, batchSize)
	fmt.Fprintf(stdout, "  wall time, import to last record   %s  (import %s)\n", res.Wall.Round(time.Millisecond), res.Import.Round(time.Millisecond))
	fmt.Fprintf(stdout, "  time batches spent at the provider %s\n", res.ProviderWait.Round(time.Millisecond))
	fmt.Fprintf(stdout, "  ledger overhead per item           %s\n", res.OverheadPerItem.Round(time.Microsecond))
	fmt.Fprintf(stdout, "  batches                            %d\n", res.Batches)
	fmt.Fprintf(stdout, "  provider calls                     %d  (uploads %d, creates %d, status %d, lists %d, result fetches %d, sync %d)\n",
		calls, res.Uploads, res.CreateCalls, res.StatusCalls, res.ListCalls, res.ResultFetches, res.SyncCalls)
	fmt.Fprintf(stdout, "  baseline (a request per document)  %d calls  (ratio %.4f)\n", n, float64(calls)/float64(n))
	fmt.Fprintf(stdout, "  review records                     %d\n", res.Records)
	return exitOK
}
