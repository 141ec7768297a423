package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/internal/cli"
	"github.com/stetlabs/stet/internal/stetclient"
)

// cmdSend signs one report with its source's secret (Standard Webhooks)
// and posts it to a running stet, printing the answer: the way to try an
// integration by hand.
func cmdSend(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("send", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: stet send --config C --source S [--url URL] [--webhook-id ID] FILE.json\n\n"+
			"Signs FILE.json (a report: external_id, revision, text) with the source's webhook secret, the\n"+
			"Standard Webhooks scheme, posts it to the source's intake and prints the HTTP status and body.\n"+
			"Sending the same file with the same --webhook-id again is a redelivery. Exit 0 on 200 or 202.")
		fs.PrintDefaults()
	}
	cfgPath := fs.String("config", "stet.yaml", "the config naming the source and its secret_env")
	sourceID := fs.String("source", "", "the source to post to (required)")
	url := fs.String("url", "", "stet's base URL (default: http(s)://listen from the config)")
	webhookID := fs.String("webhook-id", "", "the message's webhook-id (default: a new one)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 || *sourceID == "" {
		fs.Usage()
		return exitUsage
	}
	body, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "stet send:", err)
		return exitUsage
	}
	if !json.Valid(body) {
		fmt.Fprintf(stderr, "stet send: %s is not JSON\n", fs.Arg(0))
		return exitUsage
	}
	cfg, ok := cli.LoadConfig(*cfgPath, stderr)
	if !ok {
		return exitUsage
	}
	src := cfg.Source(*sourceID)
	if src == nil {
		fmt.Fprintf(stderr, "stet send: source %q is not in %s\n", *sourceID, *cfgPath)
		return exitUsage
	}
	base := *url
	if base == "" {
		scheme := "http"
		if cfg.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + cfg.Listen
	}
	base = strings.TrimRight(base, "/")
	id := *webhookID
	if id == "" {
		id = stet.NewID("msg_send", time.Now())
	}
	h, err := stetclient.Headers(src.Secrets[0], id, time.Now(), body)
	if err != nil {
		fmt.Fprintln(stderr, "stet send:", err)
		return exitUsage
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/sources/"+src.ID+"/reports", bytes.NewReader(body))
	if err != nil {
		fmt.Fprintln(stderr, "stet send:", err)
		return exitUsage
	}
	req.Header = h
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "stet send: %s is not answering: %v\n", base, err)
		return exitUnhealthy
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	fmt.Fprintf(stdout, "webhook-id %s: %s\n%s\n", id, resp.Status, bytes.TrimSpace(answer))
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusAccepted {
		return exitOK
	}
	return exitFailure
}
