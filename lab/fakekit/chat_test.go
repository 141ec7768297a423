package fakekit

import (
	"reflect"
	"testing"
)

func TestDecodeChat(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"m","temperature":0.5,"max_tokens":7,"messages":[` +
		`{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"user","content":"c"}],` +
		`"response_format":{"type":"json_schema","json_schema":{"name":"n","strict":true,"schema":{"type":"object"}}}}`)
	var extra struct {
		MaxTokens int `json:"max_tokens"`
	}
	req, err := DecodeChat(body, PartsContent, &extra)
	if err != nil {
		t.Fatalf("DecodeChat: %v", err)
	}
	want := []ChatMessage{{"system", "be brief"}, {"user", "ab"}, {"user", "c"}}
	if !reflect.DeepEqual(req.Messages, want) {
		t.Errorf("Messages = %v, want %v", req.Messages, want)
	}
	if req.Model != "m" || req.Temperature == nil || *req.Temperature != 0.5 || extra.MaxTokens != 7 {
		t.Errorf("model %q, temperature %v, extra max_tokens %d; want m, 0.5, 7", req.Model, req.Temperature, extra.MaxTokens)
	}
	if req.ResponseFormat != "json_schema" || req.SchemaName != "n" || !req.Strict || string(req.Schema) != `{"type":"object"}` {
		t.Errorf("response format = %q %q %v %s", req.ResponseFormat, req.SchemaName, req.Strict, req.Schema)
	}
	if got := req.UserText(); got != "ab\nc\n" {
		t.Errorf("UserText() = %q, want the user messages one a line", got)
	}

	// String-only content: an array of parts reads as "".
	req, _ = DecodeChat(body, StringContent, nil)
	if req.Messages[1].Content != "" || req.Messages[2].Content != "c" {
		t.Errorf("StringContent messages = %v, want parts read as \"\"", req.Messages)
	}

	// No messages key: Messages stays nil (validators tell it from []).
	if req, _ := DecodeChat([]byte(`{"model":"m"}`), StringContent, nil); req.Messages != nil {
		t.Errorf("Messages = %v, want nil", req.Messages)
	}

	// An error in the common fields or in extra leaves only Body.
	for _, bad := range []string{`{"model":1}`, `{"model":"m","max_tokens":"x"}`, `not json`} {
		req, err := DecodeChat([]byte(bad), StringContent, &extra)
		if err == nil || req.Model != "" || string(req.Body) != bad {
			t.Errorf("DecodeChat(%s) = %+v, %v; want an error and only Body", bad, req, err)
		}
	}
}
