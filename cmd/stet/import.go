package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/ledger"
)

const importHelp = `Usage: stet import [flags] FILE.ndjson

Bulk backfill: each line of FILE is one report in the intake body's shape,
{"external_id": "…", "revision": 1, "text": "…", "metadata": {}}, accepted
for --source through the same identity and revision rules as a webhook
delivery (the source's signature is not needed: the file is trusted input).

Resumable: every line is its own delivery, keyed by its content, so running
the same file again skips what was accepted. A line that breaks the
source's rules is reported by its line number (never its text) and skipped;
the exit status is then 1.

--mode batch routes the new jobs to provider batches (the processor's batch
API), --mode sync to synchronous extraction; the default is the source's
mode. A running 'stet serve' on the same database extracts them.

Progress goes to stderr: a bar with rate and ETA on a terminal, plain lines
otherwise.

Flags:
`

// importWorkers is how many lines are in flight at once: enough for the
// intake's group commit to fill its groups.
const importWorkers = 64

type importCounts struct {
	accepted, duplicate, rejected, conflict atomic.Int64
}

func (c *importCounts) done() int64 {
	return c.accepted.Load() + c.duplicate.Load() + c.rejected.Load() + c.conflict.Load()
}

func cmdImport(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, importHelp); fs.PrintDefaults() }
	cfgPath := configFlag(fs)
	sourceID := fs.String("source", "", "the source the reports belong to (required)")
	mode := fs.String("mode", "", "sync | batch (default: the source's mode)")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() != 1 || *sourceID == "" {
		fs.Usage()
		return exitUsage
	}
	if *mode != "" && *mode != string(stet.ModeSync) && *mode != string(stet.ModeBatch) {
		fmt.Fprintln(stderr, "stet import: --mode must be sync or batch")
		return exitUsage
	}
	path := fs.Arg(0)
	total, err := countLines(path)
	if err != nil {
		fmt.Fprintln(stderr, "stet import:", err)
		return exitUsage
	}
	cfg, ok := loadOperatorConfig(*cfgPath, stderr)
	if !ok {
		return exitUsage
	}
	a, err := openApp(ctx, cfg, appOptions{migrate: true, logger: newLogger(io.Discard, "error")})
	if err != nil {
		fmt.Fprintln(stderr, "stet import:", err)
		return exitUnhealthy
	}
	defer a.close()
	clock := stet.Clock(stet.SystemClock{})
	sources, err := apiSources(cfg, clock)
	if err != nil {
		fmt.Fprintln(stderr, "stet import:", err)
		return exitUsage
	}
	var src *api.Source
	for _, s := range sources {
		if s.ID == *sourceID {
			src = s
		}
	}
	if src == nil {
		fmt.Fprintf(stderr, "stet import: no source %q in the config\n", *sourceID)
		return exitUsage
	}
	if *mode != "" {
		src.Mode = stet.DispatchMode(*mode)
	}
	if err := a.pipeline.Start(ctx); err != nil {
		fmt.Fprintln(stderr, "stet import:", err)
		return exitUnhealthy
	}
	defer a.pipeline.Stop(context.WithoutCancel(ctx))

	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(stderr, "stet import:", err)
		return exitUsage
	}
	defer f.Close()

	var counts importCounts
	prog := newProgress(stderr, total, &counts)
	prog.start()
	type line struct {
		n    int
		body []byte
	}
	lines := make(chan line, importWorkers)
	var failMu sync.Mutex
	var fatal error
	var wg sync.WaitGroup
	for range importWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range lines {
				params, perr := src.ParseBody(l.body)
				if perr != nil {
					counts.rejected.Add(1)
					prog.note(fmt.Sprintf("line %d: %s", l.n, perr.Detail))
					continue
				}
				params.DeliveryKey = "import:" + stet.SHA256Hex(l.body)
				params.Now = clock.Now()
				res, err := a.pipeline.Accept(ctx, params)
				if err != nil {
					failMu.Lock()
					if fatal == nil {
						fatal = err // the first is enough: the rest are the same outage
					}
					failMu.Unlock()
					counts.rejected.Add(1)
					continue
				}
				switch res.Outcome {
				case ledger.OutcomeAccepted:
					counts.accepted.Add(1)
				case ledger.OutcomeDuplicate:
					counts.duplicate.Add(1)
				default:
					counts.conflict.Add(1)
					prog.note(fmt.Sprintf("line %d: %s", l.n, conflictText(res.Outcome)))
				}
			}
		}()
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), int(cfg.BodyLimit)+1)
	n := 0
	var scanErr error
	for sc.Scan() {
		n++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		lines <- line{n: n, body: bytes.Clone(b)}
	}
	if err := sc.Err(); err != nil {
		scanErr = fmt.Errorf("line %d: %w", n+1, err)
	}
	close(lines)
	wg.Wait()
	prog.stop()

	sum := map[string]any{
		"lines": n, "accepted": counts.accepted.Load(), "duplicate": counts.duplicate.Load(),
		"conflict": counts.conflict.Load(), "rejected": counts.rejected.Load(), "mode": string(src.Mode),
		"elapsed_s": prog.elapsed().Seconds(),
	}
	if *asJSON {
		_ = json.NewEncoder(stdout).Encode(sum)
	} else {
		fmt.Fprintf(stdout, "imported %s into source %s (%s mode): %d accepted, %d already there, %d conflicts, %d rejected, in %s\n",
			path, src.ID, src.Mode, counts.accepted.Load(), counts.duplicate.Load(), counts.conflict.Load(), counts.rejected.Load(),
			prog.elapsed().Round(time.Millisecond))
	}
	switch {
	case fatal != nil:
		fmt.Fprintln(stderr, "stet import: some lines could not be stored; run the same file again to resume:", stet.ErrorMessageOf(fatal))
		return exitUnhealthy
	case scanErr != nil:
		fmt.Fprintln(stderr, "stet import:", scanErr)
		return exitFailure
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "stet import: interrupted; run the same file again to resume")
		return exitFailure
	case counts.rejected.Load() > 0 || counts.conflict.Load() > 0:
		return exitFailure
	}
	return exitOK
}

