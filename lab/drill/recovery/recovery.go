// Package recovery holds the recovery drills of docs/design.md §10 that need no
// external service, each one a function over an in-process stet (a scratch
// SQLite ledger, or PostgreSQL under STET_TEST_DATABASE_URL, River, the API
// and the wire-faithful OpenAI fake: lab/stettest). The tests in
// pipeline/ and `stetlab drill [NAME…]` run the same functions: a test passes
// its *testing.T, the command a Runner that turns a failed check into a
// failed row of its table.
//
// A drill never reaches a real provider or any address off the loopback,
// and its outcome names counts, never text.
package recovery

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stetlabs/stet/lab/stettest"
)

// Counts are what a drill observes in its ledger and at the fake provider
// when it ends.
type Counts struct {
	Reports int `json:"reports"`
	Jobs    int `json:"jobs"`
	Records int `json:"records"`
	Calls   int `json:"provider_calls"`
}

func (c Counts) String() string {
	return fmt.Sprintf("reports %d, jobs %d, records %d, provider calls %d", c.Reports, c.Jobs, c.Records, c.Calls)
}

// Drill is one recovery drill.
type Drill struct {
	Name   string // the command-line name: "1", "2", … "12"
	Title  string
	Expect string // the expectation, as §10 states it
	// Want are the counts the drill must end with.
	Want Counts
	run  func(d *run)
}

// Outcome is one drill's result.
type Outcome struct {
	Drill    string        `json:"drill"`
	Title    string        `json:"title"`
	Expect   string        `json:"expectation"`
	Want     Counts        `json:"want"`
	Observed Counts        `json:"observed"`
	Duration time.Duration `json:"duration_ns"`
	OK       bool          `json:"ok"`
	// Failures are the checks that failed, in order (IDs and counts only).
	Failures []string `json:"failures,omitempty"`
}

// run is a drill in progress: its T records every failure before passing
// it on, and its Env is counted at the end.
type run struct {
	t   *recorder
	env *stettest.Env
}

// Env starts the drill's stet.
func (d *run) Env(opts stettest.Options) *stettest.Env {
	d.env = stettest.New(d.t, opts)
	return d.env
}

// recorder wraps the caller's T and keeps every failure message.
type recorder struct {
	stettest.T
	mu       sync.Mutex
	failures []string
}

func (r *recorder) note(s string) {
	r.mu.Lock()
	r.failures = append(r.failures, s)
	r.mu.Unlock()
}

func (r *recorder) Errorf(format string, args ...any) {
	r.note(fmt.Sprintf(format, args...))
	r.T.Helper()
	r.T.Errorf(format, args...)
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.note(fmt.Sprintf(format, args...))
	r.T.Helper()
	r.T.Fatalf(format, args...)
}

func (r *recorder) Fatal(args ...any) {
	r.note(fmt.Sprint(args...))
	r.T.Helper()
	r.T.Fatal(args...)
}

// Run runs the drill under t, checks its final counts against Want, and
// returns its outcome. A failed check is reported to t (Errorf or Fatalf)
// and listed in the outcome; under a *testing.T a Fatalf ends the test, as
// usual, before Run returns.
func (dr Drill) Run(t stettest.T) Outcome {
	t.Helper()
	start := time.Now()
	rec := &recorder{T: t}
	d := &run{t: rec}
	o := Outcome{Drill: dr.Name, Title: dr.Title, Expect: dr.Expect, Want: dr.Want}
	dr.run(d)
	if d.env != nil {
		o.Observed = Counts{Reports: d.env.Count("reports", ""), Jobs: d.env.Count("jobs", ""),
			Records: d.env.Count("review_records", ""), Calls: d.env.Fake.Calls()}
		if o.Observed != dr.Want {
			rec.Errorf("drill %s ended with %v, want %v", dr.Name, o.Observed, dr.Want)
		}
	}
	o.Duration = time.Since(start)
	rec.mu.Lock()
	o.Failures = slices.Clone(rec.failures)
	rec.mu.Unlock()
	o.OK = len(o.Failures) == 0
	return o
}

