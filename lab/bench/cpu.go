package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/ledger/ledgertest"
)

// Where each item's CPU goes. On a machine where the benchmark, its load
// and the database share the cores, a ratio says which side is faster but
// not why; what each phase cost in CPU per item does. A benchmark marks
// the CPU clocks before and after each phase: this process's (getrusage:
// stet with its HTTP clients and fake provider, or the baseline's client),
// the PostgreSQL server's when it runs on this machine (/proc, summed over
// the postmaster and its children), and the machine's idle share
// (/proc/stat).

// CPUCost is what one item of a phase cost in CPU.
type CPUCost struct {
	// Process is this process's CPU time per item.
	Process time.Duration `json:"process_per_item_ns"`
	// Server is the PostgreSQL server's CPU time per item; 0 on SQLite
	// (in this process) or when the server is not on this machine.
	Server time.Duration `json:"server_per_item_ns,omitempty"`
	// Idle is the share of the machine's CPU time left idle (I/O wait
	// included), from 0 to 1; -1 where /proc/stat is not readable.
	Idle float64 `json:"machine_idle"`
}

// cpuMeter reads the clocks. postmaster is the PostgreSQL server's process
// on this machine, 0 if there is none to read.
type cpuMeter struct {
	postmaster int
}

// cpuMark is where the clocks stood at one moment.
type cpuMark struct {
	process     time.Duration
	server      time.Duration
	idle, total uint64 // /proc/stat ticks, all CPUs
}

// newCPUMeter finds db's server process when it runs on this machine: the
// parent of this session's backend, if that process is a postgres that
// started when the server says it did. Anything else (SQLite, a remote
// server, no /proc) leaves the server out.
func newCPUMeter(ctx context.Context, db *ledger.DB) cpuMeter {
	backend, started, ok := ledgertest.ServerBackend(ctx, db)
	if !ok {
		return cpuMeter{}
	}
	bst, ok := procStat(backend)
	if !ok || bst.ppid <= 0 {
		return cpuMeter{}
	}
	parent := bst.ppid
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", parent))
	if err != nil || !strings.HasPrefix(string(comm), "postgres") {
		return cpuMeter{}
	}
	st, ok := procStat(parent)
	if !ok {
		return cpuMeter{}
	}
	boot, ok := bootTime()
	if !ok {
		return cpuMeter{}
	}
	at := boot.Add(ticks(st.start))
	if d := at.Sub(started); d < -2*time.Second || d > 2*time.Second {
		return cpuMeter{} // a local postgres, but not this server
	}
	return cpuMeter{postmaster: parent}
}

// mark reads the clocks now.
func (m cpuMeter) mark() cpuMark {
	c := cpuMark{process: usage()}
	c.idle, c.total = machineTicks()
	if m.postmaster != 0 {
		c.server = serverCPU(m.postmaster)
	}
	return c
}

// cost is what each of n items cost between from and to.
func (m cpuMeter) cost(from, to cpuMark, n int) *CPUCost {
	if n <= 0 {
		return nil
	}
	c := &CPUCost{Process: (to.process - from.process) / time.Duration(n), Idle: -1}
	if m.postmaster != 0 {
		c.Server = (to.server - from.server) / time.Duration(n)
	}
	if to.total > from.total {
		c.Idle = float64(to.idle-from.idle) / float64(to.total-from.total)
	}
	return c
}

// writeCPU prints a phase's CPU per item, when it was measured.
func writeCPU(w io.Writer, label string, c *CPUCost) {
	if c == nil {
		return
	}
	line := fmt.Sprintf("    %-9s this process %s", label, micros(c.Process))
	if c.Server > 0 {
		line += ", PostgreSQL " + micros(c.Server)
	}
	if c.Idle >= 0 {
		line += fmt.Sprintf("; machine %.1f %% idle", 100*c.Idle)
	}
	fmt.Fprintln(w, line)
}

func micros(d time.Duration) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}

// procStatFields are the fields of /proc/PID/stat that the meter reads.
type procStatFields struct {
	ppid           int
	utime, stime   uint64 // ticks
	cutime, cstime uint64 // ticks of children waited for
	start          uint64 // ticks after boot
}

// procStat reads /proc/pid/stat.
func procStat(pid int) (procStatFields, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStatFields{}, false
	}
	return parseProcStat(string(b))
}

// parseProcStat reads the fields of a /proc/PID/stat line. The command
// name (field 2) is in parentheses and may hold spaces and parentheses, so
// fields are counted after its last ')'.
func parseProcStat(s string) (procStatFields, bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStatFields{}, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 20 {
		return procStatFields{}, false
	}
	n := func(field int) uint64 { v, _ := strconv.ParseUint(f[field-3], 10, 64); return v }
	return procStatFields{ppid: int(n(4)), utime: n(14), stime: n(15), cutime: n(16), cstime: n(17), start: n(22)}, true
}

// serverCPU is the CPU time of the postmaster, of its running children and
// of the children it has reaped (a backend that exited mid-phase).
func serverCPU(postmaster int) time.Duration {
	st, ok := procStat(postmaster)
	if !ok {
		return 0
	}
	sum := st.utime + st.stime + st.cutime + st.cstime
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return ticks(sum)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == postmaster {
			continue
		}
		if c, ok := procStat(pid); ok && c.ppid == postmaster {
			sum += c.utime + c.stime
		}
	}
	return ticks(sum)
}

// ticks converts clock ticks (USER_HZ, 100 on Linux) to a duration.
func ticks(n uint64) time.Duration { return time.Duration(n) * 10 * time.Millisecond }

// machineTicks reads the idle (with I/O wait) and total ticks of every CPU.
func machineTicks() (idle, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0
	}
	// The first eight: guest time (after them) is already counted in user
	// time.
	for i, s := range f[1:min(len(f), 9)] {
		v, _ := strconv.ParseUint(s, 10, 64)
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return idle, total
}

// bootTime is when the machine booted (/proc/stat's btime).
func bootTime() (time.Time, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return time.Unix(s, 0), err == nil
		}
	}
	return time.Time{}, false
}
