package openai

import (
	"encoding/json"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/processortest"
)

// FuzzBatchResult: itemResult, the decoder of one line of a batch output
// or error file, never panics on any line; it reports on a line exactly
// when the line is a batch line naming a custom_id, and then as
// processortest.CheckBatchResults wants (the line's own job, one outcome,
// a known failure class, no canary in error text, Raw the line itself).
func FuzzBatchResult(f *testing.F) {
	canary := processortest.FuzzCanary
	apiErr := `{"error":{"message":"about ` + canary + `","type":"invalid_request_error","param":null,"code":"context_length_exceeded"}}`
	for _, line := range []string{
		responseLine(200, completionJSON(`{"category":"ok"}`, "", "stop")),
		responseLine(200, completionJSON(`{"note":"`+canary+`"`, "", "stop")),
		responseLine(200, completionJSON(`{"cat`, "", "length")),
		responseLine(200, completionJSON("", canary+" cannot help", "stop")),
		responseLine(200, completionJSON("", "", "content_filter")),
		responseLine(200, `{"id":"chatcmpl-1","object":"chat.completion","choices":[]}`),
		responseLine(200, `"<html>portal `+canary+`</html>"`),
		responseLine(400, apiErr),
		responseLine(429, `{"error":{"message":"m","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`),
		responseLine(503, `<html>`+canary+`</html>`),
		errorLine("batch_expired"),
		errorLine(canary),
		`{"id":"batch_req_1","custom_id":"job_1","response":null,"error":null}`,
		`{"id":"batch_req_1","response":null,"error":{"code":"batch_expired"}}`,
		`{"custom_id":7}`,
		`not json`,
	} {
		f.Add([]byte(line))
	}
	c, err := New(Config{Common: processor.Common{ID: "openai-fuzz", Model: testModel}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, ok := c.itemResult(line)
		var l batchLine
		attributable := json.Unmarshal(line, &l) == nil && l.CustomID != ""
		if ok != attributable {
			t.Fatalf("itemResult(%q) reported = %v; the line decodes with custom_id %v", line, ok, attributable)
		}
		if !ok {
			return
		}
		if r.JobID != l.CustomID {
			t.Fatalf("itemResult(%q).JobID = %q, want the custom_id %q", line, r.JobID, l.CustomID)
		}
		processortest.CheckBatchResults(t, line, []stet.BatchResult{r}, "custom_id")
		if r.Extraction != nil && string(r.Extraction.Raw) != string(line) {
			t.Fatalf("itemResult(%q).Extraction.Raw = %q, want the line", line, r.Extraction.Raw)
		}
	})
}
