package pipeline_test

import (
	"context"
	"database/sql"
	"net/http"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/pipeline"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/openai"
)

// gateWorld is what a case changes before the gate decides: the config of
// the process that decides, and the ledger.
type gateWorld struct {
	dropFromPolicy bool   // the policy in force no longer permits the processor
	region         string // the processor's configured region (default "us", which the recorded policy permits)
	noProcessor    bool   // the processor is not configured
	noProfile      bool   // the job's profile is not configured
	purgeText      bool   // the revision's text was purged
	pause          bool   // a dispatch pause covers the processor
}

// gateOutcome is what a user sees in the ledger after the gate decided.
type gateOutcome struct {
	route string // send, wait, block, manual
	class stet.FailureClass
}

// The boundary gate decides alike for the synchronous path, the batch
// assembler and the batch submission: one table, run through all three,
// checked in the ledger (job state, failure class, provider calls, review
// records).
func TestGateSameOnEveryPath(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		world gateWorld
		want  gateOutcome
		// notAtSubmission: the case does not apply to a batch already
		// assembled (see the case).
		notAtSubmission string
	}{
		{name: "policy permits", want: gateOutcome{route: "send"}},
		{name: "policy no longer permits", world: gateWorld{dropFromPolicy: true},
			want: gateOutcome{route: "block", class: stet.FailureBoundary}},
		{name: "region not permitted", world: gateWorld{region: "eu"},
			want: gateOutcome{route: "block", class: stet.FailureBoundary}},
		{name: "processor missing", world: gateWorld{noProcessor: true},
			want:            gateOutcome{route: "block", class: stet.FailureBoundary},
			notAtSubmission: "a batch whose processor is gone is held as a whole (batch_processor_missing) before any item is looked at"},
		{name: "profile missing", world: gateWorld{noProfile: true},
			want: gateOutcome{route: "block", class: stet.FailureUnsupported}},
		{name: "text purged", world: gateWorld{purgeText: true},
			want: gateOutcome{route: "manual", class: stet.FailureTextPurged}},
		{name: "paused", world: gateWorld{pause: true}, want: gateOutcome{route: "wait"}},
	}
	for _, tc := range cases {
		for _, path := range []string{"sync", "batch assembly", "batch submission"} {
			t.Run(tc.name+"/"+path, func(t *testing.T) {
				t.Parallel()
				if path == "batch submission" && tc.notAtSubmission != "" {
					t.Skip(tc.notAtSubmission)
				}
				got := runGate(t, path, tc.world)
				if got != tc.want {
					t.Errorf("%s: gate outcome = %+v, want %+v", path, got, tc.want)
				}
			})
		}
	}
}

