package anthropicfake

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// rawBatchCall sends one request to the fake's batch routes with the test
// key and decodes the JSON answer.
func rawBatchCall(t *testing.T, f *Server, method, path, body string) (int, http.Header, map[string]any) {
	t.Helper()
	return call(t, method, f.URL()+path, keyHeader(), body)
}

func TestFakeBatchRoutes(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{Batch: BatchOptions{PollsToEnd: -1}})
	item := func(id string) string { return `{"custom_id":"` + id + `","params":` + validBody + `}` }
	invalidParams := `{"custom_id":"bad","params":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`

	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantType   string
	}{
		{"create without requests", "POST", "/v1/messages/batches", `{}`, 400, "invalid_request_error"},
		{"create with no requests", "POST", "/v1/messages/batches", `{"requests":[]}`, 400, "invalid_request_error"},
		{"create with a bad custom_id", "POST", "/v1/messages/batches", `{"requests":[` + item("a b") + `]}`, 400, "invalid_request_error"},
		{"create with a duplicate custom_id", "POST", "/v1/messages/batches", `{"requests":[` + item("a") + `,` + item("a") + `]}`, 400, "invalid_request_error"},
		{"create not JSON", "POST", "/v1/messages/batches", `{"requests":`, 400, "invalid_request_error"},
		{"unknown batch", "GET", "/v1/messages/batches/msgbatch_01Nope", "", 404, "not_found_error"},
		{"unknown action", "GET", "/v1/messages/batches/msgbatch_01Nope/other", "", 404, "not_found_error"},
		{"list limit too large", "GET", "/v1/messages/batches?limit=1001", "", 400, "invalid_request_error"},
	}
	for _, tt := range tests {
		status, header, body := rawBatchCall(t, f, tt.method, tt.path, tt.body)
		e, _ := body["error"].(map[string]any)
		if status != tt.wantStatus || body["type"] != "error" || e["type"] != tt.wantType || body["request_id"] != header.Get("request-id") {
			t.Errorf("%s: %d %v, want %d with a %s error object and request_id", tt.name, status, body, tt.wantStatus, tt.wantType)
		}
	}
	if got := f.BatchCounts(); got.Created != 0 || got.CreateCalls != 5 {
		t.Errorf("counts after refused creates = %+v, want 5 creating calls and nothing created", got)
	}

	// A valid create with one invalid request: params are validated
	// when the batch ends, as the API does.
	status, _, created := rawBatchCall(t, f, "POST", "/v1/messages/batches", `{"requests":[`+item("good")+`,`+invalidParams+`]}`)
	if status != 200 || created["type"] != "message_batch" || created["processing_status"] != "in_progress" || created["results_url"] != nil {
		t.Fatalf("create = %d %v, want an in_progress message_batch without results_url", status, created)
	}
	for _, k := range []string{"ended_at", "archived_at", "cancel_initiated_at"} {
		if v, ok := created[k]; !ok || v != nil {
			t.Errorf("create: %s = %v (present %v), want null", k, v, ok)
		}
	}
	id := created["id"].(string)
	if !strings.HasPrefix(id, "msgbatch_") {
		t.Errorf("batch id = %q, want msgbatch_…", id)
	}
	if counts := created["request_counts"].(map[string]any); counts["processing"] != 2.0 {
		t.Errorf("request_counts = %v, want 2 processing", counts)
	}
	if status, _, body := rawBatchCall(t, f, "GET", "/v1/messages/batches/"+id+"/results", ""); status != 400 {
		t.Errorf("results before the end = %d %v, want 400", status, body)
	}
	if status, _, body := rawBatchCall(t, f, "DELETE", "/v1/messages/batches/"+id, ""); status != 400 {
		t.Errorf("delete before the end = %d %v, want 400", status, body)
	}
	for range 3 {
		if _, _, b := rawBatchCall(t, f, "GET", "/v1/messages/batches/"+id, ""); b["processing_status"] != "in_progress" {
			t.Errorf("poll with PollsToEnd -1 = %v, want in_progress", b["processing_status"])
		}
	}
	if !f.EndBatch(id) || f.EndBatch(id) {
		t.Errorf("EndBatch() = false the first time or true the second, want true then false")
	}
	_, _, ended := rawBatchCall(t, f, "GET", "/v1/messages/batches/"+id, "")
	counts := ended["request_counts"].(map[string]any)
	if ended["processing_status"] != "ended" || ended["ended_at"] == nil || counts["succeeded"] != 1.0 || counts["errored"] != 1.0 || counts["processing"] != 0.0 {
		t.Errorf("ended batch = %v, want ended with 1 succeeded and 1 errored", ended)
	}
	resultsURL, _ := ended["results_url"].(string)
	if resultsURL != f.URL()+"/v1/messages/batches/"+id+"/results" {
		t.Errorf("results_url = %q, want the fake's own results route", resultsURL)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, resultsURL, nil)
	req.Header.Set("x-api-key", testKey)
	req.Header.Set("anthropic-version", "2023-06-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	file, _ := io.ReadAll(res.Body)
	res.Body.Close()
	lines := strings.Split(strings.TrimSpace(string(file)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"custom_id":"good","result":{"type":"succeeded","message":{"id":"msg_`) ||
		!strings.Contains(lines[1], `"custom_id":"bad","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}`) {
		t.Errorf("results file =\n%s\nwant a succeeded line and an errored invalid_request_error line", file)
	}
	if status, _, body := rawBatchCall(t, f, "POST", "/v1/messages/batches/"+id+"/cancel", ""); status != 400 {
		t.Errorf("cancel after the end = %d %v, want 400", status, body)
	}
	if status, _, body := rawBatchCall(t, f, "DELETE", "/v1/messages/batches/"+id, ""); status != 200 || body["type"] != "message_batch_deleted" || body["id"] != id {
		t.Errorf("delete = %d %v, want message_batch_deleted", status, body)
	}
	if status, _, _ := rawBatchCall(t, f, "GET", "/v1/messages/batches/"+id, ""); status != 404 {
		t.Errorf("retrieve after delete = %d, want 404", status)
	}
	if len(f.Batches()) != 0 {
		t.Errorf("Batches() after delete = %v, want none", f.Batches())
	}

	// Without a key.
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodGet, f.URL()+"/v1/messages/batches", nil)
	req.Header.Set("anthropic-version", "2023-06-01")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Errorf("list without a key = %d, want 401", res.StatusCode)
	}
	if n := f.Calls(); n != 0 {
		t.Errorf("Calls() = %d, want 0: batch routes have their own counters", n)
	}
}
