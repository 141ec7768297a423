package gemini

import (
	"encoding/json"
	"testing"

	"github.com/stetlabs/stet/processor/processortest"
)

// generateWire reads a generateContent request body: systemInstruction,
// user turns' text parts, tools and toolConfig (both spellings).
func generateWire(t *testing.T, body []byte) processortest.Wire {
	t.Helper()
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("decode generateContent request: %v", err)
	}
	var w processortest.Wire
	for _, k := range []string{"systemInstruction", "system_instruction"} {
		if v, ok := req[k]; ok && string(v) != "null" {
			w.System = append(w.System, string(v))
		}
	}
	var contents []struct {
		Role  string `json:"role"`
		Parts []struct {
			Text string `json:"text"`
		} `json:"parts"`
	}
	if err := json.Unmarshal(req["contents"], &contents); err != nil {
		t.Fatalf("decode contents: %v", err)
	}
	for _, c := range contents {
		if c.Role != "user" && c.Role != "" {
			continue
		}
		var text string
		for _, p := range c.Parts {
			text += p.Text
		}
		w.User = append(w.User, text)
	}
	if v, ok := req["tools"]; ok && string(v) != "null" {
		var tools []map[string]json.RawMessage
		if err := json.Unmarshal(v, &tools); err != nil {
			t.Fatalf("decode tools: %v", err)
		}
		for _, tl := range tools {
			for kind := range tl {
				w.Tools = append(w.Tools, kind)
			}
		}
	}
	for _, k := range []string{"toolConfig", "tool_config"} {
		if v, ok := req[k]; ok && string(v) != "null" {
			w.ToolChoice = string(v)
		}
	}
	return w
}
