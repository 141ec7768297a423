package processor

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSafeCode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"rate_limit_exceeded", "rate_limit_exceeded"},
		{"model-not-found.v2", "model-not-found.v2"},
		{"", ""},
		{"has space", ""},
		{"quotes the <document>", ""},
		{strings.Repeat("a", 64), strings.Repeat("a", 64)},
		{strings.Repeat("a", 65), ""},
	} {
		if got := SafeCode(tt.in); got != tt.want {
			t.Errorf("SafeCode(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSchemaName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"moderation_v1", "moderation_v1"},
		{"care.protocol v2", "care_protocol_v2"},
		{"", "extraction"},
		{strings.Repeat("a", 70), strings.Repeat("a", 64)},
	} {
		if got := SchemaName(tt.in); got != tt.want {
			t.Errorf("SchemaName(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRepairMessage(t *testing.T) {
	t.Parallel()
	got := RepairMessage([]string{"/label: missing", "/score: not a number"})
	want := "Your previous answer was not valid against the JSON schema: /label: missing; /score: not a number. Answer again with only the corrected JSON."
	if got != want {
		t.Errorf("RepairMessage() = %q, want %q", got, want)
	}
}

func TestErrorObjectCode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{`{"code":"insufficient_quota","type":"billing"}`, "insufficient_quota"},
		{`{"code":null,"type":"invalid_request_error"}`, "invalid_request_error"},
		{`{"code":"has space","type":"server_error"}`, "server_error"},
		{`{"code":429}`, "429"},
		{`{"code":1.5,"type":"x"}`, "x"},
		{`{"code":1e12}`, ""},
		{`{"message":"the document says CANARY"}`, ""},
		{`"rate_limited"`, ""},
		{`not json`, ""},
		{``, ""},
	} {
		if got := ErrorObjectCode(json.RawMessage(tt.in)); got != tt.want {
			t.Errorf("ErrorObjectCode(%s) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
