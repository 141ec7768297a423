package bench

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/riverqueue/river"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/internal/stetclient"
	"github.com/stetlabs/stet/lab/cluster"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/ledger/ledgertest"
	"github.com/stetlabs/stet/pipeline"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// MemoryOptions are the settings of Memory.
type MemoryOptions struct {
	Stet     Stet
	Dir      string        // scratch folder
	Database string        // a postgres:// server for a scratch schema; "": a scratch SQLite file
	N        int           // queued documents (100k, 1M)
	Window   time.Duration // each measuring window; default 10s
	Settle   time.Duration // wait after a change before measuring; default 5s
	Storage  int           // documents taken through the pipeline for the storage figure; default 5000
	// PausedProfile, if set, is a file for a CPU profile of stet's paused
	// window alone.
	PausedProfile string
}

// MemoryPhase is one measuring window.
type MemoryPhase struct {
	Subject   string        `json:"subject"` // stet | river
	Phase     string        `json:"phase"`   // paused | draining
	Queued    int           `json:"queued"`
	RSSMiB    float64       `json:"rss_mib"`
	HeapMiB   float64       `json:"heap_inuse_mib"`
	CPUShare  float64       `json:"cpu_share_of_a_core"`
	Claims    int           `json:"claims_in_window"`    // River job rows attempted during the window
	Processed int           `json:"processed_in_window"` // documents committed (stet) or jobs completed (river)
	Window    time.Duration `json:"window_ns"`
}

// TableBytes is one table's share of the ledger, indexes included.
type TableBytes struct {
	Table string `json:"table"`
	Bytes int64  `json:"bytes"`
	Rows  int64  `json:"rows"`
	// LiveBytes (PostgreSQL) is the table with its indexes once VACUUM
	// FULL has rewritten them: the rows and index entries alone, without
	// the space VACUUM freed (dead row versions, the entries that pointed
	// at them) that PostgreSQL keeps allocated for later rows.
	LiveBytes int64 `json:"live_bytes,omitempty"`
}

// MemoryResult is what Memory measures.
type MemoryResult struct {
	Settings string        `json:"settings"`
	Fill     time.Duration `json:"fill_ns"` // stet import of the N documents
	// PauseSettled is how long after stet started every queued job showed
	// as waiting on the pause.
	PauseSettled time.Duration `json:"pause_settled_ns"`
	Phases       []MemoryPhase `json:"phases"`
	// Storage: Documents taken through the whole pipeline; ledger bytes per
	// document besides its text, by table; the baseline is a one-table
	// store of the same texts (id primary key, text).
	Documents         int          `json:"storage_documents"`
	TextBytes         float64      `json:"text_bytes_per_document"`
	BytesPerDoc       float64      `json:"ledger_bytes_per_document_besides_text"`
	BaselineBytes     float64      `json:"baseline_bytes_per_document_besides_text"`
	Tables            []TableBytes `json:"tables"`
	RiverRowsRetained int64        `json:"river_rows_retained"`
	// RiverBytesPerDoc is River's rows' share of BytesPerDoc: completed
	// stage jobs, kept for River's completed-job retention, then deleted.
	RiverBytesPerDoc float64 `json:"river_bytes_per_document"`
	// LiveBytesPerDoc (PostgreSQL) is BytesPerDoc without River's rows,
	// from the tables' LiveBytes. SQLite's figure is live already: a page
	// a b-tree no longer uses goes to the file's free list, not the table.
	LiveBytesPerDoc float64 `json:"live_bytes_per_document,omitempty"`
}

// benchText is a document text of about 230 bytes, unique per i.
func benchText(i int) string {
	return fmt.Sprintf("Report %07d: a customer wrote to support about repeated unsolicited messages offering cheap pills and a "+
		"prize draw; they ask that the sender be blocked. Call back on 555-01%02d or write to them. Filed by the moderation team.", i, i%100)
}

