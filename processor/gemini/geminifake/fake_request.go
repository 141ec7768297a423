package geminifake

// What the Server reads from a generateContent request and checks as the
// API does.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Known fields of GenerateContentRequest and GenerationConfig. The API
// rejects any other name with 400 "Unknown name".
var (
	requestFields = []string{
		"contents", "tools", "toolConfig", "safetySettings", "systemInstruction",
		"generationConfig", "cachedContent", "serviceTier", "store", "labels", "continuationToken",
	}
	generationConfigFields = []string{
		"stopSequences", "responseMimeType", "responseSchema", "responseJsonSchema",
		"responseModalities", "candidateCount", "maxOutputTokens", "temperature", "topP",
		"topK", "seed", "presencePenalty", "frequencyPenalty", "responseLogprobs", "logprobs",
		"enableEnhancedCivicAnswers", "speechConfig", "thinkingConfig", "imageConfig",
		"mediaResolution", "audioTranscriptionConfig",
	}
)

// The request as sent on the wire.
type wireRequest struct {
	Contents *[]struct {
		Role  string                       `json:"role"`
		Parts []map[string]json.RawMessage `json:"parts"`
	} `json:"contents"`
	GenerationConfig *struct {
		ResponseMIMEType   string          `json:"responseMimeType"`
		ResponseSchema     json.RawMessage `json:"responseSchema"`
		ResponseJSONSchema json.RawMessage `json:"responseJsonSchema"`
		Temperature        *float64        `json:"temperature"`
		MaxOutputTokens    int             `json:"maxOutputTokens"`
	} `json:"generationConfig"`
}

// fakeParts keeps what validation needs from a decoded request.
type fakeParts struct {
	unknown   string // the first unknown field name, "" if none
	contents  bool   // contents given at all
	roles     []string
	partCount []int
	emptyPart [][2]int // contents index, part index of parts without data
	both      bool     // responseSchema and responseJsonSchema
}

func decodeFakeRequest(body []byte) (Request, error) {
	req := Request{Body: body}
	var wr wireRequest
	if err := json.Unmarshal(body, &wr); err != nil {
		return req, err
	}
	if wr.Contents != nil {
		req.Contents = make([]Content, 0, len(*wr.Contents))
		for _, c := range *wr.Contents {
			var sb strings.Builder
			for _, p := range c.Parts {
				var s string
				if json.Unmarshal(p["text"], &s) == nil {
					sb.WriteString(s)
				}
			}
			req.Contents = append(req.Contents, Content{Role: c.Role, Text: sb.String()})
		}
	}
	if gc := wr.GenerationConfig; gc != nil {
		req.ResponseMIMEType = gc.ResponseMIMEType
		req.Temperature = gc.Temperature
		req.MaxOutputTokens = gc.MaxOutputTokens
		switch {
		case len(gc.ResponseJSONSchema) > 0 && string(gc.ResponseJSONSchema) != "null":
			req.Schema, req.SchemaField = gc.ResponseJSONSchema, "responseJsonSchema"
		case len(gc.ResponseSchema) > 0 && string(gc.ResponseSchema) != "null":
			req.Schema, req.SchemaField = gc.ResponseSchema, "responseSchema"
		}
	}
	return req, nil
}

// inspect reads the parts of the body the API checks cheaply.
func inspect(body []byte) fakeParts {
	var fp fakeParts
	var top map[string]json.RawMessage
	_ = json.Unmarshal(body, &top)
	for k := range top {
		if !slices.Contains(requestFields, k) && fp.unknown == "" {
			fp.unknown = k
		}
	}
	var gc map[string]json.RawMessage
	_ = json.Unmarshal(top["generationConfig"], &gc)
	for k := range gc {
		if !slices.Contains(generationConfigFields, k) && fp.unknown == "" {
			fp.unknown = k
		}
	}
	fp.both = gc["responseSchema"] != nil && gc["responseJsonSchema"] != nil
	var contents []struct {
		Role  string                       `json:"role"`
		Parts []map[string]json.RawMessage `json:"parts"`
	}
	if raw, ok := top["contents"]; ok && json.Unmarshal(raw, &contents) == nil {
		fp.contents = true
	}
	for i, c := range contents {
		fp.roles = append(fp.roles, c.Role)
		fp.partCount = append(fp.partCount, len(c.Parts))
		for j, p := range c.Parts {
			if len(p) == 0 || string(p["text"]) == `""` && len(p) == 1 {
				fp.emptyPart = append(fp.emptyPart, [2]int{i, j})
			}
		}
	}
	return fp
}

// validateFakeRequest checks what the real API checks cheaply, with its
// messages.
func validateFakeRequest(req *Request) (string, bool) {
	fp := inspect(req.Body)
	if fp.unknown != "" {
		return fmt.Sprintf("Invalid JSON payload received. Unknown name %q: Cannot find field.", fp.unknown), false
	}
	if !fp.contents || len(fp.roles) == 0 {
		return "* GenerateContentRequest.contents: contents is not specified\n", false
	}
	for i, role := range fp.roles {
		if role != "" && role != "user" && role != "model" {
			return "Please use a valid role: user, model.", false
		}
		if fp.partCount[i] == 0 {
			return fmt.Sprintf("* GenerateContentRequest.contents[%d].parts: contents.parts must not be empty.\n", i), false
		}
	}
	if len(fp.emptyPart) > 0 {
		i, j := fp.emptyPart[0][0], fp.emptyPart[0][1]
		return fmt.Sprintf("* GenerateContentRequest.contents[%d].parts[%d].data: required oneof field 'data' must have one initialized field\n", i, j), false
	}
	if fp.both {
		return "response_schema and response_json_schema cannot both be set.", false
	}
	if req.SchemaField != "" && req.ResponseMIMEType != "application/json" {
		return "* GenerateContentRequest.generation_config.response_mime_type: must be application/json when a response schema is set.\n", false
	}
	return "", true
}
