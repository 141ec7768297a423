package gemini

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// classifyError turns an error from the SDK call into a *stet.ProcessorError.
// parent is the caller's context; callCtx is parent plus the call timeout.
// The decision reads the captured wire response, not the SDK's error, whose
// text carries the provider's message.
func (c *Client) classifyError(parent, callCtx context.Context, err error, capt *capture) *stet.ProcessorError {
	pe := capt.Fail(stet.FailureTransient, "", err)
	switch {
	case capt.Status >= 400 && capt.Raw != nil:
		// A complete error response: what it says wins over any
		// cancellation that raced with it. The body may also be an HTML
		// page from a proxy; the status still decides.
		e := parseError(capt.Raw)
		pe.Code = e.code()
		pe.Class = errorClass(capt.Status, e)
		pe.RetryAfter = c.retryAfter(capt.Header, e)
	default:
		ierr, interrupted := processor.Interrupted(parent, callCtx, "gemini", err)
		switch {
		case interrupted:
			// Shutdown, the caller giving up or the call timeout (the
			// provider may have answered, so the call counts): keep why.
			pe.Err = ierr
		case !capt.Sent:
			// The SDK refused to build the request; nothing left this host
			// and the same request would be refused again.
			pe.Class = stet.FailureUnsupported
			pe.Code = "request_not_sent"
		}
		// Otherwise connection refused or reset, an unreadable body, a 200
		// the SDK could not decode: all worth another try later.
	}
	return pe
}

// errorClass maps an HTTP error status and the google.rpc status and details
// of its body to a failure class. See docs/design.md §2.
//
// RESOURCE_EXHAUSTED is quota, not rate_limited, when its QuotaFailure (or
// ErrorInfo metadata) names a per-day quota or a quota whose limit is 0:
// a daily quota resets at midnight Pacific and a zero limit (a model the
// tier does not include) never lifts, so snoozing for the retryDelay would
// only spend calls. Per-minute quotas, and 429s without details, are
// rate_limited.
func errorClass(httpStatus int, e apiError) stet.FailureClass {
	switch {
	case e.Status == "RESOURCE_EXHAUSTED" || httpStatus == http.StatusTooManyRequests:
		if e.quotaExhausted() || e.Reason == "BILLING_DISABLED" {
			return stet.FailureQuota
		}
		return stet.FailureRateLimited
	case authReason(e.Reason):
		// A bad or expired key comes back as 400 INVALID_ARGUMENT with
		// reason API_KEY_INVALID: the key, not the request, is wrong.
		return stet.FailureAuth
	case e.Reason == "BILLING_DISABLED":
		return stet.FailureQuota
	case e.Status == "UNAUTHENTICATED" || e.Status == "PERMISSION_DENIED" ||
		httpStatus == http.StatusUnauthorized || httpStatus == http.StatusForbidden:
		return stet.FailureAuth
	case e.Status == "INTERNAL" || e.Status == "UNAVAILABLE" || e.Status == "DEADLINE_EXCEEDED" ||
		e.Status == "ABORTED" || e.Status == "CANCELLED" || e.Status == "UNKNOWN":
		return stet.FailureTransient
	default:
		// INVALID_ARGUMENT, FAILED_PRECONDITION (user location not
		// supported, free tier not offered in the country), NOT_FOUND
		// (model), OUT_OF_RANGE and 413 are unsupported.
		return processor.StatusClass(httpStatus)
	}
}

// authReason reports whether an ErrorInfo reason says the credentials, not
// the request, are at fault.
func authReason(r string) bool {
	switch r {
	case "SERVICE_DISABLED", "CONSUMER_INVALID", "CONSUMER_SUSPENDED",
		"ACCESS_TOKEN_EXPIRED", "ACCESS_TOKEN_SCOPE_INSUFFICIENT", "ACCESS_TOKEN_TYPE_UNSUPPORTED":
		return true
	}
	return strings.HasPrefix(r, "API_KEY_")
}

// apiError is what classification needs from a Google error body
// {"error":{"code","message","status","details"}}. The message is never
// read.
type apiError struct {
	Status     string // google.rpc.Code name: "RESOURCE_EXHAUSTED"
	Reason     string // google.rpc.ErrorInfo reason: "API_KEY_INVALID"
	Metadata   map[string]string
	Violations []quotaViolation // google.rpc.QuotaFailure
	RetryDelay time.Duration    // google.rpc.RetryInfo
	HasRetry   bool
}