// writeNDJSON writes lines from..to-1 of the import file at path.
func writeNDJSON(path string, from, to int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := from; i < to; i++ {
		line, _ := json.Marshal(map[string]any{"external_id": fmt.Sprintf("doc-%07d", i), "revision": 1, "text": benchText(i)})
		w.Write(append(line, '\n'))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Memory measures RSS and CPU of a stet holding o.N queued documents,
// first under a dispatch pause of all work, then draining against an
// instant fake; the baseline is River alone with o.N no-op jobs queued in a
// paused queue, then draining, on a fresh database with the same settings.
// It then takes o.Storage documents through the whole pipeline and says
// where the ledger's bytes per document go.
func Memory(ctx context.Context, o MemoryOptions) (*MemoryResult, error) {
	if o.Window == 0 {
		o.Window = 10 * time.Second
	}
	if o.Settle == 0 {
		o.Settle = 5 * time.Second
	}
	if o.Storage == 0 {
		o.Storage = 5000
	}
	res := &MemoryResult{}

	// River first: it is the smaller process, and what stet allocates later
	// cannot inflate it.
	riverDB, dropRiver, err := cluster.ScratchSchema(ctx, o.Database)
	if err != nil {
		return nil, err
	}
	defer dropRiver()
	if riverDB == "" {
		riverDB = "sqlite://" + filepath.Join(o.Dir, "river", "river.db")
		if err := os.MkdirAll(filepath.Dir(strings.TrimPrefix(riverDB, "sqlite://")), 0o700); err != nil {
			return nil, err
		}
	}
	rp, err := riverMemory(ctx, riverDB, o)
	if err != nil {
		return nil, fmt.Errorf("river baseline: %w", err)
	}

	database, drop, err := cluster.ScratchSchema(ctx, o.Database)
	if err != nil {
		return nil, err
	}
	defer drop()
	sp, err := stetMemory(ctx, database, o, res)
	if err != nil {
		return nil, err
	}
	res.Phases = append(res.Phases, sp[0], rp[0], sp[1], rp[1])

	storageDB, dropStorage, err := cluster.ScratchSchema(ctx, o.Database)
	if err != nil {
		return nil, err
	}
	defer dropStorage()
	if err := stetStorage(ctx, storageDB, o, res); err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	return res, nil
}

// usage is the process's CPU time so far.
func usage() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssMiB is the process's resident set, from /proc/self/status (0 where
// there is no /proc).
func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// measure runs a window: the CPU share of a core the process used, and RSS
// and heap at its end (after returning freed memory to the OS, so that
// what was freed before does not count).
func measure(ctx context.Context, window time.Duration, counts func() (claims, processed int, err error)) (MemoryPhase, error) {
	c0, p0, err := counts()
	if err != nil {
		return MemoryPhase{}, err
	}
	u0, t0 := usage(), time.Now()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return MemoryPhase{}, ctx.Err()
	}
	u1, t1 := usage(), time.Now()
	c1, p1, err := counts()
	if err != nil {
		return MemoryPhase{}, err
	}
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return MemoryPhase{RSSMiB: rssMiB(), HeapMiB: float64(ms.HeapInuse) / (1 << 20),
		CPUShare: float64(u1-u0) / float64(t1.Sub(t0)), Claims: c1 - c0, Processed: p1 - p0, Window: t1.Sub(t0)}, nil
}

// riverAttempts counts River's claims over all jobs: a claim that ran
// adds one attempt, a claim that snoozed one to the metadata's snoozes.
func riverAttempts(ctx context.Context, db *ledger.DB) (int, error) {
	return ledgertest.RiverAttempts(ctx, db)
}

// memoryPolls are the poll intervals of stet's default config, which the
// memory bench's config keeps: the extract queue's and the side queues'.
// The River baseline polls the same.
func memoryPolls() (extract, side time.Duration) {
	extract = config.DefaultPollInterval.Std()
	return extract, pipeline.SideQueuePoll(extract)
}

func riverMemory(ctx context.Context, database string, o MemoryOptions) ([]MemoryPhase, error) {
	db, err := ledger.Open(ctx, database)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	driver := db.RiverDriver()
	if err := pipeline.Migrate(ctx, db); err != nil {
		return nil, err
	}
	var done atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{done: &done})
	// The queues stet runs (extract, commit, batch), so that the baseline
	// polls as many, and as often: the paused one is the no-op jobs'.
	poll, side := memoryPolls()
	client, err := river.NewClient(driver, &river.Config{
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 16},
			pipeline.QueueRecord: {MaxWorkers: 16, FetchPollInterval: side},
			pipeline.QueueBatch:  {MaxWorkers: 4, FetchPollInterval: side}},
		Workers: workers,
		// What stet runs with: the config's default poll interval (200 ms;
		// this baseline polled every second before stop 28, while stet
		// polled at its default), its side queues' slower poll, and a 25 ms
		// cooldown.
		FetchPollInterval: poll,
		FetchCooldown:     25 * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	defer client.Stop(context.WithoutCancel(ctx))
	// The queue row exists once the client has started its producer.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err = client.QueuePause(ctx, river.QueueDefault, nil); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("pause: %w", err)
	}
	batch := make([]river.InsertManyParams, 0, 1000)
	for i := 0; i < o.N; i++ {
		batch = append(batch, river.InsertManyParams{Args: noopArgs{N: i}})
		if len(batch) == cap(batch) || i == o.N-1 {
			if _, err := client.InsertManyFast(ctx, batch); err != nil {
				return nil, err
			}
			batch = batch[:0]
		}
	}
	counts := func() (int, int, error) {
		n, err := riverAttempts(ctx, db)
		return n, int(done.Load()), err
	}
	time.Sleep(o.Settle)
	paused, err := measure(ctx, o.Window, counts)
	if err != nil {
		return nil, err
	}
	if err := client.QueueResume(ctx, river.QueueDefault, nil); err != nil {
		return nil, err
	}
	draining, err := measure(ctx, o.Window, counts)
	if err != nil {
		return nil, err
	}
	paused.Subject, paused.Phase, paused.Queued = "river", "paused", o.N
	draining.Subject, draining.Phase, draining.Queued = "river", "draining", o.N
	return []MemoryPhase{paused, draining}, nil
}

