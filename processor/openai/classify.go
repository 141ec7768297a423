package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// classifyError turns an error from the SDK call into a *stet.ProcessorError.
// parent is the caller's context; callCtx is parent plus the call timeout.
func (c *Client) classifyError(parent, callCtx context.Context, err error, capt *capture) *stet.ProcessorError {
	return classify(parent, callCtx, err, capt, c.now())
}

// classify is classifyError for any call on the OpenAI wire, chat or
// transcription: one provider, the same error object and headers. now reads
// Retry-After HTTP-dates.
func classify(parent, callCtx context.Context, err error, capt *capture, now time.Time) *stet.ProcessorError {
	pe := capt.Fail(stet.FailureTransient, "", err)
	var apiErr *sdk.Error
	switch {
	case errors.As(err, &apiErr) && apiErr.StatusCode >= 400:
		// A complete error response: what it says wins over any cancellation
		// that raced with it.
		pe.StatusCode = apiErr.StatusCode
		pe.Code = processor.SafeCode(apiErr.Code)
		if pe.Code == "" {
			pe.Code = processor.SafeCode(apiErr.Type)
		}
		if apiErr.Response != nil && capt.Header == nil {
			capt.Header = apiErr.Response.Header
		}
		pe.Class = statusClass(pe.StatusCode, pe.Code)
		pe.RetryAfter = retryAfter(pe.Class, capt.Header, now)
	case capt.Status >= 400 && capt.Raw != nil:
		// An error body the SDK could not decode: {"error":"…"} from
		// Ollama, an HTML page from a proxy. The status still decides.
		pe.Code = errorCode(capt.Raw)
		pe.Class = statusClass(capt.Status, pe.Code)
		pe.RetryAfter = retryAfter(pe.Class, capt.Header, now)
	default:
		// Shutdown, the caller giving up or the call timeout (the provider
		// may have answered, so the call counts) is kept in the error.
		// Connection refused or reset, an unreadable body, a response the
		// SDK could not decode: all worth another try later.
		if ierr, ok := processor.Interrupted(parent, callCtx, "openai", err); ok {
			pe.Err = ierr
		}
	}
	return pe
}

// statusClass maps an HTTP error status and the provider's error code to a
// failure class. See docs/design.md §2.
func statusClass(status int, code string) stet.FailureClass {
	switch {
	case status == http.StatusTooManyRequests && code == "insufficient_quota":
		return stet.FailureQuota
	case status == http.StatusPaymentRequired:
		// Credit exhausted on OpenAI-compatible gateways.
		return stet.FailureQuota
	case status == http.StatusForbidden && code == "unsupported_country_region_territory":
		// The key is fine; the region is not served.
		return stet.FailureUnsupported
	default:
		return processor.StatusClass(status)
	}
}

// retryAfter reads how long the provider asks us to wait: retry-after-ms,
// then Retry-After. Rate limits also fall back to OpenAI's
// x-ratelimit-reset-* headers; other classes use only the explicit
// headers. Every wait is capped at processor.MaxRetryAfter.
func retryAfter(class stet.FailureClass, h http.Header, now time.Time) time.Duration {
	if d, ok := processor.RetryAfter(h, now); ok {
		return d
	}
	if class != stet.FailureRateLimited || h == nil {
		return 0
	}
	return processor.CapRetryAfter(resetAfter(h))
}

// resetAfter reads x-ratelimit-reset-requests and -tokens ("1s", "12ms",
// "6m0s"). It prefers the limit that is exhausted and, when that is unclear,
// waits for the later of the two.
func resetAfter(h http.Header) time.Duration {
	var exhausted, latest time.Duration
	for _, limit := range []string{"requests", "tokens"} {
		d, err := time.ParseDuration(strings.TrimSpace(h.Get("x-ratelimit-reset-" + limit)))
		if err != nil || d < 0 {
			continue
		}
		latest = max(latest, d)
		if strings.TrimSpace(h.Get("x-ratelimit-remaining-"+limit)) == "0" {
			exhausted = max(exhausted, d)
		}
	}
	if exhausted > 0 {
		return exhausted
	}
	return latest
}

// errorCode extracts error.code, else error.type, from an error body, for
// bodies the SDK could not decode.
func errorCode(raw []byte) string {
	var body struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &body) != nil {
		return ""
	}
	return processor.ErrorObjectCode(body.Error)
}
