package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/fakekit"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// The fake's own batch wire: the answers the adapter never provokes.

// validBody is a minimal valid Chat Completions request.
const validBody = `{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","strict":true,"schema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}}}}`

// batchCallRaw sends one request to the fake's batch routes.
func batchCallRaw(t *testing.T, f *openaifake.Server, method, path, contentType string, body io.Reader) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, f.URL()+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return res.StatusCode, out
}

func TestFakeBatchWire(t *testing.T) {
	t.Parallel()
	f := newFake(t, openaifake.Options{Batch: openaifake.BatchOptions{PollsToEnd: -1}})
	c := newTestClient(t, f, 0)
	h := submit(t, c, "bat_wire", "job_a")

	tests := []struct {
		name, method, path, ctype, body string
		wantStatus                      int
		wantCode                        any
	}{
		{"create without endpoint", "POST", "/batches", "application/json", `{"input_file_id":"` + h.InputFileID + `","completion_window":"24h"}`, 400, "missing_required_parameter"},
		{"create with a 1h window", "POST", "/batches", "application/json", `{"input_file_id":"` + h.InputFileID + `","endpoint":"/v1/chat/completions","completion_window":"1h"}`, 400, "invalid_value"},
		{"create from an unknown file", "POST", "/batches", "application/json", `{"input_file_id":"file-nope","endpoint":"/v1/chat/completions","completion_window":"24h"}`, 404, nil},
		{"create with 17 metadata pairs", "POST", "/batches", "application/json", `{"input_file_id":"` + h.InputFileID + `","endpoint":"/v1/chat/completions","completion_window":"24h","metadata":{"a":"","b":"","c":"","d":"","e":"","f":"","g":"","h":"","i":"","j":"","k":"","l":"","m":"","n":"","o":"","p":"","q":""}}`, 400, "invalid_value"},
		{"upload that is not multipart", "POST", "/files", "application/json", `{}`, 400, nil},
		{"list limit over 100", "GET", "/batches?limit=101", "", "", 400, "invalid_value"},
		{"cancel of an unknown batch", "POST", "/batches/batch_nope/cancel", "", "", 404, nil},
		{"unknown route", "GET", "/batches/x/y", "", "", 404, nil},
		{"list", "GET", "/batches", "", "", 200, nil},
	}
	for _, tt := range tests {
		var body io.Reader
		if tt.body != "" {
			body = strings.NewReader(tt.body)
		}
		status, out := batchCallRaw(t, f, tt.method, tt.path, tt.ctype, body)
		if status != tt.wantStatus {
			t.Errorf("%s: %s %s = %d %v, want %d", tt.name, tt.method, tt.path, status, out, tt.wantStatus)
			continue
		}
		if status >= 400 {
			if got := fakekit.ErrorField(out, "code"); got != tt.wantCode {
				t.Errorf("%s: error.code = %v, want %v", tt.name, got, tt.wantCode)
			}
			if _, ok := fakekit.ErrorField(out, "message").(string); !ok {
				t.Errorf("%s: error.message missing in %v", tt.name, out)
			}
		}
	}

	// A .jsonl name is required for purpose batch.
	var mp bytes.Buffer
	mp.WriteString("--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.txt\"\r\nContent-Type: text/plain\r\n\r\n{}\r\n--b--\r\n")
	if status, out := batchCallRaw(t, f, "POST", "/files", "multipart/form-data; boundary=b", &mp); status != 400 {
		t.Errorf("upload of in.txt for batch = %d %v, want 400", status, out)
	}

	// The list shape.
	status, list := batchCallRaw(t, f, "GET", "/batches?limit=1", "", nil)
	if status != 200 || list["object"] != "list" || list["first_id"] != h.ProviderID || list["last_id"] != h.ProviderID || list["has_more"] != false {
		t.Errorf("GET /batches = %d %v, want a list of the one batch", status, list)
	}

	// A batch that never ends on its own stays in progress, then cancels.
	for range 3 {
		if st, err := c.BatchStatus(t.Context(), h.ProviderID); err != nil || st.State != stet.BatchInProgress {
			t.Fatalf("BatchStatus() with PollsToEnd -1 = %+v, %v; want in_progress", st, err)
		}
	}
	if status, out := batchCallRaw(t, f, "POST", "/batches/"+h.ProviderID+"/cancel", "", nil); status != 200 || out["status"] != "cancelling" {
		t.Errorf("cancel = %d %v, want 200 cancelling", status, out)
	}
	if st, err := c.BatchStatus(t.Context(), h.ProviderID); err != nil || st.State != stet.BatchCancelled {
		t.Errorf("BatchStatus() after cancel = %+v, %v; want cancelled", st, err)
	}
	if status, _ := batchCallRaw(t, f, "POST", "/batches/"+h.ProviderID+"/cancel", "", nil); status != 409 {
		t.Errorf("cancel of a cancelled batch = %d, want 409", status)
	}

	// Wrong key.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, f.URL()+"/batches", nil)
	req.Header.Set("Authorization", "Bearer sk-wrong")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Errorf("GET /batches with a wrong key = %d, want 401", res.StatusCode)
	}
	if f.Calls() != 0 {
		t.Errorf("Calls() = %d, want 0: batch routes keep their own counters", f.Calls())
	}
}