type quotaViolation struct {
	QuotaMetric string
	QuotaID     string
	QuotaValue  string
}

// code is the machine-readable code recorded for the failure: the
// ErrorInfo reason when there is one (it says more than the status), else
// the status.
func (e apiError) code() string {
	if s := processor.SafeCode(e.Reason); s != "" {
		return s
	}
	return processor.SafeCode(e.Status)
}

// quotaExhausted reports whether the violated quota is one that waiting
// minutes will not lift: a per-day quota, or a limit of 0.
func (e apiError) quotaExhausted() bool {
	perDay := func(s string) bool { return strings.Contains(strings.ToLower(s), "perday") }
	for _, v := range e.Violations {
		if perDay(v.QuotaID) || perDay(v.QuotaMetric) || v.QuotaValue == "0" {
			return true
		}
	}
	return perDay(e.Metadata["quota_limit"]) || e.Metadata["quota_limit_value"] == "0"
}

// wireErrorBody is the error object on the wire. Details are decoded one by
// one so that one odd detail does not hide the others.
type wireErrorBody struct {
	Error *struct {
		Status  string            `json:"status"`
		Details []json.RawMessage `json:"details"`
	} `json:"error"`
}

type wireDetail struct {
	Type       string            `json:"@type"`
	Reason     string            `json:"reason"`
	Metadata   map[string]string `json:"metadata"`
	RetryDelay string            `json:"retryDelay"`
	Violations []struct {
		QuotaMetric string          `json:"quotaMetric"`
		QuotaID     string          `json:"quotaId"`
		QuotaValue  json.RawMessage `json:"quotaValue"` // an int64, so a JSON string
	} `json:"violations"`
}

// parseError reads a Google error body. Some Google front ends wrap it in
// an array; a body that is neither gives the zero apiError.
func parseError(raw []byte) apiError {
	var body wireErrorBody
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var arr []wireErrorBody
		if json.Unmarshal(trimmed, &arr) != nil || len(arr) == 0 {
			return apiError{}
		}
		body = arr[0]
	} else if json.Unmarshal(trimmed, &body) != nil {
		return apiError{}
	}
	if body.Error == nil {
		return apiError{}
	}
	e := apiError{Status: body.Error.Status}
	for _, raw := range body.Error.Details {
		var d wireDetail
		if json.Unmarshal(raw, &d) != nil {
			continue
		}
		switch d.Type[strings.LastIndexByte(d.Type, '/')+1:] {
		case "google.rpc.ErrorInfo":
			e.Reason, e.Metadata = d.Reason, d.Metadata
		case "google.rpc.QuotaFailure":
			for _, v := range d.Violations {
				e.Violations = append(e.Violations, quotaViolation{
					QuotaMetric: v.QuotaMetric,
					QuotaID:     v.QuotaID,
					QuotaValue:  strings.Trim(string(v.QuotaValue), `"`),
				})
			}
		case "google.rpc.RetryInfo":
			// A protobuf Duration in JSON: "43s", "25.465784708s".
			// Longer than the cap is capped, not ignored (ParseDuration
			// itself refuses what overflows a Duration).
			if delay, err := time.ParseDuration(strings.TrimSpace(d.RetryDelay)); err == nil && delay >= 0 {
				e.RetryDelay, e.HasRetry = processor.CapRetryAfter(delay), true
			}
		}
	}
	return e
}

// retryAfter reads how long the provider asks us to wait: the longest of
// retry-after-ms, Retry-After (seconds or an HTTP-date) and the body's
// google.rpc.RetryInfo retryDelay, capped at processor.MaxRetryAfter. The
// Gemini API itself sends only the last; the headers come from gateways in
// front of it.
func (c *Client) retryAfter(h http.Header, e apiError) time.Duration {
	var wait time.Duration
	if e.HasRetry {
		wait = e.RetryDelay
	}
	if d, ok := processor.ParseRetryAfterMS(h.Get("retry-after-ms")); ok {
		wait = max(wait, d)
	}
	if d, ok := processor.ParseRetryAfter(h.Get("Retry-After"), c.now()); ok {
		wait = max(wait, d)
	}
	return processor.CapRetryAfter(wait)
}
