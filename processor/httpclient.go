package processor

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"
)

// Response body limits of the processor clients. A body read past its limit
// fails with ErrBodyTooLarge; adapters may read less (a status object, an
// error body), never more.
const (
	// MaxResponseBytes bounds every answer a processor client reads unless
	// the call raises it: a synchronous answer, a batch object, a status
	// lookup, an error body. A real answer is a few kilobytes; the adapters'
	// own reads use the same 32 MiB.
	MaxResponseBytes = 32 << 20
	// MaxBatchResultsBytes bounds a batch's results file (a JSONL file or
	// a batch object carrying its results inline), which the calls that
	// fetch one ask for with WithBodyLimit. Providers cap batch inputs at
	// 200-256 MB; answers are smaller than the prompts they answer.
	MaxBatchResultsBytes = 1 << 30
)

// ErrRedirect is the error of a call the provider (or something between)
// answered with a redirect. Processor clients never follow one: on a
// cross-host redirect net/http strips only Authorization and cookies, so
// x-api-key, x-goog-api-key or Azure's api-key would reach the other host,
// and a 307 or 308 would send the document text again.
var ErrRedirect = errors.New("redirect refused: processor clients never follow one")

// ErrBodyTooLarge is the error of reading a response body past its limit.
var ErrBodyTooLarge = errors.New("response body over the size limit")

// Client returns the HTTP client an adapter sends through, the one place
// where processor clients are made safe: it refuses every redirect (the
// call fails with ErrRedirect, wrapped in a *url.Error, and the redirected
// request is never sent) and bounds every response body to maxBody bytes
// (MaxResponseBytes when zero or less), which one call may raise with
// WithBodyLimit. It starts from a copy of c.HTTPClient (its transport,
// timeout and jar; its redirect policy is replaced) or, when that is nil,
// from http.DefaultTransport with no timeout of its own (each call has
// its context's). The caller's client is never modified.
func (c Common) Client(maxBody int64) *http.Client {
	hc := &http.Client{}
	if c.HTTPClient != nil {
		copied := *c.HTTPClient
		hc = &copied
	}
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	if maxBody <= 0 {
		maxBody = MaxResponseBytes
	}
	hc.Transport = cappedTransport{next: next, max: maxBody}
	hc.CheckRedirect = refuseRedirect
	return hc
}

// NewHTTPClient returns a client built as Common.Client builds one, with
// its own timeout, for a caller outside an adapter (stet batch status)
// that hands it to one as Common.HTTPClient: its maxBody is a hard limit
// that no call's WithBodyLimit raises.
func NewHTTPClient(timeout time.Duration, maxBody int64) *http.Client {
	hc := Common{}.Client(maxBody)
	hc.Transport = cappedTransport{next: http.DefaultTransport, max: hc.Transport.(cappedTransport).max, fixed: true}
	hc.Timeout = timeout
	return hc
}

func refuseRedirect(*http.Request, []*http.Request) error { return ErrRedirect }

type bodyLimitKey struct{}

// WithBodyLimit returns ctx with the response body limit of the calls made
// with it set to n bytes: a batch results download asks for
// MaxBatchResultsBytes. A client's own limit applies when ctx has none.
func WithBodyLimit(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, bodyLimitKey{}, n)
}

// cappedTransport bounds the bodies of the responses next returns. The
// response itself (status, headers) is passed on whole, so an adapter still
// classifies an oversized answer by what the provider said.
type cappedTransport struct {
	next  http.RoundTripper
	max   int64
	fixed bool // max is not raised by WithBodyLimit
}

func (t cappedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(r)
	if err != nil || res == nil || res.Body == nil {
		return res, err
	}
	limit := t.max
	if n, ok := r.Context().Value(bodyLimitKey{}).(int64); ok && n > 0 && !t.fixed {
		limit = n
	}
	res.Body = &cappedBody{rc: res.Body, left: limit}
	return res, nil
}

// CloseIdleConnections passes the client's call on to the transport it
// wraps, as http.Client does for its own.
func (t cappedTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// cappedBody reads up to left bytes of rc; a byte beyond them is
// ErrBodyTooLarge.
type cappedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.left <= 0 {
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			return 0, ErrBodyTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }

// Do sends req through hc, a client from Common.Client, for an adapter that
// classifies answers by their status itself: a refused redirect comes back
// as the redirect's own response (its status and headers, an empty body)
// and a nil error, so that it is classified as the provider's answer. The
// redirect is still never followed.
func Do(hc *http.Client, req *http.Request) (*http.Response, error) {
	res, err := hc.Do(req)
	if err != nil && res != nil && errors.Is(err, ErrRedirect) {
		// net/http has closed the body already.
		res.Body = http.NoBody
		return res, nil
	}
	return res, err
}
