package bench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stetlabs/stet/lab/testdb"
	"github.com/stetlabs/stet/ledger"
)

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	// A command name with a space and a parenthesis, as a process may
	// name itself.
	line := "4242 (post gres: a) b) S 17 4242 4242 0 -1 4194560 90 0 0 0 123 45 6 7 20 0 1 0 98765 222085120 6100 18446744073709551615 1 1 0 0 0 0 0 4096 536887815 0 0 0 17 1 0 0 0 0 0\n"
	got, ok := parseProcStat(line)
	want := procStatFields{ppid: 17, utime: 123, stime: 45, cutime: 6, cstime: 7, start: 98765}
	if !ok || got != want {
		t.Errorf("parseProcStat = %+v, %v; want %+v, true", got, ok, want)
	}
	if _, ok := parseProcStat("4242 (cut short) S 1 2"); ok {
		t.Error("parseProcStat of a short line succeeded")
	}
	self, ok := procStat(os.Getpid())
	if !ok || self.ppid != os.Getppid() || self.start == 0 {
		t.Errorf("procStat(self) = %+v, %v; want parent %d and a start time", self, ok, os.Getppid())
	}
}

// The meter charges a query's work to the server, not to this process, and
// finds no server on SQLite.
func TestCPUMeterServer(t *testing.T) {
	ctx := context.Background()
	sqlite, err := ledger.Open(ctx, testdb.URL(t, ledger.SQLite))
	if err != nil {
		t.Fatal(err)
	}
	defer sqlite.Close()
	if m := newCPUMeter(ctx, sqlite); m.postmaster != 0 {
		t.Errorf("SQLite meter found a server process %d", m.postmaster)
	}

	db, err := ledger.Open(ctx, testdb.URL(t, ledger.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m := newCPUMeter(ctx, db)
	if m.postmaster == 0 {
		t.Fatal("no server process found for the test server on this machine")
	}
	from := m.mark()
	var n int64
	if err := db.Writer().QueryRowContext(ctx, `SELECT count(*) FROM generate_series(1, 5000000)`).Scan(&n); err != nil || n != 5000000 {
		t.Fatalf("count = %d, %v", n, err)
	}
	c := m.cost(from, m.mark(), 1)
	if c.Server < 100*time.Millisecond || c.Process >= c.Server {
		t.Errorf("a 5M-row count cost the server %s and this process %s; want the server at least 100ms and above the process", c.Server, c.Process)
	}
	if c.Idle < 0 || c.Idle > 1 {
		t.Errorf("machine idle share %v, want within [0, 1]", c.Idle)
	}
}
