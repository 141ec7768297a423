package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/internal/cli"
)

func cmdResume(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := cli.ConfigFlag(fs)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "Usage: stet resume [flags] JOB_ID")
		return exitUsage
	}
	a, _, code := cli.OpenOperatorApp(ctx, *cfgPath, "stet resume", stderr)
	if a == nil {
		return code
	}
	defer a.Close()
	stage, err := a.Pipeline.Resume(ctx, fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "stet resume:", stet.ErrorMessageOf(err))
		return exitFailure
	}
	fmt.Fprintf(stdout, "job %s: %s stage enqueued\n", fs.Arg(0), stage)
	return exitOK
}
