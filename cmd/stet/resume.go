package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/stetlabs/stet"
)

func cmdResume(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "Usage: stet resume [flags] JOB_ID")
		return exitUsage
	}
	cfg, ok := loadOperatorConfig(*cfgPath, stderr)
	if !ok {
		return exitUsage
	}
	if !ledgerExists(cfg.Database, stderr) {
		return exitUnhealthy
	}
	a, err := openApp(ctx, cfg, appOptions{})
	if err != nil {
		fmt.Fprintln(stderr, "stet resume:", err)
		return exitUnhealthy
	}
	defer a.close()
	stage, err := a.pipeline.Resume(ctx, fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "stet resume:", stet.ErrorMessageOf(err))
		return exitFailure
	}
	fmt.Fprintf(stdout, "job %s: %s stage enqueued\n", fs.Arg(0), stage)
	return exitOK
}
