package geminifake

// The wire shapes of the Server's answers: GenerateContentResponse, Google's
// error object and its details, and the headers its front end sends.

import (
	"cmp"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/stetlabs/stet/lab/fakekit"
)

// The GenerateContentResponse object, fields in the API's order. Zero
// counts are left out, as proto3 JSON does.
type wireResponse struct {
	Candidates     []*wireCandidate    `json:"candidates,omitempty"`
	PromptFeedback *wirePromptFeedback `json:"promptFeedback,omitempty"`
	UsageMetadata  wireUsage           `json:"usageMetadata"`
	ModelVersion   string              `json:"modelVersion"`
	ResponseID     string              `json:"responseId"`
}

type wireCandidate struct {
	Content           *wireContent       `json:"content,omitempty"`
	FinishReason      string             `json:"finishReason"`
	Index             int                `json:"index"`
	SafetyRatings     []wireSafetyRating `json:"safetyRatings,omitempty"`
	ContinuationToken string             `json:"continuationToken,omitempty"`
}

type wireContent struct {
	Parts []wirePart `json:"parts"`
	Role  string     `json:"role"`
}

type wirePart struct {
	Text string `json:"text"`
}

type wireSafetyRating struct {
	Category    string `json:"category"`
	Probability string `json:"probability"`
	Blocked     bool   `json:"blocked,omitempty"`
}

type wirePromptFeedback struct {
	BlockReason   string             `json:"blockReason"`
	SafetyRatings []wireSafetyRating `json:"safetyRatings,omitempty"`
}

type wireUsage struct {
	PromptTokenCount     int                 `json:"promptTokenCount,omitempty"`
	CandidatesTokenCount int                 `json:"candidatesTokenCount,omitempty"`
	TotalTokenCount      int                 `json:"totalTokenCount,omitempty"`
	PromptTokensDetails  []wireModalityCount `json:"promptTokensDetails,omitempty"`
	ThoughtsTokenCount   int                 `json:"thoughtsTokenCount,omitempty"`
}

type wireModalityCount struct {
	Modality   string `json:"modality"`
	TokenCount int    `json:"tokenCount"`
}

func candidate(text, finish string) *wireCandidate {
	return &wireCandidate{
		Content:      &wireContent{Parts: []wirePart{{Text: text}}, Role: "model"},
		FinishReason: finish,
	}
}

func blockedRatings() []wireSafetyRating {
	return []wireSafetyRating{
		{Category: "HARM_CATEGORY_SEXUALLY_EXPLICIT", Probability: "NEGLIGIBLE"},
		{Category: "HARM_CATEGORY_HATE_SPEECH", Probability: "NEGLIGIBLE"},
		{Category: "HARM_CATEGORY_HARASSMENT", Probability: "NEGLIGIBLE"},
		{Category: "HARM_CATEGORY_DANGEROUS_CONTENT", Probability: "HIGH", Blocked: true},
	}
}

func (f *Server) response(req Request, cand *wireCandidate, feedback *wirePromptFeedback) []byte {
	prompt := 0
	for _, c := range req.Contents {
		prompt += tokens(c.Text)
	}
	resp := wireResponse{
		PromptFeedback: feedback,
		ModelVersion:   cmp.Or(f.opts.ModelVersion, req.Model),
		ResponseID:     newResponseID(),
	}
	completion := 0
	if cand != nil {
		resp.Candidates = []*wireCandidate{cand}
		if cand.Content != nil {
			for _, p := range cand.Content.Parts {
				completion += tokens(p.Text)
			}
		}
	}
	thoughts := max(f.opts.ThoughtsTokens, 0)
	resp.UsageMetadata = wireUsage{
		PromptTokenCount:     prompt,
		CandidatesTokenCount: completion,
		TotalTokenCount:      prompt + completion + thoughts,
		PromptTokensDetails:  []wireModalityCount{{Modality: "TEXT", TokenCount: prompt}},
		ThoughtsTokenCount:   thoughts,
	}
	return marshal(resp)
}

// tokens estimates a token count: four characters a token.
func tokens(s string) int { return (len(s) + 3) / 4 }

// newResponseID makes an ID shaped like the API's responseId (base64url).
func newResponseID() string {
	var b [17]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// apiErrorBody is Google's error object. Code is filled from the HTTP status.
type apiErrorBody struct {
	Message string
	Status  string
	Details []any
}

// The error object on the wire, fields in the API's order.
type wireAPIError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
		Details []any  `json:"details,omitempty"`
	} `json:"error"`
}

type detailErrorInfo struct {
	Type     string            `json:"@type"`
	Reason   string            `json:"reason"`
	Domain   string            `json:"domain"`
	Metadata map[string]string `json:"metadata"`
}

type detailLocalizedMessage struct {
	Type    string `json:"@type"`
	Locale  string `json:"locale"`
	Message string `json:"message"`
}

type detailQuotaFailure struct {
	Type       string          `json:"@type"`
	Violations []wireViolation `json:"violations"`
}

type detailHelp struct {
	Type  string `json:"@type"`
	Links []struct {
		Description string `json:"description"`
		URL         string `json:"url"`
	} `json:"links"`
}

