package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/internal/stetclient"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// TestTraceOfOneDelivery follows one delivery through the in-memory
// recorder: the intake request's span is the root of one trace holding the
// extract job, the processor call and the ledger transactions; and no span
// of any trace names the text or the external ID, even when the model's
// output quotes both and the report is read by its external ID.
func TestTraceOfOneDelivery(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	respond := func(openaifake.Request) string {
		return `{"rationale":"The post says ` + canaryText + ` (` + canaryExt + `).","category":"spam","severity":"low","action":"review","labels":["spam"]}`
	}
	e := stettest.New(t, stettest.Options{TracerProvider: tp, FakeOptions: openaifake.Options{Respond: respond}})

	d := e.Deliver(stettest.SourceReports, "msg_trace_1", stettest.Report{ExternalID: canaryExt, Revision: 1,
		Text: "My doctor told me " + canaryText + ", so I stopped my insulin."})
	if d.Status != http.StatusAccepted {
		t.Fatalf("deliver = %d %s, want 202", d.Status, d.Body)
	}
	e.WaitJob(d.JobID, stet.JobCommitted)
	if e.Fake.CallsContaining(canaryText) == 0 {
		t.Fatal("no processor call carried the text marker: the canary went nowhere")
	}
	readPath := "/v1/sources/" + stettest.SourceReports + "/reports/" + canaryExt
	if status, body := e.Do(http.MethodGet, readPath, stettest.ReaderToken, nil, nil); status != http.StatusOK {
		t.Fatalf("GET by external ID = %d %s, want 200", status, body)
	}

	const (
		intakeSpan = "POST /v1/sources/{source}/reports"
		readSpan   = "GET /v1/sources/{source}/reports/{external_id}"
		extractJob = "river.work/stet_extract"
	)
	// The extract job's span ends after its transaction commits: wait for it.
	e.WaitFor("the extract job's span and the read's span", func() bool {
		return find(rec.Ended(), extractJob) != nil && find(rec.Ended(), readSpan) != nil
	})
	spans := rec.Ended()
	root := find(spans, intakeSpan)
	if root == nil {
		t.Fatalf("no span %q among %v", intakeSpan, names(spans))
	}
	if root.Parent().IsValid() {
		t.Errorf("intake span has parent %v, want a root", root.Parent().SpanID())
	}
	traceID := root.SpanContext().TraceID()
	var trace1 []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.SpanContext().TraceID() == traceID {
			trace1 = append(trace1, s)
		}
	}
	t.Logf("the delivery's trace:\n%s", tree(trace1, root, 0))

	// The extract job continues the request's trace as its child; the
	// processor call and the job's ledger transactions are under it.
	job := find(trace1, extractJob)
	if job == nil {
		t.Fatalf("no %q in the delivery's trace: %v", extractJob, names(trace1))
	}
	if job.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Errorf("%s parent = %v, want the intake span %v", extractJob, job.Parent().SpanID(), root.SpanContext().SpanID())
	}
	for _, want := range []string{"processor.extract", "ledger.tx extract.claim", "ledger.tx extract.save_artifact"} {
		s := find(trace1, want)
		if s == nil {
			t.Errorf("no %q in the delivery's trace: %v", want, names(trace1))
			continue
		}
		if !descends(trace1, s, job) {
			t.Errorf("%q is not under %q", want, extractJob)
		}
	}
	// One save: on PostgreSQL the result and its COMMIT in one round trip
	// (a second span would mean it fell back to a transaction of its own).
	saves := 0
	for _, s := range trace1 {
		if s.Name() == "ledger.tx extract.save_artifact" {
			saves++
		}
	}
	if saves != 1 {
		t.Errorf("ledger.tx extract.save_artifact spans in the delivery's trace = %d, want 1", saves)
	}
	call := find(trace1, "processor.extract")
	if call != nil {
		got := map[string]string{}
		for _, kv := range call.Attributes() {
			got[string(kv.Key)] = kv.Value.String()
		}
		for k, v := range map[string]string{"stet.processor.id": "openai-fake", "stet.processor.kind": "openai",
			"gen_ai.request.model": "gpt-test", "http.response.status_code": "200", "stet.job_id": d.JobID} {
			if got[k] != v {
				t.Errorf("processor span %s = %q, want %q (all: %v)", k, got[k], v, got)
			}
		}
		for _, k := range []string{"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"} {
			if got[k] == "" || got[k] == "0" {
				t.Errorf("processor span %s = %q, want the token count", k, got[k])
			}
		}
	}

	// The group commit is its own trace, linked to the delivery's request.
	group := find(spans, "ledger.tx intake.group_commit")
	if group == nil {
		t.Fatalf("no group commit span among %v", names(spans))
	}
	linked := false
	for _, l := range group.Links() {
		linked = linked || l.SpanContext.SpanID() == root.SpanContext().SpanID()
	}
	if !linked {
		t.Errorf("group commit span links %v, want the intake span", group.Links())
	}

	// The read by external ID is named and pathed by its route pattern.
	read := find(spans, readSpan)
	for _, kv := range read.Attributes() {
		if kv.Key == "url.path" && kv.Value.AsString() != "/v1/sources/{source}/reports/{external_id}" {
			t.Errorf("read span url.path = %q, want the route pattern", kv.Value.AsString())
		}
	}

	// No span, attribute, event, link or status carries a marker.
	for _, s := range spans {
		for _, m := range canaryMarkers {
			if where := spanMentions(s, m); where != "" {
				t.Errorf("span %q carries %q in %s", s.Name(), m, where)
			}
		}
	}
}

