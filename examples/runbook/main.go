// Command runbook serves the OpenAI fake (processor/openai/openaifake) as a
// process, for the incident walkthroughs of docs/operations.md. It prints
// the base URL to give a processor's base_url, then serves until killed.
//
// A control listener scripts faults and reports what the fake received:
//
//	POST /fault?kind=quota&n=3   the next 3 chat calls answer 429 insufficient_quota
//	POST /fault?kind=server_error&n=1
//	GET  /stats                  chat calls, batch uploads, create calls, batches created
//
// It is a test tool: it keeps the text of what it receives in memory. Never
// point a real source at it.
//
// "runbook post" sends one signed delivery (Standard Webhooks, as a source
// would) and prints the status and the answer:
//
//	runbook post --url http://127.0.0.1:8080/v1/sources/S/reports --id msg_1 FILE
//
// with the source's secret in STET_SOURCE_SECRET.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "post" {
		os.Exit(post(os.Args[2:]))
	}
	key := flag.String("api-key", "sk-runbook", "the only API key the fake accepts")
	control := flag.String("control", "127.0.0.1:0", "address of the control listener")
	polls := flag.Int("polls-to-end", 1, "status lookups a batch takes to end (negative: never)")
	flag.Parse()

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
		fmt.Fprintln(os.Stderr, "runbook:", err)
		os.Exit(1)
	}
	fmt.Printf("fake   %s\ncontrol http://%s\n", f.URL(), ln.Addr())
	if err := http.Serve(ln, mux); err != nil {
		fmt.Fprintln(os.Stderr, "runbook:", err)
		os.Exit(1)
	}
}

// post sends one signed delivery and prints the answer's status and body.
func post(args []string) int {
	fs := flag.NewFlagSet("post", flag.ExitOnError)
	url := fs.String("url", "", "the source's intake URL")
	id := fs.String("id", "", "the webhook-id")
	_ = fs.Parse(args)
	if *url == "" || *id == "" || fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: runbook post --url URL --id WEBHOOK_ID FILE")
		return 2
	}
	body, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "runbook:", err)
		return 1
	}
	now := time.Now()
	sig, err := api.Sign(os.Getenv("STET_SOURCE_SECRET"), *id, now, body)
	if err != nil {
		fmt.Fprintln(os.Stderr, "runbook:", err)
		return 1
	}
	req, err := http.NewRequest(http.MethodPost, *url, bytes.NewReader(body))
	if err != nil {
		fmt.Fprintln(os.Stderr, "runbook:", err)
		return 1
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", *id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, "runbook:", err)
		return 1
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(resp.Body)
	fmt.Printf("%d %s", resp.StatusCode, out.String())
	return 0
}
