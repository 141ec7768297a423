// Package bench runs stet's benchmarks: each measures stet end to end
// (intake, the pipeline, a rate-limited provider, a batch backfill, scaling
// over worker processes) and, in the same run, a baseline on the same
// database, and reports both with their ratio. It builds its own scratch
// world (a SQLite file or a scratch schema, fake providers on loopback) and
// removes it after. Benchmarks measure; they never judge.
//
// The package cannot import cmd/stet, so the caller passes the wiring of a
// stet process (Stet): that is what is measured, as `stet serve` runs it.
package bench

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/internal/stetclient"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/ledger/ledgertest"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// Stet is how a benchmark runs stet in this process; cmd/stet provides it.
type Stet struct {
	// Open wires a stet from cfg, migrated, as `stet serve` would. It starts
	// nothing.
	Open func(ctx context.Context, cfg *config.Config, o OpenOptions) (App, error)
	// Import runs `stet import` with args (the command line after
	// "import"); an error if it exits other than 0.
	Import func(ctx context.Context, args []string) error
}

// OpenOptions are the settings of Stet.Open.
type OpenOptions struct {
	Role         string        // api | worker | all
	PollInterval time.Duration // River's fetch poll interval; 0: the config's
}

// App is one stet wired in this process.
type App interface {
	// DB is its ledger.
	DB() *ledger.DB
	// Serve runs the API on ln and the stage workers until ctx ends, then
	// shuts down gracefully.
	Serve(ctx context.Context, ln net.Listener) error
	// Close closes the ledger.
	Close()
}

// Result is one figure next to its baseline.
type Result struct {
	Name            string        `json:"name"`
	Subject         string        `json:"subject,omitempty"` // what was measured, if not stet itself
	Settings        string        `json:"settings"`
	Unit            string        `json:"unit"`
	Count           int           `json:"count"`
	Elapsed         time.Duration `json:"elapsed_ns"`
	Rate            float64       `json:"rate"`
	Baseline        string        `json:"baseline"`
	BaselineCount   int           `json:"baseline_count"`
	BaselineElapsed time.Duration `json:"baseline_elapsed_ns"`
	BaselineRate    float64       `json:"baseline_rate"`
	Ratio           float64       `json:"ratio"`
	// Ceiling, when measured, is what the same load reaches against a
	// server that does only the HTTP part of the work (intake: the
	// signature check and the JSON decode, no ledger): on this machine no
	// implementation of the measured path can be faster.
	Ceiling        string        `json:"ceiling,omitempty"`
	CeilingCount   int           `json:"ceiling_count,omitempty"`
	CeilingElapsed time.Duration `json:"ceiling_elapsed_ns,omitempty"`
	CeilingRate    float64       `json:"ceiling_rate,omitempty"`
	// CPU, BaselineCPU and CeilingCPU are what an item cost in CPU in each
	// phase (cpu.go), where measured.
	CPU         *CPUCost `json:"cpu,omitempty"`
	BaselineCPU *CPUCost `json:"baseline_cpu,omitempty"`
	CeilingCPU  *CPUCost `json:"ceiling_cpu,omitempty"`
}

func (r *Result) finish() {
	r.Rate = float64(r.Count) / r.Elapsed.Seconds()
	r.BaselineRate = float64(r.BaselineCount) / r.BaselineElapsed.Seconds()
	r.Ratio = r.Rate / r.BaselineRate
	if r.CeilingCount > 0 {
		r.CeilingRate = float64(r.CeilingCount) / r.CeilingElapsed.Seconds()
	}
}

