package processor

import (
	"net/http"

	"github.com/stetlabs/stet"
)

// StatusClass is the failure class an HTTP error status means when nothing
// else in the answer says more (see docs/design.md §2): 429 is rate_limited; 401
// and 403 are auth; 408, 409 and 5xx (the provider's or a proxy's) are
// transient; other 4xx are unsupported, as the same request fails the same
// way; anything else is transient. Adapters decide their provider's own
// codes first and fall back to it.
func StatusClass(status int) stet.FailureClass {
	switch {
	case status == http.StatusTooManyRequests:
		return stet.FailureRateLimited
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return stet.FailureAuth
	case status == http.StatusRequestTimeout || status == http.StatusConflict || status >= 500:
		return stet.FailureTransient
	case status >= 400:
		return stet.FailureUnsupported
	default:
		return stet.FailureTransient
	}
}