func conflictText(o ledger.Outcome) string {
	switch o {
	case ledger.OutcomeRevisionConflict:
		return "this revision was already accepted with different content (skipped)"
	case ledger.OutcomeDeliveryConflict:
		return "delivery conflict (skipped)"
	}
	return string(o)
}

// countLines counts the non-blank lines of path, for the progress bar.
func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	n := 0
	nonBlank := false
	for {
		b, err := r.ReadSlice('\n')
		if len(bytes.TrimSpace(b)) > 0 {
			nonBlank = true
		}
		if err == nil || (errors.Is(err, io.EOF) && len(b) > 0) {
			if nonBlank {
				n++
			}
			nonBlank = false
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			nonBlank = nonBlank || len(bytes.TrimSpace(b)) > 0
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return 0, err
		}
	}
}

// progress reports an import's progress: a redrawn bar on a terminal,
// plain lines every few seconds otherwise.
type progress struct {
	w      io.Writer
	tty    bool
	total  int
	counts *importCounts
	begin  time.Time
	mu     sync.Mutex
	quit   chan struct{}
	done   chan struct{}
	end    time.Time
}

func newProgress(w io.Writer, total int, c *importCounts) *progress {
	return &progress{w: w, tty: isTerminal(w), total: total, counts: c, quit: make(chan struct{}), done: make(chan struct{})}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (p *progress) start() {
	p.begin = time.Now()
	every := 2 * time.Second
	if p.tty {
		every = 200 * time.Millisecond
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				p.draw(true)
				return
			case <-t.C:
				p.draw(false)
			}
		}
	}()
}

func (p *progress) stop() {
	p.end = time.Now()
	close(p.quit)
	<-p.done
}

func (p *progress) elapsed() time.Duration {
	if p.end.IsZero() {
		return time.Since(p.begin)
	}
	return p.end.Sub(p.begin)
}

// note prints one line above the bar.
func (p *progress) note(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s\n", s)
		return
	}
	fmt.Fprintln(p.w, s)
}

func (p *progress) draw(final bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	done := p.counts.done()
	el := time.Since(p.begin)
	rate := float64(done) / max(el.Seconds(), 1e-9)
	eta := "-"
	if rate > 0 && int(done) < p.total {
		eta = (time.Duration(float64(int64(p.total)-done)/rate) * time.Second).Round(time.Second).String()
	}
	if final {
		eta = "0s"
	}
	pct := 100.0
	if p.total > 0 {
		pct = 100 * float64(done) / float64(p.total)
	}
	stats := fmt.Sprintf("%d/%d (%.0f%%)  %.0f/s  ETA %s  accepted %d  already there %d  rejected %d",
		done, p.total, pct, rate, eta, p.counts.accepted.Load(), p.counts.duplicate.Load(), p.counts.rejected.Load()+p.counts.conflict.Load())
	if !p.tty {
		fmt.Fprintln(p.w, "import:", stats)
		return
	}
	const width = 30
	filled := int(pct / 100 * width)
	bar := strings.Repeat("#", filled) + strings.Repeat(".", width-filled)
	fmt.Fprintf(p.w, "\r\033[K[%s] %s", bar, stats)
	if final {
		fmt.Fprintln(p.w)
	}
}
