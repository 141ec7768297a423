// Command stet runs stet: crash-safe, exactly-once structured extraction
// over sensitive documents. It wires every package together; flags and
// subcommands live here and nowhere else.
package main

import (
	"context"
	"fmt"
	"io"

	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/ledger"
)

// Exit codes (internal/cli says what each means).
const (
	exitOK        = cli.ExitOK
	exitFailure   = cli.ExitFailure
	exitUsage     = cli.ExitUsage
	exitUnhealthy = cli.ExitUnhealthy
)

func main() { cli.Main(run) }

const usage = `stet: crash-safe, exactly-once structured extraction over sensitive documents.

Usage: stet <command> [flags]

Commands:
  quickstart   run the quickstart: stet on SQLite with the rules processor, sample reports posted
  serve        run the API and stage workers (--role api|worker|all)
  migrate      apply the ledger's and River's migrations
  send         sign a report with its source's secret and post it to a running stet; prints the answer
  inspect      show a job's or report's stage timeline and attempts (no text)
  resume       re-enqueue a job from its last durable stage
  check        check the ledger's invariants; exit 1 if any is violated
  pause        pause dispatch (--scope all|processor:ID|tenant:ID --reason …); no flags: list pauses
  unpause      resume dispatch for a scope
  manual       turn waiting and blocked jobs of a scope into manual review records (--scope S)
  reroute      move blocked jobs to a processor the policy in force permits (--scope S --to P --reason R [--dry-run])
  audit        audit verify: check the audit log's hash chain (exit 1 at the first broken link); audit list: print its rows
  batch        provider batches: status ID (one lookup, never submits), list, reconcile ID
  delete       delete a report (SOURCE/EXTERNAL_ID or REPORT_ID): tombstone, cancel, one task per copy; prints the tasks
  deletions    list deletions, or show one's tasks (DELETION_ID); --json; confirm DELETION_ID COPY --evidence T closes a copy stet cannot delete
  destinations outbound webhooks: list, enable SOURCE DESTINATION (after a 410), retry SOURCE DESTINATION
  rekey        rewrap every data key under the first encryption key and seal plaintext rows; resumable
  import       bulk backfill from an NDJSON file (--source ID, --mode sync|batch); resumable
  eval         compare processors on labelled data in a scratch ledger; report.html and report.json
  version      print the version

Run 'stet <command> -h' for a command's flags. Benchmarks, recovery drills and
the eval demo's fakes are the lab's: go build -o stetlab ./cmd/stetlab.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve", "quickstart":
		// Servers and labs: their rows are their requests' and stet's own.
	default:
		// Every audit row a command appends names it as its route.
		ctx = ledger.WithAuditRequest(ctx, ledger.AuditRequest{Route: "stet " + cmd})
	}
	switch cmd {
	case "serve":
		return cmdServe(ctx, rest, stdout, stderr)
	case "quickstart":
		return cmdQuickstart(ctx, rest, stdout, stderr)
	case "migrate":
		return cmdMigrate(ctx, rest, stdout, stderr)
	case "inspect":
		return cmdInspect(ctx, rest, stdout, stderr)
	case "resume":
		return cmdResume(ctx, rest, stdout, stderr)
	case "check":
		return cmdCheck(ctx, rest, stdout, stderr)
	case "pause":
		return cmdPause(ctx, rest, stdout, stderr, false)
	case "unpause":
		return cmdPause(ctx, rest, stdout, stderr, true)
	case "manual":
		return cmdManual(ctx, rest, stdout, stderr)
	case "batch":
		return cmdBatch(ctx, rest, stdout, stderr)
	case "audit":
		return cmdAudit(ctx, rest, stdout, stderr)
	case "destinations":
		return cmdDestinations(ctx, rest, stdout, stderr)
	case "import":
		return cmdImport(ctx, rest, stdout, stderr)
	case "delete":
		return cmdDelete(ctx, rest, stdout, stderr)
	case "reroute":
		return cmdReroute(ctx, rest, stdout, stderr)
	case "deletions":
		return cmdDeletions(ctx, rest, stdout, stderr)
	case "rekey":
		return cmdRekey(ctx, rest, stdout, stderr)
	case "send":
		return cmdSend(ctx, rest, stdout, stderr)
	case "bench", "drill":
		// The lab is a binary of its own: the product links no test tooling.
		fmt.Fprintf(stderr, "stet: %s is in the lab binary: go build -o stetlab ./cmd/stetlab && ./stetlab %s …\n", cmd, cmd)
		return exitUsage
	case "eval":
		return cmdEval(ctx, rest, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "stet", version)
		return exitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "stet: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

var version = "dev"
