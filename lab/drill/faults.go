package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stetlabs/stet/lab/cluster"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// armWait bounds the wait for an armed crash point to be reached. An arm
// kills every worker, the River leader among them, and the batch assembler
// is a periodic job the leader enqueues: the next batch is assembled only
// once a new leader is elected, after the dead leader's 15 s lease has run
// out (River's elect interval plus its padding). The point was reached
// 8–19 s after its arm on an idle machine, and after more than 20 s in a CI
// run beside other packages' tests. The wait ends at the first crash, so a
// long bound costs nothing when the point comes early.
const armWait = 45 * time.Second

// injector injects the planned faults at their times. Crash watchers (of
// processes armed with a crash point) outlive run: Run waits for them after
// it stops the processes.
type injector struct {
	procs   *cluster.Group
	pg      *cluster.Postgres
	sender  *senders
	tracker *resumeTracker
	res     *Result
	say     func(string, ...any)
	t0      time.Time

	mu       sync.Mutex // res.Events, res.Batch from the watchers
	deaths   sync.WaitGroup
	watchers sync.WaitGroup
}

func (in *injector) event(format string, args ...any) {
	what := fmt.Sprintf(format, args...)
	in.mu.Lock()
	in.res.Events = append(in.res.Events, Event{At: time.Since(in.t0).Seconds(), What: what})
	in.mu.Unlock()
	in.say("%s", what)
}

// kill SIGKILLs worker slot i, records the death for the time to resume,
// and returns the dead process.
func (in *injector) kill(ctx context.Context, i int) (*cluster.Process, error) {
	killAt := time.Now()
	p, err := in.procs.Kill(i)
	if err != nil {
		return nil, err
	}
	in.res.Kills++
	in.deaths.Add(1)
	go func() { defer in.deaths.Done(); in.tracker.died(ctx, p, killAt, "SIGKILL") }()
	return p, nil
}

func (in *injector) run(ctx context.Context, faults []fault) error {
	defer in.deaths.Wait()
	for _, f := range faults {
		if !sleep(ctx, time.Until(in.t0.Add(f.At))) {
			return ctx.Err()
		}
		switch f.Kind {
		case "kill":
			p, err := in.kill(ctx, f.Worker)
			if err != nil {
				return err
			}
			if !sleep(ctx, f.Pause) {
				return ctx.Err()
			}
			np, err := in.procs.Replace(f.Worker)
			if err != nil {
				return err
			}
			if err := np.WaitReady(ctx, readyLimit); err != nil {
				return fmt.Errorf("restart after a kill: %w", err)
			}
			in.event("SIGKILL %s (pid %d); replacement pid %d ready", p.Name, p.Pid, np.Pid)
		case "arm":
			_, workers := in.procs.Current()
			crashed := make(chan struct{}, len(workers))
			for i := range workers {
				p, err := in.kill(ctx, i)
				if err != nil {
					return err
				}
				np, err := in.procs.ReplaceWith(i, []string{"STET_CRASH_AT=" + f.Point})
				if err != nil {
					return err
				}
				if err := np.WaitReady(ctx, readyLimit); err != nil && !(np.Exited() && !np.Asked()) {
					// (An armed process may reach its point before it is ready.)
					return fmt.Errorf("restart armed with %s: %w", f.Point, err)
				}
				in.mu.Lock()
				in.res.Batch.Armed[f.Point]++
				in.mu.Unlock()
				in.watch(ctx, np, f.Point, crashed)
				in.event("SIGKILL %s (pid %d); replacement pid %d armed with STET_CRASH_AT=%s", p.Name, p.Pid, np.Pid, f.Point)
			}
			// The later faults wait for the point to be reached (a kill of an
			// armed process would disarm it), up to armWait.
			select {
			case <-crashed:
			case <-time.After(armWait):
				in.event("no armed process reached %s within %s", f.Point, armWait)
			case <-ctx.Done():
				return ctx.Err()
			}
		case "db_restart":
			down := time.Now()
			in.sender.dbDown.Store(true)
			err := in.pg.Restart(ctx)
			if err == nil {
				apiProc, _ := in.procs.Current()
				err = apiProc.WaitReady(ctx, readyLimit)
			}
			in.sender.dbDown.Store(false)
			if err != nil {
				return fmt.Errorf("database restart: %w", err)
			}
			in.res.DBRestarts++
			in.res.DBDownSeconds = time.Since(down).Seconds()
			in.event("PostgreSQL restart -m immediate; the api was ready again after %.1fs", in.res.DBDownSeconds)
		default:
			return fmt.Errorf("unknown fault %q", f.Kind)
		}
	}
	return nil
}