// All are the drills, in §10's order. Drill 6 (kill -9 of the real binary)
// and drill 7 (batch crashes) run processes of the stet binary and stay
// tests of cmd/stet; drill 13 (a destination down, then 500, then 200) is
// pipeline's TestDrill13DestinationDownThen500Then200, with its receivers.
func All() []Drill {
	return []Drill{Drill1, Drill2, Drill3, Drill4, Drill5, Drill8, Drill9, Drill10, Drill11, Drill12}
}

// Lookup returns the drills named (all of them for none), or an error
// naming an unknown one.
func Lookup(names []string) ([]Drill, error) {
	if len(names) == 0 {
		return All(), nil
	}
	var out []Drill
	for _, n := range names {
		i := slices.IndexFunc(All(), func(d Drill) bool { return d.Name == n })
		if i < 0 {
			var known []string
			for _, d := range All() {
				known = append(known, d.Name)
			}
			return nil, fmt.Errorf("no drill %q (drills: %s, chaos)", n, strings.Join(known, ", "))
		}
		out = append(out, All()[i])
	}
	return out, nil
}

// Runner is the T of a drill run outside go test (stetlab drill): a failed
// check is kept, a fatal one ends the drill's goroutine (as testing does),
// and cleanups run when the drill ends.
type Runner struct {
	mu       sync.Mutex
	dir      string
	cleanups []func()
	msgs     []string // every failure, for a drill a fatal check ended
	skipped  string
}

// RunOutside runs one drill outside go test, with scratch folders under
// os.TempDir, and returns its outcome once the drill and its cleanups end.
func RunOutside(dr Drill) Outcome {
	r := &Runner{}
	var o Outcome
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		defer r.cleanup()
		o = dr.Run(r)
	}()
	<-done
	if o.Drill == "" { // a fatal check ended the drill before Run returned
		o = Outcome{Drill: dr.Name, Title: dr.Title, Expect: dr.Expect, Want: dr.Want, Duration: time.Since(start)}
		r.mu.Lock()
		o.Failures = slices.Clone(r.msgs)
		r.mu.Unlock()
	}
	if r.skipped != "" {
		o.Failures = append(o.Failures, "skipped: "+r.skipped)
	}
	o.OK = len(o.Failures) == 0
	return o
}

func (r *Runner) cleanup() {
	r.mu.Lock()
	cs := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
	if r.dir != "" {
		_ = os.RemoveAll(r.dir)
	}
}

// Helper implements stettest.T.
func (r *Runner) Helper() {}

// TempDir implements stettest.T: a new folder under the run's scratch folder.
func (r *Runner) TempDir() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dir == "" {
		d, err := os.MkdirTemp("", "stet-drill-")
		if err != nil {
			panic(err)
		}
		r.dir = d
	}
	d, err := os.MkdirTemp(r.dir, "t")
	if err != nil {
		panic(err)
	}
	return d
}

// Cleanup implements stettest.T.
func (r *Runner) Cleanup(f func()) {
	r.mu.Lock()
	r.cleanups = append(r.cleanups, f)
	r.mu.Unlock()
}

// Errorf implements stettest.T.
func (r *Runner) Errorf(format string, args ...any) {
	r.mu.Lock()
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// Logf implements stettest.T: a drill's log goes nowhere.
func (r *Runner) Logf(string, ...any) {}

// Fatal implements stettest.T: it ends the drill's goroutine.
func (r *Runner) Fatal(args ...any) { r.fail(fmt.Sprint(args...)) }

// Fatalf implements stettest.T: it ends the drill's goroutine.
func (r *Runner) Fatalf(format string, args ...any) { r.fail(fmt.Sprintf(format, args...)) }

func (r *Runner) fail(msg string) {
	r.mu.Lock()
	r.msgs = append(r.msgs, msg)
	r.mu.Unlock()
	runtime.Goexit()
}

// Skip implements stettest.T (the PostgreSQL dialect without its URL).
func (r *Runner) Skip(args ...any) {
	r.mu.Lock()
	r.skipped = fmt.Sprint(args...)
	r.mu.Unlock()
	runtime.Goexit()
}