// fill imports n documents with stet import (no workers) and returns the
// config path and its environment.
func fill(ctx context.Context, s Stet, dir, database string, n int) (string, map[string]string, time.Duration, error) {
	fake := "http://127.0.0.1:1" // replaced by the caller's fake when it serves
	cfgPath, env, err := writeConfig(dir, database, fake, "", 16)
	if err != nil {
		return "", nil, 0, err
	}
	file := filepath.Join(dir, "fill.ndjson")
	if err := writeNDJSON(file, 0, n); err != nil {
		return "", nil, 0, err
	}
	defer os.Remove(file)
	start := time.Now()
	if err := s.Import(ctx, []string{"--config", cfgPath, "--source", source, "--mode", "sync", file}); err != nil {
		return "", nil, 0, err
	}
	return cfgPath, env, time.Since(start), nil
}

// serveConfig loads cfgPath with its processor pointed at fakeURL.
func serveConfig(cfgPath string, env map[string]string, fakeURL string) (*config.Config, error) {
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(string(b), "http://127.0.0.1:1", fakeURL, 1)), 0o600); err != nil {
		return nil, err
	}
	return loadConfig(cfgPath, env)
}

// serveApp serves an opened app on a loopback listener until stop.
func serveApp(ctx context.Context, a App, secret string) (*running, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		a.Close()
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = a.Serve(sctx, ln); close(done) }()
	return &running{app: a, client: &stetclient.Client{Base: "http://" + ln.Addr().String(), Secret: secret},
		stop: func() { cancel(); <-done; a.Close() }}, nil
}

