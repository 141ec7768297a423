// Command stetlab is stet's lab: the benchmarks, the recovery drills, the
// chaos drill, the eval demo's scripted fakes and the provider fakes as
// processes. It links the product's
// packages and the fakes; the product binary, stet, links neither the lab
// nor any test tooling.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/lab/evalfake"
)

// Exit codes (internal/cli says what each means).
const (
	exitOK        = cli.ExitOK
	exitFailure   = cli.ExitFailure
	exitUsage     = cli.ExitUsage
	exitUnhealthy = cli.ExitUnhealthy
)

func main() { cli.Main(run) }

const usage = `stetlab: stet's lab — benchmarks, recovery drills, the chaos drill, the eval demo.

Usage: stetlab <command> [flags]

Commands:
  bench        run a benchmark: intake | pipeline | provider-limited | batch | memory | import | river-drivers | scaling
  drill        run the recovery drills (NAME…, in this process) or chaos (many stet processes, kills, a database restart)
  eval         stet eval with --demo-fakes: scripted fakes in process, for offline demos
  fake         serve a provider fake as a process: fake openai (for the runbook's walkthroughs)
  post         send one signed delivery as a source would: post --url URL --id WEBHOOK_ID FILE

The benchmarks and drills that start stet processes run the stet binary:
--stet-binary, else a stet beside stetlab, else stet on the PATH, else one
built here with 'go build' (inside the stet module).

Run 'stetlab <command> -h' for a command's flags.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "bench":
		return cmdBench(ctx, rest, stdout, stderr)
	case "drill":
		return cmdDrill(ctx, rest, stdout, stderr)
	case "eval":
		return cli.Eval(ctx, rest, stdout, stderr, evalfake.StartDemo)
	case "fake":
		return cmdFake(ctx, rest, stdout, stderr)
	case "post":
		return cmdPost(ctx, rest, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "stetlab: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

// stetBinary finds the stet binary that benchmarks and drills start as
// processes: given, else beside this executable, else on the PATH, else
// built into dir from the module this process runs in.
func stetBinary(given, dir string, stderr io.Writer) (string, error) {
	if given != "" {
		return given, nil
	}
	if exe, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(exe), "stet")
		if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return beside, nil
		}
	}
	if path, err := exec.LookPath("stet"); err == nil {
		return path, nil
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", errors.New("no stet binary: build one (go build -o stet ./cmd/stet) and pass --stet-binary")
	}
	out := filepath.Join(dir, "stet")
	fmt.Fprintln(stderr, "stetlab: building stet (go build -o", out, "github.com/stetlabs/stet/cmd/stet)")
	build := exec.Command(goTool, "build", "-o", out, "github.com/stetlabs/stet/cmd/stet")
	build.Stdout, build.Stderr = stderr, stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build stet: %w (build it yourself and pass --stet-binary)", err)
	}
	return out, nil
}
