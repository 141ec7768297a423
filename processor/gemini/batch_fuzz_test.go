package gemini

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/processortest"
)

// FuzzBatchResults: the decoders of a batch's results, a JSONL results
// file (fileResults) and a batch object carrying inline responses
// (parseOperation, then inlineResults), never panic on any input; each
// reports once on every job a decodable item names by key, and as
// processortest.CheckBatchResults wants (a named job, one outcome, a known
// failure class, a bounded RetryAfter, no canary in error text, Raw a
// verbatim part of the input).
func FuzzBatchResults(f *testing.F) {
	canary := processortest.FuzzCanary
	response := func(text, finish string) string {
		return `{"candidates":[{"content":{"parts":[{"text":` + quote(text) + `}],"role":"model"},"finishReason":"` + finish + `","index":0}],"usageMetadata":{"promptTokenCount":11,"candidatesTokenCount":5,"totalTokenCount":16},"modelVersion":"gemini-2.5-flash","responseId":"resp_1"}`
	}
	items := []string{
		`{"key":"job_ok","response":` + response(`{"category":"ok"}`, "STOP") + `}`,
		`{"key":"job_note","response":` + response(`{"note":"`+canary+`"`, "MAX_TOKENS") + `}`,
		`{"key":"job_safety","response":` + response("", "SAFETY") + `}`,
		`{"key":"job_rate","error":{"code":8,"message":"` + canary + `","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"99999999s"}]}}`,
		`{"key":"job_expired","error":{"code":4,"status":"DEADLINE_EXCEEDED"}}`,
		`{"key":"job_http","error":{"code":429}}`,
		`{"key":"job_empty"}`,
		`{"metadata":{"key":"job_meta"},"response":{"promptFeedback":{"blockReason":"SAFETY"}}}`,
		`{"response":` + response(`{}`, "STOP") + `}`,
		`{"key":"job_bad","response":"<html>` + canary + `</html>"}`,
	}
	f.Add([]byte(strings.Join(items, "\n")))
	for _, it := range items {
		f.Add([]byte(it))
	}
	var inline []string
	for _, it := range items {
		inline = append(inline, strings.Replace(it, `{"key":"`, `{"metadata":{"key":"`, 1))
	}
	f.Add([]byte(`{"name":"batches/b1","done":true,"metadata":{"state":"BATCH_STATE_SUCCEEDED","output":{"inlinedResponses":{"inlinedResponses":[` + strings.Join(inline, ",") + `]}}}}`))
	f.Add([]byte(`{"name":"batches/b1","done":true,"response":{"inlinedResponses":{"inlinedResponses":[{"metadata":{"key":"a"},"response":{}},{"metadata":{"key":"a"}}]}}}`))
	f.Add([]byte("not json\n\n"))
	c, err := NewBatch(Config{Common: processor.Common{ID: "gemini-fuzz", BaseURL: "http://127.0.0.1:1", APIKey: testKey, Model: testModel, Region: "us", Retention: "55d", Timeout: 10 * time.Second}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		keys := map[string]bool{}
		for line := range strings.Lines(string(data)) {
			var it batchItem
			if json.Unmarshal([]byte(strings.TrimSpace(line)), &it) != nil {
				continue
			}
			if key := it.Key; key != "" {
				keys[key] = true
			} else if key := metadataKey(it.Metadata); key != "" {
				keys[key] = true
			}
		}
		results := c.fileResults(data, 200)
		if len(results) != len(keys) {
			t.Fatalf("fileResults(%q) = %d results; its lines name %d jobs", data, len(results), len(keys))
		}
		processortest.CheckBatchResults(t, data, results, "key")

		op, err := parseOperation(data)
		if err != nil {
			return
		}
		out := op.output()
		if out == nil {
			return
		}
		keys = map[string]bool{}
		for _, raw := range out.inlineResponses() {
			var it batchItem
			if json.Unmarshal(raw, &it) == nil && metadataKey(it.Metadata) != "" {
				keys[metadataKey(it.Metadata)] = true
			}
		}
		results = c.inlineResults(out.inlineResponses(), 200)
		if len(results) != len(keys) {
			t.Fatalf("inlineResults(%q) = %d results; its items name %d jobs", data, len(results), len(keys))
		}
		processortest.CheckBatchResults(t, data, results, "key")
	})
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
