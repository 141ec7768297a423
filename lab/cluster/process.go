package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stetlabs/stet/internal/stetclient"
)

// Process is one `stet serve` process the cluster started.
type Process struct {
	// Name is the slot it runs in: "api", "worker-1", …
	Name string
	// Pid is its process ID.
	Pid int
	// Base is its base URL, http://127.0.0.1:PORT.
	Base string
	// LogPath is the file its stdout and stderr go to.
	LogPath string
	// Started is when it was started; ready is set when WaitReady last
	// succeeded, exitedAt when it ended (both unix nanoseconds).
	Started  time.Time
	ready    atomic.Int64
	exitedAt atomic.Int64

	cmd  *exec.Cmd
	done chan struct{}
	// expected is set before the cluster signals the process, so its exit is
	// not counted as unexpected.
	expected atomic.Bool
}

// readyHTTP is the client of every readiness poll.
var readyHTTP = &http.Client{Timeout: 30 * time.Second}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Asked reports whether the group signalled the process (a kill, a stop):
// an exit it did not ask for is the process's own (a crash).
func (p *Process) Asked() bool { return p.expected.Load() }

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitedAt is when the process was seen to end; zero while it runs.
func (p *Process) ExitedAt() time.Time {
	if n := p.exitedAt.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// ReadyAt is when WaitReady last saw it ready; zero before.
func (p *Process) ReadyAt() time.Time {
	if n := p.ready.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Signal sends sig if the process still runs.
func (p *Process) Signal(sig syscall.Signal) {
	if !p.Exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Wait waits up to limit for the process to end and reports whether it did.
func (p *Process) Wait(limit time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(limit):
		return false
	}
}

// WaitReady polls /readyz until it answers 200; it fails at once if the
// process exits first.
func (p *Process) WaitReady(ctx context.Context, limit time.Duration) error {
	c := &stetclient.Client{Base: p.Base, HTTP: readyHTTP}
	err := c.WaitReady(ctx, limit, func() error {
		if p.Exited() {
			return fmt.Errorf("%s exited before it was ready (%v)", p.Name, p.cmd.ProcessState)
		}
		return nil
	})
	if err == nil {
		p.ready.Store(time.Now().UnixNano())
	}
	return err
}

// GroupOptions describes the `stet serve` processes of a Group.
type GroupOptions struct {
	// Binary is the stet binary to run.
	Binary string
	// Config is the stet.yaml every process serves.
	Config string
	// Env is every process's whole environment.
	Env []string
	// LogDir receives one log file (stdout and stderr) per process start.
	LogDir string
	// Args are extra flags for `stet serve`, such as --log-level warn.
	Args []string
}

// Group owns one api process and several worker processes on one config.
// Revive restarts any process that exited without the group asking.
type Group struct {
	o GroupOptions

	mu         sync.Mutex
	api        *Process
	apiAddr    string
	workers    []*Process
	starts     map[string]int
	unexpected int
	all        []*Process // every process ever started, for the final sweep
}

// StartGroup starts one api process and workers worker processes. It does
// not wait for them to be ready. On an error, the processes it started are
// left for Stop.
func StartGroup(o GroupOptions, workers int) (*Group, error) {
	g := &Group{o: o, starts: map[string]int{}}
	g.mu.Lock()
	defer g.mu.Unlock()
	addr, err := stetclient.FreeAddr()
	if err != nil {
		return g, err
	}
	g.apiAddr = addr
	if g.api, err = g.spawnLocked("api", "api", g.apiAddr, nil); err != nil {
		return g, err
	}
	for i := 0; i < workers; i++ {
		p, err := g.spawnLocked(fmt.Sprintf("worker-%d", i+1), "worker", "", nil)
		if err != nil {
			return g, err
		}
		g.workers = append(g.workers, p)
	}
	return g, nil
}

func (g *Group) spawnLocked(name, role, addr string, extraEnv []string) (*Process, error) {
	if addr == "" {
		a, err := g.freeAddrLocked()
		if err != nil {
			return nil, err
		}
		addr = a
	}
	g.starts[name]++
	logPath := filepath.Join(g.o.LogDir, fmt.Sprintf("%s.%d.log", name, g.starts[name]))
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor
	args := append([]string{"serve", "--config", g.o.Config, "--role", role, "--listen", addr}, g.o.Args...)
	cmd := exec.Command(g.o.Binary, args...)
	cmd.Env = append(append([]string(nil), g.o.Env...), extraEnv...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group: Ctrl-C reaches the caller, which stops its
	// children. Pdeathsig: if the caller itself dies (SIGKILL, a closed
	// stdout pipe), the kernel kills its children rather than leave them
	// running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Pid: cmd.Process.Pid, Base: "http://" + addr, LogPath: logPath, Started: time.Now(), cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); p.exitedAt.Store(time.Now().UnixNano()); close(p.done) }()
	g.all = append(g.all, p)
	return p, nil
}

// freeAddrLocked returns a free loopback address that no slot of the
// group holds: the api's stays its own while the api is down for a
// restart, and a port just given to a process that has not bound it yet is
// free to the kernel too. A worker that took the api's port would answer
// the deliveries meant for the api with 404.
func (g *Group) freeAddrLocked() (string, error) {
	taken := map[string]bool{g.apiAddr: true}
	for _, w := range g.workers {
		taken[strings.TrimPrefix(w.Base, "http://")] = true
	}
	for {
		a, err := stetclient.FreeAddr()
		if err != nil || !taken[a] {
			return a, err
		}
	}
}

// Current returns the api process and the worker processes now running in
// their slots.
func (g *Group) Current() (*Process, []*Process) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.api, append([]*Process(nil), g.workers...)
}

// Kill SIGKILLs worker i and waits for it to die.
func (g *Group) Kill(i int) (*Process, error) {
	g.mu.Lock()
	p := g.workers[i]
	p.expected.Store(true)
	g.mu.Unlock()
	p.Signal(syscall.SIGKILL)
	if !p.Wait(10 * time.Second) {
		return p, fmt.Errorf("%s (pid %d) still runs 10s after SIGKILL", p.Name, p.Pid)
	}
	return p, nil
}

// Replace starts a new process in worker slot i.
func (g *Group) Replace(i int) (*Process, error) { return g.ReplaceWith(i, nil) }

// ReplaceWith starts a new process in worker slot i with extraEnv added to
// its environment (such as STET_CRASH_AT=…). The extra variables are this
// start's only: Revive restarts the slot with the group's environment.
func (g *Group) ReplaceWith(i int, extraEnv []string) (*Process, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, err := g.spawnLocked(g.workers[i].Name, "worker", "", extraEnv)
	if err != nil {
		return nil, err
	}
	g.workers[i] = p
	return p, nil
}

// Revive restarts every process that exited without the group asking.
func (g *Group) Revive() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.api.Exited() && !g.api.expected.Load() {
		g.unexpected++
		if p, err := g.spawnLocked("api", "api", g.apiAddr, nil); err == nil {
			g.api = p
		}
	}
	for i, w := range g.workers {
		if w.Exited() && !w.expected.Load() {
			g.unexpected++
			if p, err := g.spawnLocked(w.Name, "worker", "", nil); err == nil {
				g.workers[i] = p
			}
		}
	}
}

// UnexpectedExits counts the processes Revive found dead.
func (g *Group) UnexpectedExits() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.unexpected
}

// Stop asks every process to stop (SIGTERM: a graceful shutdown), and
// SIGKILLs those still running after limit.
func (g *Group) Stop(limit time.Duration) {
	g.mu.Lock()
	procs := append([]*Process(nil), g.all...)
	g.mu.Unlock()
	for _, p := range procs {
		p.expected.Store(true)
		p.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(limit)
	for _, p := range procs {
		if !p.Wait(time.Until(deadline)) {
			p.Signal(syscall.SIGKILL)
			p.Wait(10 * time.Second)
		}
	}
}
