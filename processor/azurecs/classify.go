package azurecs

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// classifyTransport classifies a call that produced no complete answer.
// parent is the caller's context; callCtx is parent plus the call timeout.
// res is set when the headers arrived before the failure.
func (c *Client) classifyTransport(parent, callCtx context.Context, err error, res *response) *stet.ProcessorError {
	pe := &stet.ProcessorError{Class: stet.FailureTransient, Err: err}
	if res != nil {
		pe.StatusCode = res.status
		pe.RequestID = res.requestID
	}
	// Shutdown, the caller giving up or the call timeout (the service may
	// have answered, so the call counts) is kept in the error. Connection
	// refused or reset, a body over the limit: worth another try later.
	if ierr, ok := processor.Interrupted(parent, callCtx, "azure content safety", err); ok {
		pe.Err = ierr
	}
	return pe
}

// classifyStatus classifies a complete non-2xx answer.
func (c *Client) classifyStatus(res *response) *stet.ProcessorError {
	e := decodeError(res.body)
	code := e.code
	if code == "" {
		code = processor.SafeCode(res.header.Get("x-ms-error-code"))
	}
	if code == "" {
		code = e.inner
	}
	pe := &stet.ProcessorError{
		Class:      statusClass(res.status, e.quota),
		StatusCode: res.status,
		Code:       code,
		RequestID:  res.requestID,
		Err:        fmt.Errorf("azure content safety answered %d", res.status),
	}
	if res.status >= 300 && res.status < 400 {
		pe.Code = CodeRedirect
	}
	pe.RetryAfter = c.retryAfter(pe.Class, res.header, e.tryAgain)
	return pe
}

// statusClass maps an HTTP status to a failure class. quota says the error
// message speaks of a call-volume quota, which the Cognitive Services
// gateway answers with 403 (a free tier's monthly quota).
func statusClass(status int, quota bool) stet.FailureClass {
	switch {
	case status == http.StatusForbidden && quota:
		return stet.FailureQuota
	case status >= 300 && status < 400:
		// A redirect is never followed: the same request fails the same
		// way, as 400 InvalidRequestBody, 404 (wrong endpoint or
		// api-version), 413 and 415 do.
		return stet.FailureUnsupported
	default:
		return processor.StatusClass(status)
	}
}

// serviceError is what stet keeps of an error body: identifier-like codes
// and two facts read from the message. The message itself is never kept:
// it may quote the request.
type serviceError struct {
	code     string        // error.code
	inner    string        // error.innererror.code
	quota    bool          // the message mentions a quota
	tryAgain time.Duration // "Try again in N seconds" in the message
}

var tryAgainPattern = regexp.MustCompile(`(?i)try again in ([0-9]{1,6}) seconds?`)

// decodeError reads {"error":{"code","message","innererror":{"code"}}}. The
// gateway's own errors put the HTTP status in code ("401", "429").
func decodeError(body []byte) serviceError {
	var wire struct {
		Error *struct {
			Code       json.RawMessage `json:"code"`
			Message    string          `json:"message"`
			InnerError *struct {
				Code json.RawMessage `json:"code"`
			} `json:"innererror"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &wire) != nil || wire.Error == nil {
		return serviceError{}
	}
	e := serviceError{code: codeValue(wire.Error.Code)}
	if wire.Error.InnerError != nil {
		e.inner = codeValue(wire.Error.InnerError.Code)
	}
	msg := wire.Error.Message
	e.quota = strings.Contains(strings.ToLower(msg), "quota")
	if m := tryAgainPattern.FindStringSubmatch(msg); m != nil {
		if s, err := strconv.Atoi(m[1]); err == nil {
			e.tryAgain = time.Duration(s) * time.Second
		}
	}
	return e
}

// codeValue reads a code given as a string or a number.
func codeValue(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return processor.SafeCode(s)
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return processor.SafeCode(n.String())
	}
	return ""
}

// retryAfter reads how long the service asks us to wait: retry-after-ms,
// then Azure's x-ms-retry-after-ms, then Retry-After in seconds or as an
// HTTP-date. For a rate limit without any of them, the "Try again in N
// seconds" of the gateway's message is used. Every wait is capped at
// processor.MaxRetryAfter.
func (c *Client) retryAfter(class stet.FailureClass, h http.Header, tryAgain time.Duration) time.Duration {
	for _, k := range []string{"retry-after-ms", "x-ms-retry-after-ms"} {
		if d, ok := processor.ParseRetryAfterMS(h.Get(k)); ok {
			return d
		}
	}
	if d, ok := processor.ParseRetryAfter(h.Get("Retry-After"), c.now()); ok {
		return d
	}
	if class == stet.FailureRateLimited {
		return processor.CapRetryAfter(tryAgain)
	}
	return 0
}
