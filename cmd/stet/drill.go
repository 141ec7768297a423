package main

import (
	"context"
	"fmt"
	"io"
)

const drillUsage = `Usage: stet drill chaos [flags]

  chaos   a Jepsen-style drill against a scratch PostgreSQL cluster of its own:
          one api and several worker processes of this binary take a seeded
          load of signed deliveries while workers are SIGKILLed at random and
          the database is restarted once (-m immediate). After a heal phase a
          checker reads the ledger and the fake provider's call log and counts
          lost, duplicated and extra work. Exit 0 only if every count is zero.

The recovery drills of DESIGN §10 also run as tests: go test ./...
Run 'stet drill chaos -h' for its flags; docs/drills.md explains the table.
`

func cmdDrill(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, drillUsage)
		return exitUsage
	}
	switch args[0] {
	case "chaos":
		return cmdDrillChaos(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, drillUsage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "stet drill: unknown drill %q\n\n%s", args[0], drillUsage)
		return exitUsage
	}
}