// WriteText prints the figure, its baseline and the ratio for a reader.
func (r *Result) WriteText(w io.Writer) {
	fmt.Fprintf(w, "%s  (%s)\n", r.Name, r.Settings)
	subject := r.Subject
	if subject == "" {
		subject = "stet"
	}
	fmt.Fprintf(w, "  %-9s %10.1f %s  (%d in %s)\n", subject, r.Rate, r.Unit, r.Count, r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "  baseline  %10.1f %s  (%s; %d in %s)\n", r.BaselineRate, r.Unit, r.Baseline, r.BaselineCount, r.BaselineElapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "  ratio     %10.2f\n", r.Ratio)
	if r.CeilingCount > 0 {
		fmt.Fprintf(w, "  ceiling   %10.1f %s  (%s; %d in %s; %.2f of it reached, the baseline is %.2f of it)\n", r.CeilingRate, r.Unit, r.Ceiling,
			r.CeilingCount, r.CeilingElapsed.Round(time.Millisecond), r.Rate/r.CeilingRate, r.BaselineRate/r.CeilingRate)
	}
	if r.CPU != nil {
		fmt.Fprintf(w, "  CPU per item (this process: stet with its load and fakes; for the baseline, its client)\n")
		writeCPU(w, subject, r.CPU)
		writeCPU(w, "baseline", r.BaselineCPU)
		writeCPU(w, "ceiling", r.CeilingCPU)
	}
}

// dbSettings describes the durability settings a figure was measured under.
func dbSettings(ctx context.Context, db *ledger.DB) string { return ledgertest.Settings(ctx, db) }

// The benchmark config's source, and the variables it names.
const (
	source    = "bench"
	envToken  = "STET_BENCH_TOKEN"
	envSecret = "STET_BENCH_SECRET"
	envKey    = "STET_BENCH_OPENAI_KEY"
)

// writeConfig writes a benchmark config: one source, a small profile, an
// openai processor at fakeURL with limits (a YAML flow mapping such as
// "{rpm: 600, concurrency: 32}", or ""), and the workers' concurrency. It
// returns the path and the environment the config names.
func writeConfig(dir, database, fakeURL, limits string, concurrency int) (string, map[string]string, error) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("stet-bench-secret-0123456789abcd"))
	profiles := filepath.Join(dir, "profiles")
	if err := os.MkdirAll(profiles, 0o700); err != nil {
		return "", nil, err
	}
	schema := `{"type":"object","additionalProperties":false,"required":["category","severity"],
 "properties":{"category":{"type":"string","enum":["none","spam","harassment"]},"severity":{"type":"string","enum":["none","low","high"]}}}`
	if err := os.WriteFile(filepath.Join(profiles, "bench.schema.json"), []byte(schema), 0o600); err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(filepath.Join(profiles, "bench.prompt.tmpl"), []byte("Classify this report:\n{{.Text}}\n"), 0o600); err != nil {
		return "", nil, err
	}
	if database == "" {
		database = "sqlite://stet.db"
	}
	if limits != "" {
		limits = ", limits: " + limits
	}
	cfgText := fmt.Sprintf(`database: %q
listen: 127.0.0.1:0
tenants:
  - id: bench
    tokens: [{name: ops, role: operator, token_env: %s}]
sources:
  - {id: %s, tenant: bench, secret_env: %s, profile: bench, policy: bench}
profiles:
  - {id: bench, version: 1, schema: profiles/bench.schema.json, prompt: profiles/bench.prompt.tmpl}
processors:
  - {id: fake, kind: openai, base_url: %q, api_key_env: %s, model: fake-instant, region: local, retention: none%s}
policies:
  - {id: bench, processors: [fake], minimize: [email, phone]}
workers: {concurrency: %d}
`, database, envToken, source, envSecret, fakeURL, envKey, limits, concurrency)
	cfgPath := filepath.Join(dir, "stet.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		return "", nil, err
	}
	env := map[string]string{envToken: "stet-bench-operator-token-0123456789", envSecret: secret, envKey: "sk-bench"}
	return cfgPath, env, nil
}

// loadConfig loads a config written by writeConfig with its environment.
func loadConfig(path string, env map[string]string) (*config.Config, error) {
	return config.Load(path, func(k string) string { return env[k] })
}

// running is a stet serving in this process.
type running struct {
	app    App
	client *stetclient.Client
	stop   func()
}

