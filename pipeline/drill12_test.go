package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/lab/drill/recovery"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger/ledgertest"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/anthropic"
	"github.com/stetlabs/stet/processor/anthropic/anthropicfake"
	"github.com/stetlabs/stet/processor/gemini"
	"github.com/stetlabs/stet/processor/gemini/geminifake"
	"github.com/stetlabs/stet/processor/infrai"
	"github.com/stetlabs/stet/processor/infrai/infraifake"
)

// drill12Case is one batch provider of drill 12: the real adapter, under
// the policy's processor ID, against its own fake.
type drill12Case struct {
	name string
	// open replaces the Env's OpenAI adapter (nil keeps it) and returns
	// what the provider's fake saw: the deletes it received and whether it
	// still holds a copy with the canary.
	open func(t *testing.T) (stet.Processor, func(canary string) (deletes int, holds bool))
	// batchDeletable: the provider's API deletes the batch; otherwise the
	// batch task ends unresolved with stet.CodeNoDeleteAPI.
	batchDeletable bool
	// files: the provider keeps the batch's input and output as files.
	files bool
}

var drill12Cases = []drill12Case{
	{name: "openai", files: true},
	{name: "anthropic", batchDeletable: true, open: func(t *testing.T) (stet.Processor, func(string) (int, bool)) {
		f := anthropicfake.New(anthropicfake.Options{APIKey: "sk-ant-test"})
		t.Cleanup(f.Close)
		c, err := anthropic.New(anthropic.Config{Common: processor.Common{ID: "openai-fake", BaseURL: f.URL(), APIKey: "sk-ant-test", Model: "claude-test", Retention: "30d"}})
		if err != nil {
			t.Fatal(err)
		}
		return c, func(string) (int, bool) { return f.BatchCounts().Deletes, len(f.Batches()) != 0 }
	}},
	{name: "gemini", batchDeletable: true, open: func(t *testing.T) (stet.Processor, func(string) (int, bool)) {
		f := geminifake.New(geminifake.Options{APIKey: "gm-test"})
		t.Cleanup(f.Close)
		c, err := gemini.NewBatch(gemini.Config{Common: processor.Common{ID: "openai-fake", BaseURL: f.URL(), APIKey: "gm-test", Model: "gemini-test", Retention: "55d"}})
		if err != nil {
			t.Fatal(err)
		}
		return c, func(string) (int, bool) {
			n := f.BatchCounts()
			return n.Deletes + n.FileDeletes, len(f.Batches()) != 0
		}
	}},
	{name: "infrai", open: func(t *testing.T) (stet.Processor, func(string) (int, bool)) {
		f := infraifake.New(infraifake.Options{APIKey: "ik-test"})
		t.Cleanup(f.Close)
		c, err := infrai.New(infrai.Config{Common: processor.Common{ID: "openai-fake", BaseURL: f.URL(), APIKey: "ik-test", Model: "infrai-test", Retention: "30d", Subprocessors: []string{"openai"}}})
		if err != nil {
			t.Fatal(err)
		}
		// Infrai has no delete: the batch stays, as the task says.
		return c, func(string) (int, bool) { return 0, len(f.Batches()) != 0 }
	}},
}

