package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Params are stetlab bench's command line: one value per flag, and which
// flags were given (-n's default depends on the benchmark).
type Params struct {
	Stet                Stet
	Dir                 string // scratch folder (required)
	Database            string // a postgres:// server; "": scratch SQLite files
	Binary              string // scaling, provider-limited: the stet binary to start; required
	Processes           string // scaling: worker process counts, "1,2,4"
	N                   int
	Concurrency         int
	WorkerProcesses     int // provider-limited
	RPM                 int // provider-limited
	ProviderConcurrency int // provider-limited
	BatchSize           int // batch
	Window              time.Duration
	PausedProfile       string
	Encrypt             bool
	Given               map[string]bool // the flags set on the command line, by name
}

// Printout is what every benchmark returns: JSON-encodable, with a text
// form.
type Printout interface{ WriteText(io.Writer) }

// UsageError is a command line a benchmark cannot run. Bench names the
// benchmark the sentence is about ("" for stetlab bench as a whole).
type UsageError struct {
	Bench string
	Msg   string
}

func (e *UsageError) Error() string { return e.Msg }

// ErrUnknown is returned by Run for a name that is no benchmark.
var ErrUnknown = errors.New("unknown benchmark")

// Run runs the benchmark name with p: "intake", "pipeline",
// "river-drivers", "provider-limited", "memory", "import", "batch" or
// "scaling". A command line it cannot run is a *UsageError.
func Run(ctx context.Context, name string, p Params) (Printout, error) {
	if p.Database != "" && !strings.HasPrefix(p.Database, "postgres://") && !strings.HasPrefix(p.Database, "postgresql://") {
		return nil, &UsageError{Msg: "--database must be a postgres:// URL"}
	}
	if p.Encrypt && name != "intake" && name != "pipeline" {
		return nil, &UsageError{Msg: "--encrypt is for intake and pipeline"}
	}
	// n is -n when given, else the benchmark's own default.
	n := func(def int) int {
		if p.Given["n"] {
			return p.N
		}
		return def
	}
	switch name {
	case "intake":
		return Intake(ctx, IntakeOptions{Stet: p.Stet, Dir: p.Dir, Database: p.Database, N: p.N, Concurrency: p.Concurrency, Encrypt: p.Encrypt})
	case "pipeline":
		return Pipeline(ctx, PipelineOptions{Stet: p.Stet, Dir: p.Dir, Database: p.Database, N: p.N, Concurrency: p.Concurrency, Encrypt: p.Encrypt})
	case "river-drivers":
		return RiverDrivers(ctx, RiverDriversOptions{Database: p.Database, N: p.N})
	case "provider-limited":
		if p.WorkerProcesses > 1 && p.Database == "" {
			return nil, &UsageError{Bench: name, Msg: "--worker-processes above 1 needs --database postgres://…"}
		}
		return ProviderLimited(ctx, ProviderOptions{Stet: p.Stet, Dir: p.Dir, Database: p.Database, N: n(p.RPM), // one minute of the limit
			Binary: p.Binary, Processes: p.WorkerProcesses, RPM: p.RPM, LatencyMin: time.Second, LatencyMax: 2 * time.Second, Concurrency: p.ProviderConcurrency})
	case "memory":
		return Memory(ctx, MemoryOptions{Stet: p.Stet, Dir: p.Dir, Database: p.Database, N: n(100000), Window: p.Window, PausedProfile: p.PausedProfile})
	case "import":
		return Import(ctx, ImportOptions{Stet: p.Stet, Dir: p.Dir, Database: p.Database, N: n(1000000), Concurrency: p.Concurrency})
	case "batch":
		return Batch(ctx, BatchOptions{Stet: p.Stet, Dir: p.Dir, N: n(10000), BatchSize: p.BatchSize})
	case "scaling":
		if p.Database == "" {
			return nil, &UsageError{Bench: name, Msg: "needs --database postgres://…"}
		}
		var counts []int
		for _, c := range strings.Split(p.Processes, ",") {
			w, err := strconv.Atoi(strings.TrimSpace(c))
			if err != nil || w < 1 {
				return nil, &UsageError{Bench: name, Msg: "--processes must be a list of positive integers"}
			}
			counts = append(counts, w)
		}
		return Scaling(ctx, ScalingOptions{Dir: p.Dir, Database: p.Database, Binary: p.Binary, Processes: counts, N: p.N, Concurrency: p.Concurrency})
	default:
		return nil, fmt.Errorf("%w %q", ErrUnknown, name)
	}
}
