package main

import (
	"context"
	"fmt"
	"io"
)

func cmdDrill(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "stet drill: not yet")
	return exitUsage
}
