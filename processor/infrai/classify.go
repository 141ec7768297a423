package infrai

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// classify maps an HTTP status and Infrai's error code to a failure class.
// The code decides when it is known; the status decides otherwise. See
// docs/design.md §2 and the table in docs/infrai.md.
func (c *Client) classify(status int, code string) stet.FailureClass {
	// Infrai's codes are UPPER_SNAKE; an OpenAI-shaped error from the
	// compatible route may carry lower-case ones ("invalid_api_key").
	up := strings.ToUpper(code)
	switch {
	case up == CodeIdempotencyConflict:
		// stet reused a key for a different body: its ledger and what it
		// sent disagree. Never a blind retry.
		return stet.FailureStore
	case strings.HasPrefix(up, "RATE_LIMIT"), up == CodeVendorQuotaExceeded:
		// VENDOR_QUOTA_EXCEEDED is the upstream vendor's limit, not our
		// account's: it clears by itself, like a rate limit.
		return stet.FailureRateLimited
	case up == CodeVendorDown, up == CodeVendorTimeout, up == CodeMaintenance:
		return stet.FailureTransient
	case up == CodeInsufficientCredit, up == CodeInsufficientCredits, up == CodePaymentRequired,
		up == "INSUFFICIENT_QUOTA", status == http.StatusPaymentRequired:
		return stet.FailureQuota
	case up == CodeInvalidAPIKey, status == http.StatusUnauthorized:
		return stet.FailureAuth
	case unsupportedCode(up):
		return stet.FailureUnsupported
	case status == http.StatusTooEarly:
		return stet.FailureTransient
	default:
		// 403 is auth, 429 rate_limited; 400, 404, 413, 422 and the rest
		// unsupported. A 2xx with ok:false and a code we do not know, or a
		// redirect, is transient: nothing says a later try fails, and
		// retries are bounded.
		return processor.StatusClass(status)
	}
}

// unsupportedCode reports codes that say the capability is absent here:
// region, model or feature. "Not supported" is a design input, not a retry
// condition.
func unsupportedCode(up string) bool {
	switch up {
	case CodeModuleNotAvailableInRegion, "MODEL_NOT_FOUND", "CAPABILITY_NOT_FOUND", "NOT_SUPPORTED":
		return true
	}
	return strings.HasSuffix(up, "_NOT_AVAILABLE_IN_REGION") ||
		strings.HasSuffix(up, "_NOT_SUPPORTED") ||
		strings.HasPrefix(up, "UNSUPPORTED_")
}

// retryAfter reads how long the provider asks us to wait: retry-after-ms,
// then Retry-After (seconds or an HTTP-date), as processor.RetryAfter reads
// them. Rate limits also fall back to the X-RateLimit-Reset /
// RateLimit-Reset headers. Every wait is capped at processor.MaxRetryAfter.
// A store conflict never waits its way into a retry.
func (c *Client) retryAfter(class stet.FailureClass, h http.Header) time.Duration {
	if class == stet.FailureStore {
		return 0
	}
	if d, ok := processor.RetryAfter(h, c.now()); ok {
		return d
	}
	if class != stet.FailureRateLimited {
		return 0
	}
	for _, k := range []string{"X-RateLimit-Reset", "RateLimit-Reset"} {
		if d, ok := c.resetAfter(h.Get(k)); ok {
			return d
		}
	}
	return 0
}

// resetAfter reads a rate-limit reset value, capped at
// processor.MaxRetryAfter. Gateways send either seconds to wait or a Unix
// time in seconds; a value past 10^9 can only be the latter.
func (c *Client) resetAfter(v string) (time.Duration, bool) {
	s, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || s < 0 || math.IsInf(s, 0) || math.IsNaN(s) {
		return 0, false
	}
	if s >= 1e9 {
		now := c.now()
		if s-float64(now.Unix()) >= processor.MaxRetryAfter.Seconds() {
			return processor.MaxRetryAfter, true // and no int64 overflow below
		}
		sec, frac := math.Modf(s)
		return processor.CapRetryAfter(time.Unix(int64(sec), int64(frac*1e9)).Sub(now)), true
	}
	// Below 10^9 seconds (about 31 years) the duration cannot overflow.
	return processor.CapRetryAfter(time.Duration(s * float64(time.Second))), true
}

// errorCode extracts the machine code of an error value: the envelope's
// {"code","message"}, an OpenAI-shaped {"message","type","code"} (code, else
// type), or a bare code string. Free text is dropped.
func errorCode(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return processor.SafeCode(s)
	}
	return processor.ErrorObjectCode(raw)
}
