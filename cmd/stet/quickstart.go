package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/internal/stetclient"
)

// Demo secrets for the quickstart, used only when the variables are unset.
var quickstartEnv = map[string]string{
	"STET_SOURCE_SECRET": "whsec_" + base64.StdEncoding.EncodeToString([]byte("stet-quickstart-demo-secret-32by")),
	"STET_DEMO_TOKEN":    "stet-demo-operator-token-0123456789",
}

func cmdQuickstart(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("quickstart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "examples/quickstart", "the quickstart folder (config, profiles, samples)")
	listen := fs.String("listen", "", "listen address (overrides the config's listen)")
	once := fs.Bool("once", false, "exit after the samples are reviewed instead of serving on")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	for k, v := range quickstartEnv {
		if os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
	cfg, ok := loadConfig(filepath.Join(*dir, "stet.yaml"), stderr)
	if !ok {
		return exitUsage
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	dataDir := filepath.Join(filepath.Dir(cfg.Path), "stet-data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		fmt.Fprintln(stderr, "stet quickstart:", err)
		return exitUnhealthy
	}
	logPath := filepath.Join(dataDir, "stet.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(stderr, "stet quickstart:", err)
		return exitUnhealthy
	}
	defer logFile.Close()
	a, err := openApp(ctx, cfg, appOptions{role: "all", logger: newLogger(logFile, "info"), migrate: true, pollInterval: 200 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(stderr, "stet quickstart:", err)
		return exitUnhealthy
	}
	defer a.close()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fmt.Fprintln(stderr, "stet quickstart:", err)
		return exitUnhealthy
	}
	base := "http://" + ln.Addr().String()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- a.serve(sctx, ln, "all") }()

	fmt.Fprintf(stdout, "stet quickstart: SQLite at %s, rules processor, listening on %s\n", strings.TrimPrefix(cfg.Database, "sqlite://"), base)
	fmt.Fprintf(stdout, "logs (JSON, IDs only) go to %s\n\n", logPath)

	src := cfg.Sources[0]
	token := os.Getenv(cfg.Tenants[0].Tokens[0].TokenEnv)
	client := &stetclient.Client{Base: base, Secret: src.Secrets[0], Token: token}
	jobs, err := postSamples(ctx, stdout, client, src.ID, filepath.Join(*dir, "samples"))
	if err != nil {
		fmt.Fprintln(stderr, "stet quickstart:", err)
		return exitFailure
	}
	ok = waitReviewed(ctx, client, jobs, 60*time.Second)
	if !ok {
		fmt.Fprintln(stderr, "stet quickstart: not every job reached a review record within 60s; see the log")
	}
	if err := printReview(ctx, stdout, client); err != nil {
		fmt.Fprintln(stderr, "stet quickstart:", err)
		return exitFailure
	}
	cfgRel := filepath.Join(*dir, "stet.yaml")
	fmt.Fprintf(stdout, `
Where to look:
  the review UI:      %s/ui/review   (sign in with the token %s)
  the review queue:   curl -s -H "Authorization: Bearer %s" %s/v1/review
  one report:         curl -s -H "Authorization: Bearer %s" %s/v1/sources/%s/reports/report-001
  a job's timeline:   go run ./cmd/stet inspect --config %s %s/report-001
  invariants:         go run ./cmd/stet check --config %s
  metrics:            curl -s %s/metrics | grep '^stet_'
`, base, token, token, base, token, base, src.ID, cfgRel, src.ID, cfgRel, base)
	if *once {
		stop()
		<-served
		if !ok {
			return exitFailure
		}
		return exitOK
	}
	fmt.Fprintln(stdout, "\nstet keeps serving; press Ctrl-C to stop. Running the quickstart again redelivers the samples: every one resolves to its existing job.")
	if err := <-served; err != nil {
		fmt.Fprintln(stderr, "stet quickstart:", err)
		return exitFailure
	}
	return exitOK
}

// postSamples delivers every sample, signed, then redelivers the first: once
// with the same webhook-id and once with a new one. It returns the job IDs.
func postSamples(ctx context.Context, stdout io.Writer, client *stetclient.Client, source, dir string) (map[string]bool, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no samples in %s", dir)
	}
	sort.Strings(files)
	type delivery struct {
		file, webhookID, why string
	}
	var ds []delivery
	for _, f := range files {
		ds = append(ds, delivery{f, "msg_qs_" + strings.TrimSuffix(filepath.Base(f), ".json"), ""})
	}
	ds = append(ds,
		delivery{files[0], ds[0].webhookID, "same webhook-id again"},
		delivery{files[0], "msg_qs_redelivered_" + fmt.Sprint(time.Now().UnixNano()), "new webhook-id, same content"},
	)
	jobs := map[string]bool{}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "sample\twebhook-id\tstatus\tjob\tduplicate\tnote")
	for _, d := range ds {
		body, err := os.ReadFile(d.file)
		if err != nil {
			return nil, err
		}
		a, err := client.Deliver(ctx, source, d.webhookID, body)
		if err != nil {
			return nil, err
		}
		if a.Intake.JobID != "" {
			jobs[a.Intake.JobID] = true
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%v\t%s\n", filepath.Base(d.file), d.webhookID, a.Status, dash(a.Intake.JobID), a.Intake.Duplicate, d.why)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\n%d deliveries, %d distinct jobs\n\n", len(ds), len(jobs))
	return jobs, nil
}

// waitReviewed waits until every job has a review record.
func waitReviewed(ctx context.Context, client *stetclient.Client, jobs map[string]bool, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		done := 0
		for id := range jobs {
			var v api.JobView
			if err := client.GetJSON(ctx, "/v1/jobs/"+id, &v); err == nil && v.ReviewRecordID != nil {
				done++
			}
		}
		if done == len(jobs) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
	return false
}

func printReview(ctx context.Context, stdout io.Writer, client *stetclient.Client) error {
	var list struct {
		Records []api.RecordView `json:"records"`
	}
	if err := client.GetJSON(ctx, "/v1/review?limit=500", &list); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "review queue (%d records):\n", len(list.Records))
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "record\treport\trev\tkind\tauthoritative\tcategory\tseverity\taction")
	for _, r := range list.Records {
		var c struct{ Category, Severity, Action string }
		_ = json.Unmarshal(r.Classification, &c)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%v\t%s\t%s\t%s\n", r.ID, r.ReportID, r.Revision, r.Kind, r.Authoritative, dash(c.Category), dash(c.Severity), dash(c.Action))
	}
	return tw.Flush()
}
