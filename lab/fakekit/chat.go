package fakekit

import (
	"encoding/json"
	"net/http"
	"strings"
)

// ChatRequest is the part of an OpenAI-style Chat Completions request that
// every chat fake (OpenAI's, and Infrai's OpenAI-compatible route) decodes
// the same way. A fake embeds it in its own Request and adds what only its
// API has.
type ChatRequest struct {
	Model       string
	Messages    []ChatMessage
	Temperature *float64
	// ResponseFormat is response_format.type; the rest is json_schema's.
	ResponseFormat string
	SchemaName     string
	Strict         bool
	Schema         json.RawMessage
	Body           []byte // the exact request body
	Header         http.Header
}

// ChatMessage is one chat message.
type ChatMessage struct {
	Role    string
	Content string
}

// UserText joins the user messages of r, one a line: the text a fake
// records for CallsContaining.
func (r ChatRequest) UserText() string {
	return UserText(r.Messages, func(m ChatMessage) (string, bool) { return m.Content, m.Role == "user" })
}

// UserText joins, one a line, the text of each message that user picks:
// the text a fake records for CallsContaining.
func UserText[M any](msgs []M, user func(M) (text string, ok bool)) string {
	var sb strings.Builder
	for _, m := range msgs {
		if text, ok := user(m); ok {
			sb.WriteString(text)
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

// The chat request fields ChatRequest keeps, as sent on the wire.
type wireChatRequest struct {
	Model    string `json:"model"`
	Messages *[]struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Temperature    *float64 `json:"temperature"`
	ResponseFormat *struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Strict *bool           `json:"strict"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	} `json:"response_format"`
}

// DecodeChat decodes a chat request body. content reads a message's
// content (StringContent or PartsContent, as the API accepts). If extra is
// not nil, body is also decoded into it, for the fields only one API has.
// On an error the request holds only Body. Messages stays nil when the body
// has no messages key.
func DecodeChat(body []byte, content func(json.RawMessage) string, extra any) (ChatRequest, error) {
	var wr wireChatRequest
	if err := json.Unmarshal(body, &wr); err != nil {
		return ChatRequest{Body: body}, err
	}
	if extra != nil {
		if err := json.Unmarshal(body, extra); err != nil {
			return ChatRequest{Body: body}, err
		}
	}
	req := ChatRequest{Body: body, Model: wr.Model, Temperature: wr.Temperature}
	if wr.Messages != nil {
		req.Messages = make([]ChatMessage, 0, len(*wr.Messages))
		for _, m := range *wr.Messages {
			req.Messages = append(req.Messages, ChatMessage{Role: m.Role, Content: content(m.Content)})
		}
	}
	if rf := wr.ResponseFormat; rf != nil {
		req.ResponseFormat = rf.Type
		if js := rf.JSONSchema; js != nil {
			req.SchemaName = js.Name
			req.Strict = js.Strict != nil && *js.Strict
			req.Schema = js.Schema
		}
	}
	return req, nil
}

// StringContent reads message content given as a JSON string; any other
// content reads as "".
func StringContent(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

// PartsContent reads message content given as a JSON string or as an array
// of parts, joining the parts' text.
func PartsContent(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var sb strings.Builder
	for _, p := range parts {
		sb.WriteString(p.Text)
	}
	return sb.String()
}
