package drill

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/stetlabs/stet/internal/cluster"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// injectFaults injects the planned faults at their times.
func injectFaults(ctx context.Context, faults []fault, t0 time.Time, procs *cluster.Group, pg *cluster.Postgres,
	sender *senders, tracker *resumeTracker, res *Result, say func(string, ...any)) error {
	var deaths sync.WaitGroup
	defer deaths.Wait()
	event := func(format string, args ...any) {
		what := fmt.Sprintf(format, args...)
		res.Events = append(res.Events, Event{At: time.Since(t0).Seconds(), What: what})
		say("%s", what)
	}
	for _, f := range faults {
		if !sleep(ctx, time.Until(t0.Add(f.At))) {
			return ctx.Err()
		}
		switch f.Kind {
		case "kill":
			killAt := time.Now()
			p, err := procs.Kill(f.Worker)
			if err != nil {
				return err
			}
			res.Kills++
			deaths.Add(1)
			go func() { defer deaths.Done(); tracker.died(ctx, p, killAt, "SIGKILL") }()
			if !sleep(ctx, f.Pause) {
				return ctx.Err()
			}
			np, err := procs.Replace(f.Worker)
			if err != nil {
				return err
			}
			if err := np.WaitReady(ctx, readyLimit); err != nil {
				return fmt.Errorf("restart after a kill: %w", err)
			}
			event("SIGKILL %s (pid %d); replacement pid %d ready", p.Name, p.Pid, np.Pid)
		case "db_restart":
			down := time.Now()
			sender.dbDown.Store(true)
			err := pg.Restart(ctx)
			if err == nil {
				apiProc, _ := procs.Current()
				err = apiProc.WaitReady(ctx, readyLimit)
			}
			sender.dbDown.Store(false)
			if err != nil {
				return fmt.Errorf("database restart: %w", err)
			}
			res.DBRestarts++
			res.DBDownSeconds = time.Since(down).Seconds()
			event("PostgreSQL restart -m immediate; the api was ready again after %.1fs", res.DBDownSeconds)
		default:
			return fmt.Errorf("unknown fault %q", f.Kind)
		}
	}
	return nil
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
	if m := markerRe.FindSubmatch(body); m != nil {
		call.Doc, _ = strconv.Atoi(string(m[1]))
		call.Rev, _ = strconv.Atoi(string(m[2]))
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
