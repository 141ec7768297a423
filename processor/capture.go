package processor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/stetlabs/stet"
)

// Capture records what the wire said for one call: whether a request left,
// the status, headers, the provider's request ID and the raw body. An
// adapter whose SDK parses the answer hands it the body back from memory,
// so what the SDK parses is byte for byte what stet stores as the raw
// artifact. A call of several requests (an upload) keeps the last.
type Capture struct {
	Sent      bool
	Status    int
	RequestID string
	Header    http.Header
	Raw       []byte
}

// Fail returns a ProcessorError carrying what the wire said: the status
// and request ID recorded, with class, code and err.
func (c *Capture) Fail(class stet.FailureClass, code string, err error) *stet.ProcessorError {
	return &stet.ProcessorError{Class: class, StatusCode: c.Status, Code: code, RequestID: c.RequestID, Err: err}
}

// Record sends req through next and records the answer: Note, then Keep
// with limit. idHeader names the header carrying the request ID.
func (c *Capture) Record(req *http.Request, next func(*http.Request) (*http.Response, error), limit int64, idHeader string) (*http.Response, error) {
	c.Sent = true
	res, err := next(req)
	if err != nil {
		return res, err
	}
	c.Note(res, idHeader)
	if err := c.Keep(res, limit); err != nil {
		return nil, err
	}
	return res, nil
}

// Note records res's status, a copy of its headers and the request ID
// from idHeader, and forgets any body kept from an earlier response.
func (c *Capture) Note(res *http.Response, idHeader string) {
	c.Status = res.StatusCode
	c.Header = res.Header.Clone()
	c.RequestID = res.Header.Get(idHeader)
	c.Raw = nil
}

// Keep reads res's body in full, up to limit bytes, closes it, records it
// as Raw and puts it back in res from memory. A longer body is
// ErrBodyTooLarge.
func (c *Capture) Keep(res *http.Response, limit int64) error {
	raw, err := ReadBody(res.Body, limit)
	if err != nil {
		return err
	}
	c.Raw = raw
	res.Body = io.NopCloser(bytes.NewReader(raw))
	res.ContentLength = int64(len(raw))
	return nil
}

// ReadBody reads body in full, up to limit bytes, and closes it. A longer
// body is ErrBodyTooLarge; a read error is wrapped as "read response body".
func ReadBody(body io.ReadCloser, limit int64) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(body, limit+1))
	_ = body.Close()
	if err != nil {
		return nil, fmt.Errorf("read response body: %w", err)
	}
	if int64(len(raw)) > limit {
		return nil, ErrBodyTooLarge
	}
	return raw, nil
}

// Interrupted says why a call that produced no complete answer ended when
// a context ended it: parent is the caller's context (shutdown, or the
// caller gave up), callCtx is parent plus the call timeout (the provider
// may have answered, so the call counts). name prefixes the error
// ("openai"). ok is false when neither context has ended: a connection
// error and the like, for the adapter to word.
func Interrupted(parent, callCtx context.Context, name string, err error) (_ error, ok bool) {
	switch {
	case parent.Err() != nil:
		return fmt.Errorf("%s call interrupted: %w (%w)", name, context.Cause(parent), err), true
	case callCtx.Err() != nil:
		return fmt.Errorf("%s call: %w (%w)", name, context.Cause(callCtx), err), true
	}
	return nil, false
}

// InvalidOutput completes pe, an invalid_output failure, with the output
// the model gave and the problem found in it, which the repair prompt
// names.
func InvalidOutput(pe *stet.ProcessorError, output []byte, problem string) *stet.ProcessorError {
	pe.Output = output
	pe.Problems = []string{problem}
	return pe
}
