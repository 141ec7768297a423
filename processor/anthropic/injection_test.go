package anthropic

import (
	"encoding/json"
	"testing"

	"github.com/stetlabs/stet/processor/processortest"
)

// messagesWire reads a Messages request body: the system parameter, user
// turns' text blocks, tools and tool_choice (MCP servers count as tools).
func messagesWire(t *testing.T, body []byte) processortest.Wire {
	t.Helper()
	var req struct {
		System   json.RawMessage `json:"system"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
		ToolChoice struct {
			Type string `json:"type"`
			Name string `json:"name"`
		} `json:"tool_choice"`
		MCPServers []struct {
			Name string `json:"name"`
		} `json:"mcp_servers"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("decode messages request: %v", err)
	}
	var w processortest.Wire
	if len(req.System) > 0 && string(req.System) != "null" {
		w.System = append(w.System, string(req.System))
	}
	for _, m := range req.Messages {
		if m.Role != "user" {
			continue
		}
		var text string
		if json.Unmarshal(m.Content, &text) != nil {
			var blocks []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if err := json.Unmarshal(m.Content, &blocks); err != nil {
				t.Fatalf("decode user content: %v", err)
			}
			for _, b := range blocks {
				text += b.Text
			}
		}
		w.User = append(w.User, text)
	}
	for _, tl := range req.Tools {
		w.Tools = append(w.Tools, tl.Name)
	}
	for _, s := range req.MCPServers {
		w.Tools = append(w.Tools, "mcp:"+s.Name)
	}
	w.ToolChoice = req.ToolChoice.Name
	if req.ToolChoice.Type != "" && req.ToolChoice.Type != "tool" {
		w.ToolChoice = req.ToolChoice.Type
	}
	return w
}