// serve opens a stet from cfg and serves it on a loopback listener until
// stop.
func serve(ctx context.Context, s Stet, cfg *config.Config, o OpenOptions, secret string) (*running, error) {
	a, err := s.Open(ctx, cfg, o)
	if err != nil {
		return nil, err
	}
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

// serveWithFake starts an instant fake OpenAI and a stet on it in dir;
// encrypt turns on encryption at rest.
func serveWithFake(ctx context.Context, s Stet, dir, database, role string, encrypt bool) (*running, error) {
	fake := openaifake.New(openaifake.Options{})
	cfgPath, env, err := writeConfig(dir, database, fake.URL(), "", 16)
	if err == nil && encrypt {
		err = addEncryption(cfgPath, env)
	}
	if err == nil {
		var cfg *config.Config
		if cfg, err = loadConfig(cfgPath, env); err == nil {
			var r *running
			if r, err = serve(ctx, s, cfg, OpenOptions{Role: role, PollInterval: 20 * time.Millisecond}, env[envSecret]); err == nil {
				stop := r.stop
				r.stop = func() { stop(); fake.Close() }
				return r, nil
			}
		}
	}
	fake.Close()
	return nil, err
}

// parallel runs do(0) … do(n-1) from conc goroutines and returns the
// first error; after an error, no new index is started.
func parallel(n, conc int, do func(i int) error) error {
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for failed.Load() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := do(i); err != nil {
					failed.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	err, _ := failed.Load().(error)
	return err
}

// deliverAll posts n deliveries from conc clients; every fifth is a
// duplicate (an earlier body under a new webhook-id). It returns the job
// IDs of the accepted ones.
func deliverAll(ctx context.Context, c *stetclient.Client, n, conc int) ([]string, time.Duration, error) {
	client := *c
	client.HTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
	var mu sync.Mutex
	var jobs []string
	start := time.Now()
	err := parallel(n, conc, func(i int) error {
		doc := i
		if i%5 == 4 {
			doc = i - 4 // a duplicate of an earlier document
		}
		body := fmt.Appendf(nil, `{"external_id":"doc-%07d","revision":1,"text":"Benchmark report %d: buy cheap pills now, call 555-123-%04d."}`, doc, doc, doc%10000)
		a, err := client.Deliver(ctx, source, fmt.Sprintf("msg_%07d", i), body)
		if err != nil {
			return fmt.Errorf("delivery %d: %w", i, err)
		}
		switch a.Status {
		case http.StatusAccepted:
			mu.Lock()
			jobs = append(jobs, a.Intake.JobID)
			mu.Unlock()
		case http.StatusOK:
		default:
			return fmt.Errorf("delivery %d: status %d", i, a.Status)
		}
		return nil
	})
	return jobs, time.Since(start), err
}

// waitCommitted waits until n jobs are terminal (any manual job is an
// error) and returns when the last of them finished, as the ledger recorded
// it. It looks every 100 ms: its reads run in the measured process, and a
// count of every job each 10 ms cost a pipeline run as much CPU as a tenth of
// its documents. The ledger's time, not the poll's, ends the measurement.
func waitCommitted(ctx context.Context, db *ledger.DB, n int, limit time.Duration) (time.Time, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		counts, err := db.JobCounts(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if counts[stet.JobCommitted]+counts[stet.JobManual] >= n {
			if counts[stet.JobManual] > 0 {
				return time.Time{}, fmt.Errorf("%d jobs went manual", counts[stet.JobManual])
			}
			return lastCommitted(ctx, db)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("not all %d jobs committed within %s", n, limit)
}

// lastCommitted is when the ledger's last job committed.
func lastCommitted(ctx context.Context, db *ledger.DB) (time.Time, error) {
	var micros sql.NullInt64
	if err := db.Reader().QueryRowContext(ctx, `SELECT MAX(committed_at) FROM jobs`).Scan(&micros); err != nil {
		return time.Time{}, fmt.Errorf("last commit: %w", err)
	}
	if !micros.Valid {
		return time.Time{}, errors.New("last commit: no job committed")
	}
	return time.UnixMicro(micros.Int64), nil
}
