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
	w      io.Writer
	tty    bool
	total  int
	counts *counts
	begin  time.Time
	mu     sync.Mutex
	quit   chan struct{}
	done   chan struct{}
	end    time.Time
}

func newProgress(w io.Writer, total int, c *counts) *progress {
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