func stetMemory(ctx context.Context, database string, o MemoryOptions, res *MemoryResult) ([]MemoryPhase, error) {
	dir := filepath.Join(o.Dir, "stet")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cfgPath, env, took, err := fill(ctx, o.Stet, dir, database, o.N)
	if err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	res.Fill = took
	imported := time.Now()
	fake := openaifake.New(openaifake.Options{})
	defer fake.Close()
	cfg, err := serveConfig(cfgPath, env, fake.URL())
	if err != nil {
		return nil, err
	}
	// The config's poll interval (its default, 200 ms), as `stet serve`
	// runs: this is about what an idle stet costs.
	a, err := o.Stet.Open(ctx, cfg, OpenOptions{Role: "all"})
	if err != nil {
		return nil, err
	}
	poll, side := memoryPolls()
	res.Settings = dbSettings(ctx, a.DB()) + fmt.Sprintf("; River poll interval %s (stet's default; %s for the commit and batch queues), for stet and the baseline", poll, side)
	now := time.Now()
	if err := a.DB().SetPause(ctx, ledger.Pause{Scope: "all", Reason: "bench", PausedBy: "bench", PausedAt: now}, "*"); err != nil {
		a.Close()
		return nil, err
	}
	r, err := serveApp(ctx, a, env[envSecret])
	if err != nil {
		return nil, err
	}
	defer r.stop()
	db := a.DB()
	counts := func() (int, int, error) {
		n, err := riverAttempts(ctx, db)
		if err != nil {
			return 0, 0, err
		}
		c, err := db.JobCounts(ctx)
		return n, c[stet.JobCommitted], err
	}
	// The pause takes effect (the queue pauses, the queued jobs are marked
	// waiting); the window measures the pause that holds after that.
	settle := time.Now()
	for {
		c, err := db.JobCounts(ctx)
		if err != nil {
			return nil, err
		}
		if c[stet.JobAccepted] == 0 || time.Since(settle) > 10*time.Minute {
			break
		}
		time.Sleep(time.Second)
	}
	res.PauseSettled = time.Since(settle)
	// The window measures the pause as it holds for hours, so it starts
	// once the walk of the paused queue has settled: the walk reads the
	// jobs imported in the last ledger.SettleQueued again once they are
	// that old (ledger.MarkQueuedWaiting), a one-off cost of the burst.
	time.Sleep(max(o.Settle, time.Until(imported.Add(ledger.SettleQueued+5*time.Second))))
	if o.PausedProfile != "" {
		f, err := os.Create(o.PausedProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
	}
	paused, err := measure(ctx, o.Window, counts)
	if o.PausedProfile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return nil, err
	}
	if err := db.ClearPause(ctx, "all", "bench", "*", time.Now()); err != nil {
		return nil, err
	}
	draining, err := measure(ctx, o.Window, counts)
	if err != nil {
		return nil, err
	}
	paused.Subject, paused.Phase, paused.Queued = "stet", "paused", o.N
	draining.Subject, draining.Phase, draining.Queued = "stet", "draining", o.N
	return []MemoryPhase{paused, draining}, nil
}

