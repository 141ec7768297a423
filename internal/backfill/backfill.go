// Package backfill is stet import's engine: it reads an NDJSON file, one
// report per line in the intake body's shape, and accepts every line for a
// source through the same identity and revision rules as a webhook
// delivery. Each line is its own delivery keyed by its content, so a second
// run of the same file skips what was accepted. A line that breaks the
// source's rules is reported by its line number, never its text.
package backfill

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/ledger"
)

// workers is how many lines are in flight at once: enough for the intake's
// group commit to fill its groups.
const workers = 64

// Options are the settings of Run.
type Options struct {
	Path      string
	Source    *api.Source  // the source the reports belong to, its mode already chosen
	Acceptor  api.Acceptor // the pipeline's intake
	BodyLimit int64        // the longest line accepted
	Clock     stet.Clock   // nil: the system clock
	// Total is the number of lines (CountLines), for the progress display.
	Total int
	// Progress receives a bar with rate and ETA on a terminal, plain lines
	// otherwise, and a line per rejected line; nil discards it.
	Progress io.Writer
}

// Summary is what a Run did. Stored and Read are set when it could not
// finish: a storage error (the first of an outage) or a read error of the
// file. Interrupted says ctx ended before the last line.
type Summary struct {
	Lines                                   int
	Accepted, Duplicate, Conflict, Rejected int64
	Elapsed                                 time.Duration
	Stored, Read                            error
	Interrupted                             bool
}

type counts struct {
	accepted, duplicate, rejected, conflict atomic.Int64
}

func (c *counts) done() int64 {
	return c.accepted.Load() + c.duplicate.Load() + c.rejected.Load() + c.conflict.Load()
}

// Run imports o.Path. Its error means the file could not be opened;
// everything after that is in the Summary.
func Run(ctx context.Context, o Options) (*Summary, error) {
	if o.Clock == nil {
		o.Clock = stet.SystemClock{}
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	f, err := os.Open(o.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()

	var c counts
	prog := newProgress(o.Progress, o.Total, &c)
	prog.start()
	type line struct {
		n    int
		body []byte
	}
	lines := make(chan line, workers)
	var failMu sync.Mutex
	var fatal error
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range lines {
				params, perr := o.Source.ParseBody(l.body)
				if perr != nil {
					c.rejected.Add(1)
					prog.note(fmt.Sprintf("line %d: %s", l.n, perr.Detail))
					continue
				}
				params.DeliveryKey = "import:" + stet.SHA256Hex(l.body)
				params.Now = o.Clock.Now()
				res, err := o.Acceptor.Accept(ctx, params)
				if err != nil {
					failMu.Lock()
					if fatal == nil {
						fatal = err // the first is enough: the rest are the same outage
					}
					failMu.Unlock()
					c.rejected.Add(1)
					continue
				}
				switch res.Outcome {
				case ledger.OutcomeAccepted:
					c.accepted.Add(1)
				case ledger.OutcomeDuplicate:
					c.duplicate.Add(1)
				default:
					c.conflict.Add(1)
					prog.note(fmt.Sprintf("line %d: %s", l.n, conflictText(res.Outcome)))
				}
			}
		}()
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), int(o.BodyLimit)+1)
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
	return &Summary{Lines: n, Accepted: c.accepted.Load(), Duplicate: c.duplicate.Load(), Conflict: c.conflict.Load(),
		Rejected: c.rejected.Load(), Elapsed: prog.elapsed(), Stored: fatal, Read: scanErr, Interrupted: ctx.Err() != nil}, nil
}

func conflictText(o ledger.Outcome) string {
	switch o {
	case ledger.OutcomeRevisionConflict:
		return "this revision was already accepted with different content (skipped)"
	case ledger.OutcomeDeliveryConflict:
		return "delivery conflict (skipped)"
	case ledger.OutcomeGone:
		return "this report was deleted; not accepted again until the replay horizon passes (skipped)"
	}
	return string(o)
}

// WriteText prints the summary of importing path into source in mode;
// asJSON, as one JSON object.
func (s *Summary) WriteText(w io.Writer, path, source string, mode stet.DispatchMode, asJSON bool) {
	if asJSON {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"lines": s.Lines, "accepted": s.Accepted, "duplicate": s.Duplicate,
			"conflict": s.Conflict, "rejected": s.Rejected, "mode": string(mode),
			"elapsed_s": s.Elapsed.Seconds(),
		})
		return
	}
	fmt.Fprintf(w, "imported %s into source %s (%s mode): %d accepted, %d already there, %d conflicts, %d rejected, in %s\n",
		path, source, mode, s.Accepted, s.Duplicate, s.Conflict, s.Rejected, s.Elapsed.Round(time.Millisecond))
}
