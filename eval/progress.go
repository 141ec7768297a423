package eval

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress draws a bar on a terminal, or a plain line every 5 s otherwise.
type progress struct {
	w        io.Writer
	terminal bool
	total    int
	start    time.Time
	last     time.Time
	done     int
}

func newProgress(w io.Writer, terminal bool, total int) *progress {
	return &progress{w: w, terminal: terminal, total: total, start: time.Now()}
}

func (p *progress) update(done int) {
	if p.w == nil || p.total == 0 {
		return
	}
	p.done = done
	now := time.Now()
	if !p.terminal {
		if now.Sub(p.last) >= 5*time.Second {
			p.last = now
			fmt.Fprintf(p.w, "eval: %d/%d documents extracted\n", done, p.total)
		}
		return
	}
	const width = 30
	n := width * done / p.total
	eta := "—"
	if el := now.Sub(p.start); done > 0 && done < p.total {
		eta = (el * time.Duration(p.total-done) / time.Duration(done)).Round(time.Second).String()
	}
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d  %s elapsed  ETA %s ", strings.Repeat("#", n), strings.Repeat(".", width-n),
		done, p.total, now.Sub(p.start).Round(time.Second), eta)
}

func (p *progress) finish() {
	if p.w == nil || p.total == 0 {
		return
	}
	if p.terminal {
		p.update(p.done)
		fmt.Fprintln(p.w)
	}
}
