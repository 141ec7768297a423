package main

import (
	"context"
	"fmt"
	"io"
)

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "stet bench: not yet")
	return exitUsage
}
