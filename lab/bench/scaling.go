package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stetlabs/stet/internal/stetclient"
	"github.com/stetlabs/stet/lab/cluster"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/pipeline"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// ScalingOptions are the settings of Scaling.
type ScalingOptions struct {
	Dir         string // scratch folder
	Database    string // the postgres:// server (required)
	Binary      string // the stet binary to start; required
	Processes   []int  // the worker process counts to measure
	N           int    // deliveries per count (20 % duplicates)
	Concurrency int    // concurrent HTTP clients
}

// ScalingRow is one worker process count's figure.
type ScalingRow struct {
	Workers   int           `json:"worker_processes"`
	Documents int           `json:"documents"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	Rate      float64       `json:"documents_per_s"`
	Speedup   float64       `json:"speedup_vs_1"`
}

// ScalingResult is what Scaling measures.
type ScalingResult struct {
	Name     string       `json:"name"`
	Settings string       `json:"settings"`
	Rows     []ScalingRow `json:"rows"`
}

// Scaling starts one api process and N worker processes of the real binary
// on one PostgreSQL database, delivers o.N documents through the api
// process and measures documents/s to committed, for each N.
func Scaling(ctx context.Context, o ScalingOptions) (*ScalingResult, error) {
	if o.Database == "" {
		return nil, fmt.Errorf("scaling needs --database postgres://…")
	}
	binary, err := needBinary(o.Binary)
	if err != nil {
		return nil, err
	}
	o.Binary = binary
	res := &ScalingResult{Name: "scaling"}
	for _, w := range o.Processes {
		row, settings, err := scaleOnce(ctx, filepath.Join(o.Dir, fmt.Sprintf("scale-%d", w)), o, w)
		if err != nil {
			return nil, fmt.Errorf("%d workers: %w", w, err)
		}
		res.Settings = settings
		row.Speedup = 1
		if len(res.Rows) > 0 {
			row.Speedup = row.Rate / res.Rows[0].Rate
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// WriteText prints the table for a reader.
func (r *ScalingResult) WriteText(w io.Writer) {
	fmt.Fprintf(w, "scaling  (%s; 1 api process, instant fake OpenAI, workers.concurrency 16 per process)\n", r.Settings)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  worker processes\tdocuments\telapsed\tdocuments/s\tspeedup vs 1")
	for _, r := range r.Rows {
		fmt.Fprintf(tw, "  %d\t%d\t%s\t%.1f\t%.2f\n", r.Workers, r.Documents, r.Elapsed.Round(time.Millisecond), r.Rate, r.Speedup)
	}
	tw.Flush()
}

func scaleOnce(ctx context.Context, dir string, o ScalingOptions, workers int) (ScalingRow, string, error) {
	row := ScalingRow{Workers: workers}
	fake := openaifake.New(openaifake.Options{})
	defer fake.Close()
	run, err := startProcesses(ctx, processOptions{dir: dir, database: o.Database, binary: o.Binary, workers: workers, fake: fake, concurrency: 16})
	if err != nil {
		return row, "", err
	}
	defer run.stop()
	t0 := time.Now()
	jobs, _, err := deliverAll(ctx, run.client, o.N, o.Concurrency)
	var end time.Time
	if err == nil {
		end, err = waitCommitted(ctx, run.db, len(jobs), 10*time.Minute)
	}
	if err != nil {
		return row, "", err
	}
	row.Documents, row.Elapsed = len(jobs), end.Sub(t0)
	row.Rate = float64(row.Documents) / row.Elapsed.Seconds()
	return row, run.settings, nil
}

type processOptions struct {
	dir, database, binary string
	workers               int
	fake                  *openaifake.Server
	limits                string // the processor's limits, a YAML flow mapping, or ""
	concurrency           int    // workers.concurrency
}

// processRun is one api process and N worker processes of the real binary
// on a scratch schema, with a fake provider on a loopback listener.
type processRun struct {
	db       *ledger.DB
	client   *stetclient.Client
	settings string
	stop     func()
}

func startProcesses(ctx context.Context, o processOptions) (_ *processRun, err error) {
	var cleanups []func()
	stop := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	database, drop, err := cluster.ScratchSchema(ctx, o.database)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, drop)
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return nil, err
	}
	// The fake listens on a real port so other processes reach it.
	fln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	fsrv := &http.Server{Handler: o.fake.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go fsrv.Serve(fln)
	cleanups = append(cleanups, func() { fsrv.Close() })

	cfgPath, env, err := writeConfig(o.dir, database, "http://"+fln.Addr().String()+"/v1", o.limits, o.concurrency)
	if err != nil {
		return nil, err
	}
	cfg, err := loadConfig(cfgPath, env)
	if err != nil {
		return nil, err
	}
	db, err := ledger.Open(ctx, cfg.Database)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, func() { db.Close() })
	if _, err := db.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("migrate ledger: %w", err)
	}
	if err := pipeline.Migrate(ctx, db); err != nil {
		return nil, err
	}
	procEnv := os.Environ()
	for k, v := range env {
		procEnv = append(procEnv, k+"="+v)
	}
	g, err := cluster.StartGroup(cluster.GroupOptions{Binary: o.binary, Config: cfgPath, Env: procEnv, LogDir: o.dir,
		Args: []string{"--log-level", "warn"}}, o.workers)
	cleanups = append(cleanups, func() { g.Stop(time.Minute) })
	if err != nil {
		return nil, err
	}
	api, _ := g.Current()
	if err := api.WaitReady(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	return &processRun{db: db, client: &stetclient.Client{Base: api.Base, Secret: env[envSecret]},
		settings: dbSettings(ctx, db), stop: stop}, nil
}

// needBinary is binary, or an error if the caller gave none.
func needBinary(binary string) (string, error) {
	if strings.TrimSpace(binary) == "" {
		return "", errors.New("this benchmark starts stet processes: give it the stet binary")
	}
	return binary, nil
}
