// Package outbound POSTs stet's outbound webhooks — record events to a
// source's destinations (docs/design.md §13) and alerts to the alert webhook (§6) —
// signed as Standard Webhooks with the intake's signer (webhook.Sign).
//
// A Sender never follows a redirect, reads at most a few KiB of an answer
// and discards it, gives each POST a short timeout, and never logs: a
// Result carries a status or an error class, never a body.
package outbound

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/webhook"
)

// DefaultTimeout bounds one POST, answer included.
const DefaultTimeout = 10 * time.Second

// maxAnswer is how much of an answer is read (then discarded), so a
// keep-alive connection can be reused without trusting the receiver's size.
const maxAnswer = 8 << 10

// Error classes of a POST that got no HTTP status.
const (
	ErrConnect = "connect" // refused, reset, DNS: no answer
	ErrTimeout = "timeout" // no complete answer within the timeout
	ErrRequest = "request" // the request could not be built (bad URL or secret)
)

// Sender POSTs signed webhooks. It is safe for concurrent use.
type Sender struct {
	client  *http.Client
	clock   stet.Clock
	timeout time.Duration
}

// NewSender returns a Sender; a zero timeout means DefaultTimeout, a nil
// clock the system clock (it dates the signature and reads Retry-After).
func NewSender(timeout time.Duration, clock stet.Clock) *Sender {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if clock == nil {
		clock = stet.SystemClock{}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 4
	return &Sender{clock: clock, timeout: timeout, client: &http.Client{
		Transport: tr,
		// A redirect is an answer, not an instruction: the destination's
		// configured URL is the only place a record goes.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Message is one webhook to send.
type Message struct {
	URL       string
	Secret    string // whsec_… of the destination
	WebhookID string // stable across retries
	Body      []byte
}

// Result is what one POST came to.
type Result struct {
	Status int    // the HTTP status; 0 when none came
	Error  string // ErrConnect, ErrTimeout or ErrRequest when Status is 0
	// RetryAfter is the answer's Retry-After (or retry-after-ms), capped
	// at processor.MaxRetryAfter; HasRetryAfter says it was present.
	RetryAfter    time.Duration
	HasRetryAfter bool
}

// OK reports a 2xx answer.
func (r Result) OK() bool { return r.Status >= 200 && r.Status < 300 }

// Gone reports a 410: the receiver asks to stop receiving.
func (r Result) Gone() bool { return r.Status == http.StatusGone }

// Send POSTs m once, signed now.
func (s *Sender) Send(ctx context.Context, m Message) Result {
	now := s.clock.Now()
	sig, err := webhook.Sign(m.Secret, m.WebhookID, now, m.Body)
	if err != nil {
		return Result{Error: ErrRequest}
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.URL, bytes.NewReader(m.Body))
	if err != nil {
		return Result{Error: ErrRequest}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "stet-webhooks")
	req.Header.Set("webhook-id", m.WebhookID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := s.client.Do(req)
	if err != nil {
		return Result{Error: classify(err)}
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	resp.Body.Close()
	r := Result{Status: resp.StatusCode}
	if err != nil && !r.OK() {
		// An answer cut short is no answer, unless it already said 2xx.
		return Result{Error: classify(err)}
	}
	r.RetryAfter, r.HasRetryAfter = processor.RetryAfter(resp.Header, now)
	return r
}

func classify(err error) string {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return ErrTimeout
	}
	return ErrConnect
}

// CheckURL reports whether u may be a webhook target: an absolute http(s)
// URL, https unless its host is loopback (docs/design.md §13). Its error is safe to
// show: it never quotes the URL, which may carry a token.
func CheckURL(u string) error {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" || (p.Scheme != "http" && p.Scheme != "https") {
		return errors.New("must be an absolute https:// URL")
	}
	if p.Scheme == "http" && !IsLoopback(p.Hostname()) {
		return errors.New("must use https (http is allowed only on loopback)")
	}
	return nil
}

// IsLoopback reports whether host is localhost or a loopback address.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