// Drill 12: a report whose text went to a provider batch is deleted. The
// real adapter deletes, against its fake, every provider copy its API can
// delete — OpenAI's input and output files, Anthropic's message batch,
// Gemini's batch — and the fake no longer holds it; every other task is
// done, except a copy the provider's API cannot delete (OpenAI's batch
// record, Infrai's batch), which is unresolved with that reason and the
// batch's expiry. Then the canary from the text is in no text or blob
// column of any table and, on SQLite, not in the bytes of the database
// file or its WAL.
func TestDrill12DeleteBatchReport(t *testing.T) {
	t.Parallel()
	for _, tc := range drill12Cases {
		// Not parallel: four whole stets at once on a loaded machine
		// starve each other past the Env's waits.
		t.Run(tc.name, func(t *testing.T) {
			var fake func(string) (int, bool)
			opts := stettest.Options{}
			if tc.open != nil {
				p, seen := tc.open(t)
				fake = seen
				opts.WrapProcessor = func(id string, orig stet.Processor, _ string) stet.Processor {
					if id == "openai-fake" {
						return p
					}
					return orig
				}
			}
			e := stettest.New(t, opts)
			if fake == nil {
				fake = func(canary string) (int, bool) {
					holds := false
					for _, f := range e.Fake.Files() {
						holds = holds || (!f.Deleted && bytes.Contains(f.Content, []byte(canary)))
					}
					return e.Fake.BatchStats().FileDeletes, holds
				}
			}
			canary := "CANARY-D12-" + strings.ToUpper(tc.name)
			r := e.Deliver(stettest.SourceBatch, "msg_d12", stettest.Report{ExternalID: "report-012", Revision: 1, Text: "Stop taking insulin. " + canary})
			if r.Status != http.StatusAccepted {
				t.Fatalf("deliver = %d %s", r.Status, r.Body)
			}
			// A batch's round trip (assemble, submit, poll, apply, commit)
			// takes many worker turns: on a loaded machine, longer than
			// the Env's 20 s waits.
			waitLong(t, "the job to commit and its batch to be applied", func() bool {
				return e.JobState(r.JobID) == stet.JobCommitted && e.Count("batches", "applied_at IS NOT NULL") == 1
			})
			if _, holds := fake(canary); !holds {
				t.Fatal("the fake holds no copy of the text before the deletion: the drill proves nothing")
			}
			// The scan finds the text where it is, before the deletion.
			if places := canaryPlaces(t, e, canary); len(places) == 0 {
				t.Fatal("the scan finds the canary nowhere before the deletion: it proves nothing")
			} else {
				t.Logf("before the deletion the canary is in %s", strings.Join(places, ", "))
			}
			var acc api.DeletionAccepted
			if st, b := e.Do(http.MethodDelete, "/v1/sources/"+stettest.SourceBatch+"/reports/report-012", stettest.OperatorToken, nil, &acc); st != http.StatusAccepted {
				t.Fatalf("DELETE = %d %s", st, b)
			}
			d := waitDeletionLong(t, e, acc.DeletionID)
			_, body := recovery.GetDeletion(t, e, acc.DeletionID)
			t.Logf("GET /v1/deletions/%s = %s", acc.DeletionID, body)

			var files, batches int
			for _, tk := range d.Tasks {
				isBatch := strings.HasPrefix(tk.Copy, "provider_batch:openai-fake/")
				switch {
				case strings.HasPrefix(tk.Copy, "provider_file:openai-fake/"):
					files++
				case isBatch:
					batches++
				}
				if isBatch && !tc.batchDeletable {
					if tk.State != "unresolved" || tk.Reason == nil || !strings.Contains(*tk.Reason, stet.CodeNoDeleteAPI) || !strings.Contains(*tk.Reason, tc.name) {
						t.Errorf("task %s = %s %v, want unresolved: the %s API has no delete (%s)", tk.Copy, tk.State, tk.Reason, tc.name, stet.CodeNoDeleteAPI)
					}
					if tc.name == "openai" && tk.ExpiresAt == nil {
						t.Errorf("task %s has no expires_at, want the batch's results expiry", tk.Copy)
					}
					continue
				}
				if tk.State != "done" {
					t.Errorf("task %s = %s %v, want done", tk.Copy, tk.State, tk.Reason)
				}
			}
			wantFiles := 0
			if tc.files {
				wantFiles = 2 // input and output
			}
			if files != wantFiles || batches != 1 {
				t.Errorf("provider tasks: %d files, %d batches; want %d and 1", files, batches, wantFiles)
			}
			want := "done"
			if !tc.batchDeletable {
				want = "unresolved"
			}
			if d.State != want {
				t.Errorf("deletion = %s, want %s", d.State, want)
			}
			deletes, holds := fake(canary)
			wantDeletes := files
			if tc.batchDeletable {
				wantDeletes += batches
			}
			if deletes != wantDeletes {
				t.Errorf("deletes received by the %s fake = %d, want %d", tc.name, deletes, wantDeletes)
			}
			// Only a provider without a delete API keeps the text.
			if stays := !tc.batchDeletable && !tc.files; holds != stays {
				t.Errorf("the %s fake holds the text after the deletion = %v, want %v", tc.name, holds, stays)
			}
			if places := canaryPlaces(t, e, canary); len(places) != 0 {
				t.Errorf("after the deletion the canary is in %s", strings.Join(places, ", "))
			}
		})
	}
}

// canaryPlaces scans every text, JSON and blob column of every table of
// the ledger (River's included) for canary and, on SQLite, the bytes of the
// database file and its WAL, and names each place that holds it.
func canaryPlaces(t *testing.T, e *stettest.Env, canary string) []string {
	t.Helper()
	ctx := context.Background()
	found, cols, err := ledgertest.Holding(ctx, e.DB, canary)
	if err != nil {
		t.Fatal(err)
	}
	if cols < 20 {
		t.Fatalf("found %d text columns, want the whole schema", cols)
	}
	var places []string
	for _, col := range slices.Sorted(maps.Keys(found)) {
		places = append(places, fmt.Sprintf("%s (%d rows)", col, found[col]))
	}
	t.Logf("scanned %d text and blob columns", cols)
	path, ok := strings.CutPrefix(e.URL, "sqlite://")
	if !ok {
		return places // a server's files are not this process's to read
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	main, err := os.ReadFile(path)
	if err != nil || len(main) == 0 {
		t.Fatalf("read the database file: %d bytes, %v", len(main), err)
	}
	for _, f := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(canary)) {
			places = append(places, "the bytes of "+filepath.Base(f))
		}
	}
	return places
}

// waitLong polls cond for up to two minutes.
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out after 2m waiting for %s", what)
}

// waitDeletionLong waits, as waitLong does, for a deletion to end.
func waitDeletionLong(t *testing.T, e *stettest.Env, id string) api.DeletionView {
	t.Helper()
	var d api.DeletionView
	waitLong(t, "deletion "+id+" to end", func() bool {
		d, _ = recovery.GetDeletion(t, e, id)
		return d.State == "unresolved" || d.State == "done"
	})
	return d
}