func TestFakeBatchValidationFailure(t *testing.T) {
	t.Parallel()
	f := newFake(t, openaifake.Options{})
	var mp bytes.Buffer
	mp.WriteString("--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\nContent-Type: application/jsonl\r\n\r\n")
	mp.WriteString(`{"custom_id":"job_a","method":"POST","url":"/v1/chat/completions","body":` + validBody + "}\n")
	mp.WriteString(`{"custom_id":"job_a","method":"POST","url":"/v1/chat/completions","body":` + validBody + "}\n")
	mp.WriteString("\r\n--b--\r\n")
	status, file := batchCallRaw(t, f, "POST", "/files", "multipart/form-data; boundary=b", &mp)
	if status != 200 || file["object"] != "file" || file["purpose"] != "batch" {
		t.Fatalf("upload = %d %v, want a batch file", status, file)
	}
	status, b := batchCallRaw(t, f, "POST", "/batches", "application/json", strings.NewReader(`{"input_file_id":"`+file["id"].(string)+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`))
	if status != 200 || b["status"] != "validating" {
		t.Fatalf("create = %d %v, want a validating batch", status, b)
	}
	c := newTestClient(t, f, 0)
	st, err := c.BatchStatus(t.Context(), b["id"].(string))
	if err != nil || st.State != stet.BatchFailed {
		t.Fatalf("BatchStatus() of a batch with a repeated custom_id = %+v, %v; want failed", st, err)
	}
	var raw struct {
		Errors struct {
			Data []struct {
				Code string `json:"code"`
				Line int    `json:"line"`
			} `json:"data"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(st.Raw, &raw); err != nil || len(raw.Errors.Data) != 1 || raw.Errors.Data[0].Code != "duplicate_custom_id" || raw.Errors.Data[0].Line != 2 {
		t.Errorf("errors = %+v, want duplicate_custom_id on line 2", raw.Errors)
	}
	if results, err := c.BatchResults(t.Context(), st); err != nil || len(results) != 0 {
		t.Errorf("BatchResults() of a failed batch = %+v, %v; want none", results, err)
	}
}

func TestFakeBatchConcurrentUse(t *testing.T) {
	t.Parallel()
	f := newFake(t, openaifake.Options{Batch: openaifake.BatchOptions{PollsToEnd: 2}})
	c := newTestClient(t, f, 0)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: fmt.Sprintf("bat_%d", i), Items: batchItems(fmt.Sprintf("job_%d_a", i), fmt.Sprintf("job_%d_b", i))})
			if err != nil {
				t.Errorf("SubmitBatch(%d) = %v", i, err)
				return
			}
			var st *stet.BatchStatus
			for range 2 {
				if st, err = c.BatchStatus(t.Context(), h.ProviderID); err != nil {
					t.Errorf("BatchStatus(%d) = %v", i, err)
					return
				}
			}
			if _, err := c.FindBatch(t.Context(), stet.BatchQuery{BatchID: fmt.Sprintf("bat_%d", i)}); err != nil {
				t.Errorf("FindBatch(%d) = %v", i, err)
			}
			results, err := c.BatchResults(t.Context(), st)
			if err != nil || len(results) != 2 {
				t.Errorf("BatchResults(%d) = %d results, %v; want 2", i, len(results), err)
			}
		})
	}
	wg.Wait()
	if s := f.BatchStats(); s.Created != 8 || s.StatusCalls != 16 || s.ListCalls != 8 || s.ResultFetches != 8 {
		t.Errorf("BatchStats() = %+v, want 8 created, 16 status calls, 8 list calls, 8 fetches", s)
	}
}
