package backfill

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// CountLines counts the non-blank lines of path, for the progress bar.
func CountLines(path string) (int, error) {
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
	w       io.Writer
	tty     bool
	total   int
	label   string
	done    func() int64
	extra   func() string // counts shown after the rate and ETA
	begin   time.Time
	mu      sync.Mutex
	quit    chan struct{}
	stopped chan struct{}
	end     time.Time
}

func newProgress(w io.Writer, total int, c *counts) *progress {
	return newBar(w, "import", total, c.done, func() string {
		return fmt.Sprintf("  accepted %d  already there %d  rejected %d", c.accepted.Load(), c.duplicate.Load(), c.rejected.Load()+c.conflict.Load())
	})
}

func newBar(w io.Writer, label string, total int, done func() int64, extra func() string) *progress {
	return &progress{w: w, tty: isTerminal(w), total: total, label: label, done: done, extra: extra,
		quit: make(chan struct{}), stopped: make(chan struct{})}
}

// Bar is the import's progress bar, for other long operator commands
// (stet rekey): a redrawn bar on a terminal, plain lines otherwise.
type Bar struct{ p *progress }

// StartBar draws progress toward total on w until Stop; done reports how
// many are done so far (it is called from the drawing goroutine).
func StartBar(w io.Writer, label string, total int, done func() int64) *Bar {
	b := &Bar{p: newBar(w, label, total, done, func() string { return "" })}
	b.p.start()
	return b
}

// Stop draws the final state and stops the bar.
func (b *Bar) Stop() { b.p.stop() }

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
		defer close(p.stopped)
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
	<-p.stopped
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
	done := p.done()
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
	stats := fmt.Sprintf("%d/%d (%.0f%%)  %.0f/s  ETA %s", done, p.total, pct, rate, eta) + p.extra()
	if !p.tty {
		fmt.Fprintln(p.w, p.label+":", stats)
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