type detailRetryInfo struct {
	Type       string `json:"@type"`
	RetryDelay string `json:"retryDelay"`
}

// wireViolation is one google.rpc.QuotaFailure violation.
type wireViolation struct {
	QuotaMetric     string            `json:"quotaMetric"`
	QuotaID         string            `json:"quotaId"`
	QuotaDimensions map[string]string `json:"quotaDimensions,omitempty"`
	QuotaValue      string            `json:"quotaValue,omitempty"`
}

func errorInfo(reason string) detailErrorInfo {
	return detailErrorInfo{
		Type:     "type.googleapis.com/google.rpc.ErrorInfo",
		Reason:   reason,
		Domain:   "googleapis.com",
		Metadata: map[string]string{"service": "generativelanguage.googleapis.com"},
	}
}

func invalidKey() apiErrorBody {
	const msg = "API key not valid. Please pass a valid API key."
	return apiErrorBody{
		Message: msg,
		Status:  "INVALID_ARGUMENT",
		Details: []any{
			errorInfo("API_KEY_INVALID"),
			detailLocalizedMessage{Type: "type.googleapis.com/google.rpc.LocalizedMessage", Locale: "en-US", Message: msg},
		},
	}
}

func invalidArgument(msg string) apiErrorBody {
	return apiErrorBody{Message: msg, Status: "INVALID_ARGUMENT"}
}

// quotaError is the 429 the API sends when a quota is exceeded: a
// QuotaFailure naming it, a Help link and, if given, a RetryInfo.
func quotaError(model string, ft Fault, quotaID, metric, value string) apiErrorBody {
	help := detailHelp{Type: "type.googleapis.com/google.rpc.Help"}
	help.Links = append(help.Links, struct {
		Description string `json:"description"`
		URL         string `json:"url"`
	}{"Learn more about Gemini API quotas", "https://ai.google.dev/gemini-api/docs/rate-limits"})
	v := wireViolation{
		QuotaMetric:     "generativelanguage.googleapis.com/" + metric,
		QuotaID:         cmp.Or(ft.QuotaID, quotaID),
		QuotaDimensions: map[string]string{"location": "global", "model": model},
		QuotaValue:      cmp.Or(ft.QuotaValue, value),
	}
	details := []any{
		detailQuotaFailure{Type: "type.googleapis.com/google.rpc.QuotaFailure", Violations: []wireViolation{v}},
		help,
	}
	if ft.RetryDelay != "" {
		details = append(details, detailRetryInfo{Type: "type.googleapis.com/google.rpc.RetryInfo", RetryDelay: ft.RetryDelay})
	}
	msg := "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.\n" +
		"* Quota exceeded for metric: " + v.QuotaMetric + ", limit: " + v.QuotaValue + ", model: " + model
	if ft.RetryDelay != "" {
		msg += "\nPlease retry in " + ft.RetryDelay + "."
	}
	return apiErrorBody{Message: msg, Status: "RESOURCE_EXHAUSTED", Details: details}
}

// rpcStatus is the google.rpc.Code name Google's front end pairs with an
// HTTP status.
func rpcStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusConflict:
		return "ABORTED"
	case http.StatusRequestEntityTooLarge:
		return "INVALID_ARGUMENT"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case 499:
		return "CANCELLED"
	case http.StatusNotImplemented:
		return "UNIMPLEMENTED"
	case http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return ""
}

// writeAPIError answers status with Google's error object; extra headers
// are merged over the defaults in order.
func writeAPIError(w http.ResponseWriter, status int, extra []http.Header, e apiErrorBody) {
	var body wireAPIError
	body.Error.Code = status
	body.Error.Message = e.Message
	body.Error.Status = e.Status
	body.Error.Details = e.Details
	raw := marshal(body)
	setDefaultHeaders(w.Header())
	fakekit.Reply(w, status, raw, extra...)
}

func notFoundPage(w http.ResponseWriter, path string) {
	page := "<!DOCTYPE html>\n<html lang=en>\n  <meta charset=utf-8>\n  <title>Error 404 (Not Found)!!1</title>\n" +
		"  <p><b>404.</b> <ins>That’s an error.</ins>\n  <p>The requested URL <code>" + htmlEscape(path) +
		"</code> was not found on this server.  <ins>That’s all we know.</ins>\n"
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=UTF-8")
	fakekit.Reply(w, http.StatusNotFound, []byte(page))
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// setDefaultHeaders sets what Google's front end sends on every answer. It
// sends no request ID header: responseId in the body is the only ID.
func setDefaultHeaders(h http.Header) {
	h.Set("Content-Type", "application/json; charset=UTF-8")
	h["Vary"] = []string{"Origin", "X-Origin", "Referer"}
	h.Set("Server", "scaffolding on HTTPServer2")
	h.Set("Server-Timing", "gfet4t7; dur=1")
	h.Set("X-XSS-Protection", "0")
	h.Set("X-Frame-Options", "SAMEORIGIN")
	h.Set("X-Content-Type-Options", "nosniff")
}

// marshal encodes v as Google's REST front end does: indented by two
// spaces, no HTML escaping.
func marshal(v any) []byte { return fakekit.MarshalIndent(v, "  ") }
