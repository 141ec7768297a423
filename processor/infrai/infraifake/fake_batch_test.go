package infraifake

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestFakeBatchValidates(t *testing.T) {
	t.Parallel()
	item := func(customID, capability, body string) string {
		return `{"body":` + strings.TrimSpace(body) + `,"capability":"` + capability + `","custom_id":"` + customID + `"}`
	}
	notStrict := strings.Replace(validBody, `"strict":true`, `"strict":false`, 1)
	tests := []struct {
		name, key, idem, body string
		status                int
		code                  string
	}{
		{"not JSON", testKey, "k1", `{"requests":`, 400, codeInvalidRequest},
		{"no requests", testKey, "k2", `{"requests":[]}`, 400, codeInvalidRequest},
		{"other capability", testKey, "k3", `{"requests":[` + item("j1", "ai.rerank", validBody) + `]}`, 400, "CAPABILITY_NOT_FOUND"},
		{"no custom_id", testKey, "k4", `{"requests":[` + item("", "ai.chat", validBody) + `]}`, 400, codeInvalidRequest},
		{"duplicate custom_id", testKey, "k5", `{"requests":[` + item("j1", "ai.chat", validBody) + `,` + item("j1", "ai.chat", validBody) + `]}`, 400, codeInvalidRequest},
		{"not strict", testKey, "k6", `{"requests":[` + item("j1", "ai.chat", notStrict) + `]}`, 400, codeInvalidRequest},
		{"keys differ", testKey, "k7", `{"idempotency_key":"other","requests":[` + item("j1", "ai.chat", validBody) + `]}`, 400, codeInvalidRequest},
		{"bad key", "ifr_pk_wrong", "k8", `{"requests":[` + item("j1", "ai.chat", validBody) + `]}`, 401, codeInvalidAPIKey},
	}
	f := newFake(t, Options{Bare: true}) // batch routes answer in the envelope regardless
	for _, tt := range tests {
		status, _, raw := post(t, f.URL()+"/ai/batch/submit", tt.key, tt.idem, tt.body)
		env := decodeEnvelope(t, raw)
		if status != tt.status || env.OK == nil || *env.OK || env.Error == nil || env.Error.Code != tt.code {
			t.Errorf("submit %s = %d %s, want %d with an envelope error %s", tt.name, status, raw, tt.status, tt.code)
		}
	}
	if f.BatchCounts().Created != 0 || f.BatchCounts().CreateCalls != len(tests) {
		t.Errorf("created, creating calls = %d, %d; want 0, %d", f.BatchCounts().Created, f.BatchCounts().CreateCalls, len(tests))
	}
	// A valid submission, then its results before the end: 409.
	status, _, raw := post(t, f.URL()+"/ai/batch/submit", testKey, "k9", `{"requests":[`+item("j1", "ai.chat", validBody)+`]}`)
	var res wireBatchSubmitResult
	if env := decodeEnvelope(t, raw); status != 200 || json.Unmarshal(env.Data, &res) != nil || res.BatchID == "" || res.State != "queued" || res.TotalCount != 1 {
		t.Fatalf("valid submit = %d %s, want 200 with a queued BatchSubmitResult", status, raw)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, f.URL()+"/ai/batch/results/"+res.BatchID, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if env := decodeEnvelope(t, raw); resp.StatusCode != http.StatusConflict || env.Error == nil || env.Error.Code != "BATCH_NOT_COMPLETED" {
		t.Errorf("results before the end = %d %s, want 409 BATCH_NOT_COMPLETED", resp.StatusCode, raw)
	}
	if f.Calls() != 0 {
		t.Errorf("chat route calls = %d, want 0: batch routes count apart", f.Calls())
	}
}