// watch waits for an armed process to end; an end the group did not ask
// for is the crash point: a death to measure.
func (in *injector) watch(ctx context.Context, p *cluster.Process, point string, crashed chan<- struct{}) {
	in.watchers.Add(1)
	go func() {
		defer in.watchers.Done()
		<-p.Done()
		if p.Asked() {
			return
		}
		in.mu.Lock()
		in.res.Batch.Crashes[point]++
		in.mu.Unlock()
		crashed <- struct{}{} // buffered: one slot per armed process
		in.event("%s (pid %d) crashed at %s; the supervisor restarts it unarmed", p.Name, p.Pid, point)
		in.tracker.died(ctx, p, p.ExitedAt(), "crash at "+point)
	}()
}

// fakeCall is one request the fake provider received.
type fakeCall struct {
	At     time.Time
	Doc    int // -1: no marker in the request
	Rev    int
	Status int // 0: the caller left before an answer (a kill mid-call)
	// Incomplete: reading the request body failed (the caller died
	// mid-send, so the body is cut); Bytes is how much of it arrived.
	Incomplete bool
	Bytes      int
	Path       string
	Batch      bool // a Batch API route (files, batches)
	// Model and SchemaName are the request's model and JSON Schema name
	// (a part's request names its part: callPart).
	Model      string
	SchemaName string
}

// provider serves an openai.Fake on a loopback listener the stet processes
// reach, and logs every call with its time and document.
type provider struct {
	fake *openaifake.Server
	srv  *http.Server
	ln   net.Listener

	mu  sync.Mutex
	log []fakeCall
}

func newProvider(seed int64, faultRate float64) (*provider, error) {
	f := &provider{fake: openaifake.New(openaifake.Options{APIKey: apiKey, FaultRate: faultRate, Seed: seed, Latency: fakeLatency})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.fake.Close()
		return nil, err
	}
	f.ln = ln
	f.srv = &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

func (f *provider) url() string { return "http://" + f.ln.Addr().String() + "/v1" }

func (f *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	call := fakeCall{At: time.Now(), Doc: -1, Path: r.URL.Path}
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	call.Incomplete, call.Bytes = err != nil, len(body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	// The Batch API's routes carry many documents or none: not mapped.
	call.Batch = strings.Contains(r.URL.Path, "/files") || strings.Contains(r.URL.Path, "/batches")
	if m := markerRe.FindSubmatch(body); m != nil && !call.Batch {
		call.Doc, _ = strconv.Atoi(string(m[1]))
		call.Rev, _ = strconv.Atoi(string(m[2]))
	}
	if !call.Batch && !call.Incomplete {
		var req struct {
			Model          string `json:"model"`
			ResponseFormat struct {
				JSONSchema struct {
					Name string `json:"name"`
				} `json:"json_schema"`
			} `json:"response_format"`
		}
		if json.Unmarshal(body, &req) == nil {
			call.Model, call.SchemaName = req.Model, req.ResponseFormat.JSONSchema.Name
		}
	}
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		call.Status = sw.status
		f.mu.Lock()
		f.log = append(f.log, call)
		f.mu.Unlock()
	}()
	f.fake.Handler().ServeHTTP(sw, r)
}

func (f *provider) calls() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeCall(nil), f.log...)
}

func (f *provider) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f.fake.Close()
	_ = f.srv.Shutdown(ctx)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if fl, ok := w.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}
