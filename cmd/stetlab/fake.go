package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/stetlabs/stet/processor/openai/openaifake"
	"github.com/stetlabs/stet/webhook"
)

const fakeUsage = `Usage: stetlab fake openai [flags]

Serves the OpenAI fake (processor/openai/openaifake) as a process, for the
incident walkthroughs of docs/operations.md. It prints the base URL to give a
processor's base_url, then serves until interrupted.

A control listener scripts faults and reports what the fake received:

  POST /fault?kind=quota&n=3   the next 3 chat calls answer 429 insufficient_quota
  POST /fault?kind=server_error&n=1
  GET  /stats                  chat calls, batch uploads, create calls, batches created

It is a test tool: it keeps the text of what it receives in memory. Never
point a real source at it.

Flags:
`

// cmdFake serves a provider fake as a process.
func cmdFake(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "openai" {
		fmt.Fprint(stderr, fakeUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("fake openai", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, fakeUsage); fs.PrintDefaults() }
	key := fs.String("api-key", "sk-runbook", "the only API key the fake accepts")
	control := fs.String("control", "127.0.0.1:0", "address of the control listener")
	polls := fs.Int("polls-to-end", 1, "status lookups a batch takes to end (negative: never)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}

	f := openaifake.New(openaifake.Options{APIKey: *key, Batch: openaifake.BatchOptions{PollsToEnd: *polls}})
	defer f.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("POST /fault", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 1 {
			n = 1
		}
		kind := openaifake.FaultKind(r.URL.Query().Get("kind"))
		for range n {
			f.Enqueue(openaifake.Fault{Kind: kind})
		}
		fmt.Fprintf(w, "scripted %d × %s\n", n, kind)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		bs := f.BatchStats()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int{
			"chat_calls": f.Calls(), "batch_uploads": bs.Uploads, "batch_create_calls": bs.CreateCalls,
			"batches_created": bs.Created, "batch_status_calls": bs.StatusCalls, "batch_result_fetches": bs.ResultFetches,
		})
	})
	ln, err := net.Listen("tcp", *control)
	if err != nil {
		fmt.Fprintln(stderr, "stetlab fake:", err)
		return exitUnhealthy
	}
	fmt.Fprintf(stdout, "fake   %s\ncontrol http://%s\n", f.URL(), ln.Addr())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(stderr, "stetlab fake:", err)
		return exitFailure
	}
	return exitOK
}

// cmdPost sends one signed delivery, as a source would (Standard Webhooks,
// with the source's secret in STET_SOURCE_SECRET), and prints the answer's
// status and body.
func cmdPost(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("post", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "", "the source's intake URL")
	id := fs.String("id", "", "the webhook-id")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *url == "" || *id == "" || fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: stetlab post --url URL --id WEBHOOK_ID FILE")
		return exitUsage
	}
	body, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "stetlab post:", err)
		return exitFailure
	}
	now := time.Now()
	sig, err := webhook.Sign(os.Getenv("STET_SOURCE_SECRET"), *id, now, body)
	if err != nil {
		fmt.Fprintln(stderr, "stetlab post:", err)
		return exitFailure
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, *url, bytes.NewReader(body))
	if err != nil {
		fmt.Fprintln(stderr, "stetlab post:", err)
		return exitFailure
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", *id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "stetlab post:", err)
		return exitFailure
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(resp.Body)
	fmt.Fprintf(stdout, "%d %s", resp.StatusCode, out.String())
	return exitOK
}