// runGate delivers one report, sets up world and lets path's gate decide;
// it returns what the ledger shows and checks the provider calls.
func runGate(t *testing.T, path string, w gateWorld) gateOutcome {
	ctx := context.Background()
	e := stettest.New(t, stettest.Options{NoWorkers: true, Batch: pipeline.BatchSettings{MaxItems: 100, MaxWait: time.Hour}})
	// The recorded policy permits region "us" only (the fake's region).
	recorded := *e.Policy
	recorded.Regions = []string{"us"}
	e.Restart(&recorded)

	source := stettest.SourceReports
	if path != "sync" {
		source = stettest.SourceBatch
	}
	d := e.Deliver(source, "msg-gate", stettest.Report{ExternalID: "gate-1", Revision: 1, Text: "Some report text."})
	if d.Status != http.StatusAccepted {
		t.Fatalf("delivery = %d %s, want 202", d.Status, d.Body)
	}
	var batchID string
	if path == "batch submission" {
		// Assembled under the config of acceptance; the world changes
		// between assembly and submission.
		if n, err := e.Pipeline.Assemble(ctx, true); err != nil || n != 1 {
			t.Fatalf("Assemble = %d, %v; want 1 batch", n, err)
		}
		if err := e.DB.Writer().QueryRow(`SELECT id FROM batches`).Scan(&batchID); err != nil {
			t.Fatal(err)
		}
	}
	changeWorld(t, e, d.JobID, w)
	p := gatePipeline(t, e, &recorded, w, path == "sync")

	switch path {
	case "sync":
		// The extract stage runs on River; wait for where it ends up.
		e.WaitJob(d.JobID, stet.JobCommitted, stet.JobWaiting, stet.JobBlocked, stet.JobManual)
	case "batch assembly":
		n, err := p.Assemble(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			if err := e.DB.Writer().QueryRow(`SELECT id FROM batches`).Scan(&batchID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if batchID != "" {
		if _, err := p.RunBatch(ctx, batchID); err != nil {
			t.Fatalf("RunBatch: %v", err)
		}
	}
	return observe(t, e, path, d.JobID)
}

// changeWorld changes the ledger as w says; the config changes are
// gatePipeline's.
func changeWorld(t *testing.T, e *stettest.Env, jobID string, w gateWorld) {
	t.Helper()
	ctx := context.Background()
	if w.purgeText {
		if _, err := e.DB.Writer().ExecContext(ctx, `UPDATE revisions SET text = NULL, text_purged_at = $1
			WHERE id = (SELECT revision_id FROM jobs WHERE public_id = stet_ulid($2))`, time.Now().UnixMicro(), jobID); err != nil {
			t.Fatal(err)
		}
	}
	if w.pause {
		if err := e.DB.SetPause(ctx, ledger.Pause{Scope: "processor:openai-fake", Reason: "test", PausedBy: "test", PausedAt: time.Now()}, "demo"); err != nil {
			t.Fatal(err)
		}
	}
}

// gatePipeline starts the process that decides: the config of acceptance
// changed as w says. Only the sync path runs stage workers.
func gatePipeline(t *testing.T, e *stettest.Env, recorded *stet.Policy, w gateWorld, work bool) *pipeline.Pipeline {
	t.Helper()
	region := "us"
	if w.region != "" {
		region = w.region
	}
	oc, err := openai.New(openai.Config{Common: processor.Common{ID: "openai-fake", BaseURL: e.Fake.URL(), APIKey: "sk-test", Model: "gpt-test",
		Region: region, Retention: "30d", Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	procs := map[string]stet.Processor{"openai-fake": oc}
	if w.noProcessor {
		delete(procs, "openai-fake")
	}
	var profiles []*pipeline.Profile
	if !w.noProfile {
		prof, err := pipeline.NewProfile(stettest.QuickstartProfile(t))
		if err != nil {
			t.Fatal(err)
		}
		profiles = append(profiles, prof)
	}
	inForce := *recorded
	if w.dropFromPolicy {
		inForce.Processors = []string{"rules"}
	}
	p, err := pipeline.New(pipeline.Config{
		DB: e.DB, Processors: procs, Profiles: profiles, Policies: []*stet.Policy{&inForce},
		Concurrency: 2, JobTimeout: 10 * time.Second, RescueAfter: 15 * time.Second, MaxAttempts: 3,
		RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, PausedRecheck: 100 * time.Millisecond, Work: work,
		Batch:         map[string]pipeline.BatchSettings{"openai-fake": {MaxItems: 100, MaxWait: time.Hour, PollFirst: 50 * time.Millisecond}},
		AssembleEvery: time.Hour, InvariantsEvery: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Stop(ctx)
	})
	return p
}

// observe reads the gate's outcome from the ledger and checks what each
// outcome promises: text left only on a send, a manual record only for a
// manual job, nothing written for a wait.
func observe(t *testing.T, e *stettest.Env, path, jobID string) gateOutcome {
	t.Helper()
	var state string
	var class sql.NullString
	if err := e.DB.Writer().QueryRow(`SELECT state, failure_class FROM jobs WHERE public_id = stet_ulid($1)`, jobID).Scan(&state, &class); err != nil {
		t.Fatal(err)
	}
	st := e.Fake.BatchStats()
	sent := e.Fake.Calls() + st.Uploads + st.CreateCalls
	var got gateOutcome
	switch stet.JobState(state) {
	case stet.JobCommitted:
		got.route = "send"
	case stet.JobBatched:
		got.route = "wait"
		if st.Created == 1 {
			got.route = "send"
		}
	case stet.JobAccepted, stet.JobWaiting:
		got.route = "wait"
	case stet.JobBlocked:
		got.route, got.class = "block", stet.FailureClass(class.String)
	case stet.JobManual:
		got.route, got.class = "manual", stet.FailureClass(class.String)
	default:
		t.Fatalf("%s: job state = %s, want one the gate leads to", path, state)
	}
	if got.route != "send" && sent != 0 {
		t.Errorf("%s: provider calls (sync, uploads, batch creates) = %d, want 0 for a %s", path, sent, got.route)
	}
	if got.route == "send" && sent == 0 {
		t.Errorf("%s: provider calls = 0, want the text sent", path)
	}
	records := e.Count("review_records", "job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1)) AND kind = 'manual'", jobID)
	if want := map[bool]int{true: 1, false: 0}[got.route == "manual"]; records != want {
		t.Errorf("%s: manual records = %d, want %d", path, records, want)
	}
	if got.route == "block" || got.route == "wait" {
		if n := e.Count("review_records", "job_id = (SELECT id FROM jobs WHERE public_id = stet_ulid($1))", jobID); n != 0 {
			t.Errorf("%s: records of a %s job = %d, want 0", path, got.route, n)
		}
	}
	return got
}
