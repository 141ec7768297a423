package main

import (
	"context"
	"io"

	"github.com/stetlabs/stet/internal/cli"
)

// stet import backfills from an NDJSON file (internal/cli: the lab's import
// benchmark runs the same command).
func cmdImport(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Import(ctx, args, stdout, stderr)
}