// stetStorage takes o.Storage documents through the pipeline and measures
// the ledger by table, against a one-table store of the same texts.
func stetStorage(ctx context.Context, database string, o MemoryOptions, res *MemoryResult) error {
	dir := filepath.Join(o.Dir, "storage")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cfgPath, env, _, err := fill(ctx, o.Stet, dir, database, o.Storage)
	if err != nil {
		return err
	}
	fake := openaifake.New(openaifake.Options{})
	defer fake.Close()
	cfg, err := serveConfig(cfgPath, env, fake.URL())
	if err != nil {
		return err
	}
	a, err := o.Stet.Open(ctx, cfg, OpenOptions{Role: "all", PollInterval: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	r, err := serveApp(ctx, a, env[envSecret])
	if err != nil {
		return err
	}
	defer r.stop()
	db := a.DB()
	if _, err := waitCommitted(ctx, db, o.Storage, 10*time.Minute); err != nil {
		return err
	}
	time.Sleep(time.Second) // River's completer flushes its last batch
	var text int64
	for i := 0; i < o.Storage; i++ {
		text += int64(len(benchText(i)))
	}
	res.Documents = o.Storage
	res.TextBytes = float64(text) / float64(o.Storage)

	// The baseline: the same texts in one table, id primary key.
	w := db.Writer()
	if _, err := w.ExecContext(ctx, `CREATE TABLE bench_raw (id TEXT PRIMARY KEY, body TEXT NOT NULL)`); err != nil {
		return err
	}
	for from := 0; from < o.Storage; from += 500 {
		err := inTx(ctx, w, func(tx *sql.Tx) error {
			for i := from; i < min(from+500, o.Storage); i++ {
				if _, err := tx.ExecContext(ctx, `INSERT INTO bench_raw (id, body) VALUES ($1, $2)`, stet.NewID("raw", time.Now()), benchText(i)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	tables, err := tableBytes(ctx, db)
	if err != nil {
		return err
	}
	var total, live int64
	for _, t := range tables {
		if t.Table == "bench_raw" {
			res.BaselineBytes = float64(t.Bytes)/float64(o.Storage) - res.TextBytes
			continue
		}
		if t.Table == "river_job" {
			res.RiverRowsRetained = t.Rows
			res.RiverBytesPerDoc = float64(t.Bytes) / float64(o.Storage)
		} else {
			live += t.LiveBytes
		}
		total += t.Bytes
		res.Tables = append(res.Tables, t)
	}
	res.BytesPerDoc = float64(total)/float64(o.Storage) - res.TextBytes
	if live > 0 {
		res.LiveBytesPerDoc = float64(live)/float64(o.Storage) - res.TextBytes
	}
	return nil
}

// tableBytes measures every table with its indexes: SQLite's dbstat after a
// checkpoint, PostgreSQL's pg_total_relation_size after a VACUUM and again
// after a VACUUM FULL (LiveBytes).
func tableBytes(ctx context.Context, db *ledger.DB) ([]TableBytes, error) {
	ts, err := ledgertest.Tables(ctx, db)
	if err != nil {
		return nil, err
	}
	out := make([]TableBytes, len(ts))
	for i, t := range ts {
		out[i] = TableBytes{Table: t.Name, Bytes: t.Bytes, Rows: t.Rows, LiveBytes: t.LiveBytes}
	}
	return out, nil
}

// WriteText prints the figures for a reader.
func (r *MemoryResult) WriteText(w io.Writer) {
	fmt.Fprintf(w, "memory  (%s; import of the queued documents took %s; every queued job waiting on the pause %s after start)\n",
		r.Settings, r.Fill.Round(time.Millisecond), r.PauseSettled.Round(time.Millisecond))
	fmt.Fprintf(w, "  %-6s %-9s %9s %9s %9s %10s %9s %10s\n", "", "phase", "queued", "RSS MiB", "heap MiB", "CPU/core", "claims", "processed")
	for _, p := range r.Phases {
		fmt.Fprintf(w, "  %-6s %-9s %9d %9.1f %9.1f %9.2f%% %9d %10d\n", p.Subject, p.Phase, p.Queued, p.RSSMiB, p.HeapMiB, 100*p.CPUShare, p.Claims, p.Processed)
	}
	fmt.Fprintf(w, "storage  (%d documents through the pipeline, %.0f bytes of text each)\n", r.Documents, r.TextBytes)
	fmt.Fprintf(w, "  stet      %8.0f bytes per document besides text; %.0f once River's completed rows (%d) pass their retention\n",
		r.BytesPerDoc, r.BytesPerDoc-r.RiverBytesPerDoc, r.RiverRowsRetained)
	if r.LiveBytesPerDoc > 0 {
		fmt.Fprintf(w, "  stet live %8.0f bytes per document besides text once VACUUM FULL compacts the ledger, River's rows aside (the rest is space VACUUM freed for later rows)\n",
			r.LiveBytesPerDoc)
	}
	fmt.Fprintf(w, "  baseline  %8.0f bytes per document besides text (one table: id primary key, text)\n", r.BaselineBytes)
	if r.BaselineBytes > 0 {
		fmt.Fprintf(w, "  ratio     %8.2f\n", r.BytesPerDoc/r.BaselineBytes)
	}
	for _, t := range r.Tables {
		if t.Bytes == 0 {
			continue
		}
		live := ""
		if t.LiveBytes > 0 {
			live = fmt.Sprintf("; live %.0f", float64(t.LiveBytes)/float64(r.Documents))
		}
		fmt.Fprintf(w, "    %-22s %10d bytes %8.0f per document  (%d rows%s)\n", t.Table, t.Bytes, float64(t.Bytes)/float64(r.Documents), t.Rows, live)
	}
}
