package main

import (
	"context"
	"io"

	"github.com/stetlabs/stet/internal/cli"
)

// stet eval compares processors on labelled data. The offline demo's
// scripted fakes (--demo-fakes) are the lab's: stetlab eval.
func cmdEval(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Eval(ctx, args, stdout, stderr, nil)
}