func find(spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// descends reports whether s is below ancestor in spans.
func descends(spans []sdktrace.ReadOnlySpan, s, ancestor sdktrace.ReadOnlySpan) bool {
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, x := range spans {
		byID[x.SpanContext().SpanID()] = x
	}
	for p := byID[s.Parent().SpanID()]; p != nil; p = byID[p.Parent().SpanID()] {
		if p.SpanContext().SpanID() == ancestor.SpanContext().SpanID() {
			return true
		}
	}
	return false
}

// tree prints the spans under s, indented.
func tree(spans []sdktrace.ReadOnlySpan, s sdktrace.ReadOnlySpan, depth int) string {
	out := fmt.Sprintf("%s%s\n", strings.Repeat("  ", depth), s.Name())
	for _, c := range spans {
		if c.Parent().SpanID() == s.SpanContext().SpanID() {
			out += tree(spans, c, depth+1)
		}
	}
	return out
}

// spanMentions returns where in s the marker appears, or "".
func spanMentions(s sdktrace.ReadOnlySpan, marker string) string {
	has := func(v string) bool { return strings.Contains(v, marker) }
	if has(s.Name()) {
		return "its name"
	}
	if has(s.Status().Description) {
		return "its status"
	}
	for _, kv := range s.Attributes() {
		if has(string(kv.Key)) || has(kv.Value.String()) {
			return "attribute " + string(kv.Key)
		}
	}
	for _, ev := range s.Events() {
		if has(ev.Name) {
			return "event " + ev.Name
		}
		for _, kv := range ev.Attributes {
			if has(string(kv.Key)) || has(kv.Value.String()) {
				return "event " + ev.Name + " attribute " + string(kv.Key)
			}
		}
	}
	for _, l := range s.Links() {
		for _, kv := range l.Attributes {
			if has(kv.Value.String()) {
				return "a link attribute " + string(kv.Key)
			}
		}
	}
	return ""
}

// TestTraceOfBatchCalls checks that a batch-mode delivery's calls to the
// processor have spans, and that none carries the markers.
func TestTraceOfBatchCalls(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	e := stettest.New(t, stettest.Options{TracerProvider: tp})
	d := e.Deliver(stettest.SourceBatch, "msg_trace_batch", stettest.Report{ExternalID: canaryExt, Revision: 1,
		Text: "My doctor told me " + canaryText + "."})
	if d.Status != http.StatusAccepted {
		t.Fatalf("deliver = %d %s, want 202", d.Status, d.Body)
	}
	e.WaitJob(d.JobID, stet.JobCommitted)
	e.WaitFor("the batch calls' spans", func() bool {
		return find(rec.Ended(), "processor.batch_submit") != nil && find(rec.Ended(), "processor.batch_results") != nil
	})
	spans := rec.Ended()
	submit := find(spans, "processor.batch_submit")
	got := map[string]string{}
	for _, kv := range submit.Attributes() {
		got[string(kv.Key)] = kv.Value.String()
	}
	if got["stet.processor.id"] != "openai-fake" || got["stet.batch_id"] == "" {
		t.Errorf("batch submit span attributes = %v, want the processor and batch IDs", got)
	}
	for _, s := range spans {
		for _, m := range canaryMarkers {
			if where := spanMentions(s, m); where != "" {
				t.Errorf("span %q carries %q in %s", s.Name(), m, where)
			}
		}
	}
}

// With tracing off a caller's traceparent still reaches the delivery's
// extract job (a worker that traces continues it); without one, the job
// carries none.
func TestTraceparentCarriedWithTracingOff(t *testing.T) {
	t.Parallel()
	e := stettest.New(t, stettest.Options{NoWorkers: true})
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	deliver := func(id, ext, traceparent string) string {
		t.Helper()
		raw := []byte(fmt.Sprintf(`{"external_id":%q,"revision":1,"text":"A post."}`, ext))
		h, err := stetclient.Headers(stettest.Secret, id, e.Clock.Now(), raw)
		if err != nil {
			t.Fatal(err)
		}
		if traceparent != "" {
			h.Set("traceparent", traceparent)
		}
		r := e.Post("/v1/sources/"+stettest.SourceReports+"/reports", h, raw)
		if r.Status != http.StatusAccepted {
			t.Fatalf("deliver = %d %s, want 202", r.Status, r.Body)
		}
		var meta string
		if err := e.DB.Writer().QueryRow(`SELECT CAST(metadata AS TEXT) FROM river_job WHERE kind = 'stet_extract' AND CAST(args AS TEXT) LIKE '%' || $1 || '%'`,
			r.JobID).Scan(&meta); err != nil {
			t.Fatal(err)
		}
		return meta
	}
	if meta := deliver("msg_tp_1", "report-tp-1", parent); !strings.Contains(meta, "traceparent") || !strings.Contains(meta, "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7") {
		t.Errorf("extract job metadata = %s, want the caller's traceparent", meta)
	}
	if meta := deliver("msg_tp_2", "report-tp-2", ""); strings.Contains(meta, "traceparent") {
		t.Errorf("extract job metadata = %s, want no traceparent", meta)
	}
}
