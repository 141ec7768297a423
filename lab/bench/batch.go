package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// BatchOptions are the settings of Batch.
type BatchOptions struct {
	Stet      Stet
	Dir       string // scratch folder
	N         int    // documents to backfill
	BatchSize int    // the processor's batch max_items
}

// BatchResult is what Batch measures.
type BatchResult struct {
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

// Batch backfills o.N documents through stet import --mode batch into the
// OpenAI fake's Batch API, and measures wall time, the ledger's time per
// item beyond the time batches spent at the provider, and the provider
// calls made (a handful of submissions and polls, not N requests). The
// baseline is the naive backfill's N synchronous requests.
func Batch(ctx context.Context, o BatchOptions) (*BatchResult, error) {
	fake := openaifake.New(openaifake.Options{})
	defer fake.Close()
	cfgPath, env, err := writeConfig(o.Dir, "", fake.URL(), "", 16)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, err
	}
	y := strings.Replace(string(b), "retention: none", fmt.Sprintf("retention: none, batch: {max_items: %d, max_wait: 2s, poll_first: 500ms, poll_max: 2s}", o.BatchSize), 1)
	y = strings.Replace(y, "workers: {concurrency: 16}", "workers: {concurrency: 16, assemble_every: 250ms}", 1)
	if err := os.WriteFile(cfgPath, []byte(y), 0o600); err != nil {
		return nil, err
	}
	file := filepath.Join(o.Dir, "backfill.ndjson")
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	for i := range o.N {
		line, _ := json.Marshal(map[string]any{"external_id": fmt.Sprintf("doc-%06d", i), "revision": 1,
			"text": fmt.Sprintf("Backfill report %d: call 555-01%02d about the account. You are all idiots.", i, i%100)})
		f.Write(append(line, '\n'))
	}
	if err := f.Close(); err != nil {
		return nil, err
	}

	res := &BatchResult{Documents: o.N, BatchSize: o.BatchSize}
	start := time.Now()
	if err := o.Stet.Import(ctx, []string{"--config", cfgPath, "--source", source, "--mode", "batch", file}); err != nil {
		return nil, err
	}
	res.Import = time.Since(start)

	cfg, err := loadConfig(cfgPath, env)
	if err != nil {
		return nil, err
	}
	a, err := o.Stet.Open(ctx, cfg, OpenOptions{Role: "all", PollInterval: 20 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	defer a.Close()
	// The workers run; the API listens on loopback and nobody calls it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() { _ = a.Serve(sctx, ln); close(served) }()
	defer func() { cancel(); <-served }()
	db := a.DB().Writer()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM review_records`).Scan(&res.Records); err != nil {
			return nil, err
		}
		if res.Records >= o.N {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%d of %d records after 10 minutes", res.Records, o.N)
		}
		time.Sleep(50 * time.Millisecond)
	}
	res.Wall = time.Since(start)

	// Time batches spent at the provider: the union of [submitted, ended].
	rows, err := db.QueryContext(ctx, `SELECT submitted_at, ended_at FROM batches WHERE submitted_at IS NOT NULL AND ended_at IS NOT NULL`)
	if err != nil {
		return nil, err
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
	res.OverheadPerItem = (res.Wall - res.ProviderWait) / time.Duration(o.N)
	st := fake.BatchStats()
	res.Uploads, res.CreateCalls, res.StatusCalls, res.ListCalls, res.ResultFetches = st.Uploads, st.CreateCalls, st.StatusCalls, st.ListCalls, st.ResultFetches
	res.SyncCalls = fake.Calls()
	return res, nil
}

// WriteText prints the backfill's figures for a reader.
func (r *BatchResult) WriteText(w io.Writer) {
	calls := r.Uploads + r.CreateCalls + r.StatusCalls + r.ListCalls + r.ResultFetches + r.SyncCalls
	fmt.Fprintf(w, "batch backfill  (%d documents through stet import --mode batch, OpenAI Batch API fake, max_items %d, SQLite)\n", r.Documents, r.BatchSize)
	fmt.Fprintf(w, "  wall time, import to last record   %s  (import %s)\n", r.Wall.Round(time.Millisecond), r.Import.Round(time.Millisecond))
	fmt.Fprintf(w, "  time batches spent at the provider %s\n", r.ProviderWait.Round(time.Millisecond))
	fmt.Fprintf(w, "  ledger overhead per item           %s\n", r.OverheadPerItem.Round(time.Microsecond))
	fmt.Fprintf(w, "  batches                            %d\n", r.Batches)
	fmt.Fprintf(w, "  provider calls                     %d  (uploads %d, creates %d, status %d, lists %d, result fetches %d, sync %d)\n",
		calls, r.Uploads, r.CreateCalls, r.StatusCalls, r.ListCalls, r.ResultFetches, r.SyncCalls)
	fmt.Fprintf(w, "  baseline (a request per document)  %d calls  (ratio %.4f)\n", r.Documents, float64(calls)/float64(r.Documents))
	fmt.Fprintf(w, "  review records                     %d\n", r.Records)
}
