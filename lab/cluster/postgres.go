// Package cluster starts and supervises scratch infrastructure on this
// machine for benchmarks and drills: a throwaway PostgreSQL server, a scratch
// schema on an existing server, and `stet serve` processes of a stet binary
// (one api, several workers) that it can kill, replace and revive. It touches
// no server but the ones it started or was pointed at, and it stops every
// process it started.
package cluster

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx database/sql driver

	"github.com/stetlabs/stet/internal/stetclient"
)

// Postgres is a throwaway PostgreSQL cluster in a folder of its own.
type Postgres struct {
	bin, dir, data string
	port           int
	asPostgres     bool // running as root: the server runs as the postgres user
	runuser        string
}

// URL is the server's connection URL (user postgres, trust auth).
func (c *Postgres) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Port is the server's TCP port on 127.0.0.1.
func (c *Postgres) Port() int { return c.port }

// StartPostgres initdbs and starts a throwaway cluster in dir with the
// programs in bin (initdb, pg_ctl). fsync and full-page writes are off: the
// drills kill processes, not the machine, and the kernel keeps what was
// written. synchronous_commit stays on: with it off, a commit is
// acknowledged before its WAL reaches the kernel, and an immediate restart
// loses acknowledged deliveries (the chaos drill's first run found exactly
// that).
func StartPostgres(ctx context.Context, bin, dir string) (*Postgres, error) {
	c := &Postgres{bin: bin, dir: dir, data: filepath.Join(dir, "data")}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		c.asPostgres = true
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs a postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
		c.runuser = "runuser"
		if p, err := exec.LookPath("runuser"); err == nil {
			c.runuser = p
		} else {
			for _, p := range []string{"/usr/sbin/runuser", "/sbin/runuser"} {
				if _, err := os.Stat(p); err == nil {
					c.runuser = p
				}
			}
		}
	}
	port, err := stetclient.FreePort()
	if err != nil {
		return nil, err
	}
	c.port = port
	if err := c.run(ctx, "initdb", "-D", c.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
fsync = off
synchronous_commit = on
full_page_writes = off
max_connections = 300
`, c.port, c.dir)
	f, err := os.OpenFile(filepath.Join(c.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, err = f.WriteString(conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := c.run(ctx, "pg_ctl", "-D", c.data, "-l", filepath.Join(c.dir, "server.log"), "-w", "-t", "60", "start"); err != nil {
		return nil, err
	}
	return c, nil
}

// Restart stops the server with -m immediate (no checkpoint: the next start
// runs crash recovery) and starts it again.
func (c *Postgres) Restart(ctx context.Context) error {
	return c.run(ctx, "pg_ctl", "-D", c.data, "-l", filepath.Join(c.dir, "server.log"), "-m", "immediate", "-w", "-t", "60", "restart")
}

// Stop stops the server; it is safe to call on a server that is down.
func (c *Postgres) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.run(ctx, "pg_ctl", "-D", c.data, "-m", "fast", "-w", "-t", "20", "stop"); err != nil {
		_ = c.run(ctx, "pg_ctl", "-D", c.data, "-m", "immediate", "-w", "stop")
	}
}

// run runs one PostgreSQL program (as the postgres user when root), its
// output to a file in dir, quoted in the error if it fails.
func (c *Postgres) run(ctx context.Context, prog string, args ...string) error {
	path := filepath.Join(c.bin, prog)
	var cmd *exec.Cmd
	if c.asPostgres {
		cmd = exec.CommandContext(ctx, c.runuser, append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	out, err := os.CreateTemp(c.dir, prog+"-*.out")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Ctrl-C reaches the caller only
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(out.Name())
		return fmt.Errorf("%s %s: %w: %s", prog, args[len(args)-1], err, strings.TrimSpace(string(b)))
	}
	return nil
}

// ScratchSchema creates a fresh schema on the PostgreSQL server at base and
// returns a URL whose search_path is that schema, and a function that drops
// it. With base "" it returns "" and a no-op (the caller uses a scratch
// SQLite file).
func ScratchSchema(ctx context.Context, base string) (string, func(), error) {
	if base == "" {
		return "", func() {}, nil
	}
	var b [5]byte
	_, _ = rand.Read(b[:])
	schema := "bench_" + hex.EncodeToString(b[:])
	admin, err := sql.Open("pgx", base)
	if err != nil {
		return "", nil, err
	}
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		admin.Close()
		return "", nil, fmt.Errorf("create scratch schema: %w", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		admin.Close()
		return "", nil, fmt.Errorf("database URL does not parse")
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), func() {
		_, _ = admin.ExecContext(context.WithoutCancel(ctx), `DROP SCHEMA `+schema+` CASCADE`)
		admin.Close()
	}, nil
}
