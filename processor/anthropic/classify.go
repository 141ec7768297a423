package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// classifyError turns an error from the SDK call into a *stet.ProcessorError.
// parent is the caller's context; callCtx is parent plus the call timeout.
func (c *Client) classifyError(parent, callCtx context.Context, err error, capt *capture) *stet.ProcessorError {
	pe := capt.Fail(stet.FailureTransient, "", err)
	var apiErr *sdk.Error
	switch {
	case errors.As(err, &apiErr) && apiErr.StatusCode >= 400:
		// A complete error response: what it says wins over any cancellation
		// that raced with it.
		body := parseErrorBody([]byte(apiErr.RawJSON()))
		header := capt.Header
		if header == nil && apiErr.Response != nil {
			header = apiErr.Response.Header
		}
		pe.StatusCode = apiErr.StatusCode
		if pe.RequestID == "" {
			pe.RequestID = apiErr.RequestID
		}
		if pe.RequestID == "" {
			pe.RequestID = processor.SafeCode(body.RequestID)
		}
		pe.Code = processor.SafeCode(body.Error.Details.ErrorCode)
		if pe.Code == "" {
			pe.Code = processor.SafeCode(body.Error.Type)
		}
		pe.Class = errorClass(pe.StatusCode, body)
		pe.RetryAfter = c.retryAfter(pe.Class, header)
	default:
		// Shutdown, the caller giving up or the call timeout (the provider
		// may have answered, so the call counts) is kept in the error.
		// Connection refused or reset, an unreadable body, a response the
		// SDK could not decode: all worth another try later.
		if ierr, ok := processor.Interrupted(parent, callCtx, "anthropic", err); ok {
			pe.Err = ierr
		}
	}
	return pe
}

// errorBody is the API's error object:
// {"type":"error","error":{"type","message","details":{"error_code"}},"request_id"}.
type errorBody struct {
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Details struct {
			ErrorCode string `json:"error_code"`
		} `json:"details"`
	} `json:"error"`
	RequestID string `json:"request_id"`
}

// parseErrorBody reads what it can of an error body; a proxy's HTML page
// gives the zero value.
func parseErrorBody(raw []byte) errorBody {
	var b errorBody
	if json.Unmarshal(raw, &b) != nil {
		// error.details may be another shape; keep type and message.
		var loose struct {
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
			RequestID string `json:"request_id"`
		}
		_ = json.Unmarshal(raw, &loose)
		b.Error.Type, b.Error.Message, b.RequestID = loose.Error.Type, loose.Error.Message, loose.RequestID
	}
	return b
}

// quotaCodes are error.details.error_code values that mean money, not
// throughput: waiting out a rate window will not help.
var quotaCodes = map[string]bool{
	"enforced_spend_limit_reached":            true, // 429: the tier's monthly spend limit
	"contract_spend_limit_reached":            true, // 429: the contract's spend limit
	"linked_organization_spend_limit_reached": true, // 402
	"linked_organization_billing_unavailable": true, // 402
}

// errorClass maps an error response to a failure class. See docs/design.md §2 and
// issue 4: 429 rate_limit_error is rate_limited unless it says a spend limit
// or the credit is exhausted; 529 overloaded_error and 500 api_error are
// transient; 400, 404 and 413 are unsupported; 401 and 403 are auth.
func errorClass(status int, body errorBody) stet.FailureClass {
	switch {
	case status == http.StatusPaymentRequired || body.Error.Type == "billing_error" || quotaCodes[body.Error.Details.ErrorCode]:
		return stet.FailureQuota
	case status == http.StatusTooManyRequests && spendMessage(body.Error.Message):
		return stet.FailureQuota
	case status == http.StatusBadRequest && creditMessage(body.Error.Message):
		// The API answers an exhausted credit balance with a 400
		// invalid_request_error; retrying or giving up on the document
		// would both be wrong.
		return stet.FailureQuota
	default:
		// 500 api_error, 504 timeout_error and 529 overloaded_error are
		// transient; 400 invalid_request_error, 404 not_found_error, 413
		// request_too_large and the rest are unsupported.
		return processor.StatusClass(status)
	}
}

// spendMessage reports whether a 429's message speaks of money rather than
// throughput. The message is read here and nowhere else: it never reaches
// an error string.
func spendMessage(msg string) bool {
	msg = strings.ToLower(msg)
	for _, s := range []string{"spend limit", "spending limit", "credit balance", "usage limit", "out of credits", "insufficient credit", "billing"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// creditMessage reports whether a 400's message is the API's own notice of
// exhausted credit or usage limits. Only the message's start is matched: a
// validation message may quote the request further on.
func creditMessage(msg string) bool {
	msg = strings.ToLower(strings.TrimSpace(msg))
	return strings.HasPrefix(msg, "your credit balance is too low") ||
		strings.HasPrefix(msg, "you have reached your specified api usage limits") ||
		strings.HasPrefix(msg, "you have reached your specified workspace api usage limits")
}

// retryAfter reads how long the provider asks us to wait: retry-after-ms,
// then Retry-After (seconds or an HTTP-date), capped at
// processor.MaxRetryAfter. Rate limits also fall back to the
// anthropic-ratelimit-*-reset headers, capped the same way; other classes
// use only the explicit ones.
func (c *Client) retryAfter(class stet.FailureClass, h http.Header) time.Duration {
	if d, ok := processor.RetryAfter(h, c.now()); ok {
		return d
	}
	if class != stet.FailureRateLimited || h == nil {
		return 0
	}
	return c.resetAfter(h)
}

// rateLimits are the limits the API reports, each with -limit, -remaining
// and -reset (an RFC 3339 time) headers.
var rateLimits = []string{"requests", "tokens", "input-tokens", "output-tokens"}

// resetAfter reads anthropic-ratelimit-*-reset. It waits for the limits
// that are exhausted and, when none says so, for the latest reset.
func (c *Client) resetAfter(h http.Header) time.Duration {
	now := c.now()
	var exhausted, latest time.Duration
	for _, limit := range rateLimits {
		v := strings.TrimSpace(h.Get("anthropic-ratelimit-" + limit + "-reset"))
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			continue
		}
		d := processor.CapRetryAfter(t.Sub(now))
		latest = max(latest, d)
		if strings.TrimSpace(h.Get("anthropic-ratelimit-"+limit+"-remaining")) == "0" {
			exhausted = max(exhausted, d)
		}
	}
	if exhausted > 0 {
		return exhausted
	}
	return latest
}
