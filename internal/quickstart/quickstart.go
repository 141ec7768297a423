// Package quickstart is the flow of stet quickstart against a running
// stet: deliver the samples signed (and redeliver one, to show that a
// redelivery resolves to its job), wait for their review records, and
// print the review queue and where to look next. It prints IDs, states
// and the samples' classifications; never a sample's text.
package quickstart

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/internal/stetclient"
)

// demoEnv are the quickstart's demo secrets, used only when unset.
var demoEnv = map[string]string{
	"STET_SOURCE_SECRET": "whsec_" + base64.StdEncoding.EncodeToString([]byte("stet-quickstart-demo-secret-32by")),
	"STET_DEMO_TOKEN":    "stet-demo-operator-token-0123456789",
}

// SetDemoSecrets sets each of the quickstart config's secret variables
// that is unset to its demo value.
func SetDemoSecrets() {
	for k, v := range demoEnv {
		if os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
}

// ReviewWait is how long Run waits for every job's review record.
const ReviewWait = 60 * time.Second

// Params are what Run needs of the running stet.
type Params struct {
	Client     *stetclient.Client // signed with the source's secret, holding an operator token
	Source     string             // the source the samples are delivered to
	Samples    string             // the folder of *.json samples (and *.wav voice notes)
	ConfigPath string             // the config's path as the reader typed it, for the hints
	// SecretEnv names the variable holding the source's webhook secret
	// (the secret itself is the Client's), for the stet send hint.
	SecretEnv string
	Stdout    io.Writer
	Stderr    io.Writer
}

// Run delivers the samples, waits up to ReviewWait for their review
// records and prints the queue and the hints. reviewed says whether every
// job reached a review record.
func Run(ctx context.Context, p Params) (reviewed bool, err error) {
	jobs, err := postSamples(ctx, p.Stdout, p.Client, p.Source, p.Samples)
	if err != nil {
		return false, err
	}
	reviewed = waitReviewed(ctx, p.Client, jobs, ReviewWait)
	if !reviewed {
		fmt.Fprintln(p.Stderr, "stet quickstart: not every job reached a review record within 60s; see the log")
	}
	if err := printReview(ctx, p.Stdout, p.Client); err != nil {
		return reviewed, err
	}
	base, token := p.Client.Base, p.Client.Token
	// The hints name the first sample: report-001, or a voice note's.
	first, send := "report-001", filepath.Join(p.Samples, "report-001.json")
	if _, err := os.Stat(send); err != nil {
		if notes, _ := filepath.Glob(filepath.Join(p.Samples, "*.wav")); len(notes) > 0 {
			first = strings.TrimSuffix(filepath.Base(notes[0]), ".wav")
		}
		// stet send takes a JSON report: the quickstart's, beside this folder.
		send = filepath.Join(filepath.Dir(filepath.Dir(p.Samples)), "quickstart", "samples", "report-001.json")
	}
	fmt.Fprintf(p.Stdout, `
Where to look:
  the review UI:      %s/ui/review   (sign in with the token %s)
  the review queue:   curl -s -H "Authorization: Bearer %s" %s/v1/review
  one report:         curl -s -H "Authorization: Bearer %s" %s/v1/sources/%s/reports/%s
  a job's timeline:   ./stet inspect --config %s %s/%s
  invariants:         ./stet check --config %s
  metrics:            curl -s %s/metrics | grep '^stet_'

Send a report of your own, signed with the source's webhook secret (Standard Webhooks):
  export %s='%s'
  ./stet send --config %s --source %s --url %s %s
`, base, token, token, base, token, base, p.Source, first, p.ConfigPath, p.Source, first, p.ConfigPath, base,
		p.SecretEnv, p.Client.Secret, p.ConfigPath, p.Source, base, send)
	return reviewed, nil
}

// postSamples delivers every sample, signed, then redelivers the first: once
// with the same webhook-id and once with a new one. It returns the job IDs.
func postSamples(ctx context.Context, stdout io.Writer, client *stetclient.Client, source, dir string) (map[string]bool, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("no samples in %s", dir)
	}
	notes, _ := filepath.Glob(filepath.Join(dir, "*.wav"))
	files = append(files, notes...)
	if len(files) == 0 {
		return nil, fmt.Errorf("no samples in %s", dir)
	}
	sort.Strings(files)
	type delivery struct {
		file, webhookID, why string
	}
	var ds []delivery
	for _, f := range files {
		ds = append(ds, delivery{f, "msg_qs_" + strings.TrimSuffix(filepath.Base(f), filepath.Ext(f)), ""})
	}
	ds = append(ds,
		delivery{files[0], ds[0].webhookID, "same webhook-id again"},
		delivery{files[0], "msg_qs_redelivered_" + fmt.Sprint(time.Now().UnixNano()), "new webhook-id, same content"},
	)
	jobs := map[string]bool{}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "sample\twebhook-id\tstatus\tjob\tduplicate\tnote")
	for _, d := range ds {
		body, err := sampleBody(d.file)
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

// sampleBody is the delivery body of a sample: a .json file as it is, a
// .wav voice note as an audio report (docs/design.md §19) whose external ID
// is the file's name without its extension.
func sampleBody(file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil || filepath.Ext(file) != ".wav" {
		return b, err
	}
	return json.Marshal(map[string]any{
		"external_id": strings.TrimSuffix(filepath.Base(file), ".wav"),
		"revision":    1,
		"audio":       map[string]string{"content_type": "audio/wav", "data": base64.StdEncoding.EncodeToString(b)},
	})
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

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
