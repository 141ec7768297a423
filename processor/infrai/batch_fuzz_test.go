package infrai

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/processortest"
)

// FuzzBatchResults: BatchResults, given any answer (a status and a body)
// to its one results call through a transport, no server, never panics;
// it fails with a classified error as Extract would (processortest's
// CheckOutcome: a known class, a bounded RetryAfter, no canary), or
// reports as processortest.CheckBatchResults wants (each job once, one the
// answer names by custom_id, one outcome, Raw the item as received).
func FuzzBatchResults(f *testing.F) {
	canary := processortest.FuzzCanary
	const rid = `"metadata":{"request_id":"0190f7a4-1111-7abc-8def-0123456789ab"}`
	completion := func(content, finish string) string {
		return `"data":{"model":"gpt-4.1-mini-2025","choices":[{"message":{"content":` + content + `},"finish_reason":"` + finish + `"}],"usage":{"prompt_tokens":11,"completion_tokens":5}}`
	}
	items := `[` +
		`{"custom_id":"job_01","status":"succeeded","status_code":200,"ok":true,` + completion(`"{\"category\":\"ok\"}"`, "stop") + `,"error":null,` + rid + `},` +
		`{"custom_id":"job_02","status":"succeeded","ok":true,` + completion(`"{\"note\":\"`+canary+`"`, "length") + `,` + rid + `},` +
		`{"custom_id":"job_03","status":"failed","status_code":429,"ok":false,"error":{"code":"RATE_LIMIT_EXCEEDED","message":"` + canary + `"},` + rid + `},` +
		`{"custom_id":"job_04","status":"expired","ok":false,"error":{"code":"BATCH_TIMEOUT"}},` +
		`{"custom_id":"job_05","status":"cancelled","ok":false},` +
		`{"custom_id":"job_05","status":"succeeded"},` +
		`{"status":"succeeded","ok":true},` +
		`"not an item"]`
	for _, seed := range []struct {
		status int
		body   string
	}{
		{200, `{"ok":true,"data":{"results":` + items + `},` + rid + `}`},
		{200, `{"ok":true,"data":` + items + `}`},
		{200, items},
		{200, `{"results":` + items + `}`},
		{200, `{"ok":false,"error":{"code":"BATCH_NOT_FOUND","message":"` + canary + `"}}`},
		{404, `{"ok":false,"error":{"code":"NOT_FOUND"}}`},
		{502, `<html>` + canary + `</html>`},
		{200, `{"ok":true,"data":null}`},
		{200, `[]`},
	} {
		f.Add(seed.status, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 200 || status > 599 {
			status = 200 + (status&0x7fffffff)%400
		}
		c, err := New(Config{Common: processor.Common{ID: testID, BaseURL: "http://127.0.0.1:1", APIKey: testKey, Model: testModel,
			HTTPClient: &http.Client{Transport: answer{status: status, body: body}}}})
		if err != nil {
			t.Fatal(err)
		}
		results, err := c.BatchResults(t.Context(), &stet.BatchStatus{ProviderID: "batch_01", State: stet.BatchCompleted})
		if err != nil {
			if results != nil {
				t.Fatalf("BatchResults() = %d results beside error %v", len(results), err)
			}
			processortest.CheckOutcome(t, nil, err)
			return
		}
		processortest.CheckBatchResults(t, body, results, "custom_id")
	})
}

// answer is a transport that answers every request with one response.
type answer struct {
	status int
	body   []byte
}

func (a answer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	return &http.Response{StatusCode: a.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(a.body)),
		ContentLength: int64(len(a.body)), Request: req}, nil
}
