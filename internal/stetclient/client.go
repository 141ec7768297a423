// Package stetclient talks to a running stet over HTTP the way a source and
// an operator do: it posts deliveries signed as Standard Webhooks with a
// source's whsec_ secret, reads JSON with a bearer token, and waits for
// /readyz. The quickstart, the benchmarks, the drills and the end-to-end
// tests share it. It never logs, and its errors never quote a body it sent.
package stetclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/webhook"
)

// Client is a client of one stet base URL. The zero value is not usable;
// set at least Base. It is safe for concurrent use.
type Client struct {
	// Base is the stet's base URL, "http://127.0.0.1:8080".
	Base string
	// Secret signs deliveries: "whsec_" and the base64 key of the source.
	Secret string
	// Token is the bearer token of GetJSON.
	Token string
	// HTTP sends the requests; nil means http.DefaultClient.
	HTTP *http.Client
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// Answer is what stet answered one delivery.
type Answer struct {
	// Status is the HTTP status code.
	Status int
	// RetryAfter is the Retry-After header, "" if none.
	RetryAfter string
	// Intake is the decoded body of a 200 or 202.
	Intake api.IntakeResponse
	// Problem is the problem type of an error answer (never document text).
	Problem string
}

// Deliver posts body to source's intake as message webhookID, signed now.
// A transport error, or an answer cut short, is returned as an error; any
// HTTP status is an Answer.
func (c *Client) Deliver(ctx context.Context, source, webhookID string, body []byte) (Answer, error) {
	var a Answer
	h, err := Headers(c.Secret, webhookID, time.Now(), body)
	if err != nil {
		return a, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Base+"/v1/sources/"+source+"/reports", bytes.NewReader(body))
	if err != nil {
		return a, err
	}
	req.Header = h
	resp, err := c.http().Do(req)
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return a, err // the answer was cut: as good as no answer
	}
	a.Status, a.RetryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusAccepted {
		if err := json.Unmarshal(b, &a.Intake); err != nil {
			return a, fmt.Errorf("decode intake answer (status %d): %w", resp.StatusCode, err)
		}
		return a, nil
	}
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(b, &p)
	a.Problem = p.Type
	return a, nil
}

// Headers are the request headers of a delivery of body as message
// webhookID sent at time at, signed under secret (Standard Webhooks:
// webhook-id, webhook-timestamp, webhook-signature), with its content type.
func Headers(secret, webhookID string, at time.Time, body []byte) (http.Header, error) {
	sig, err := webhook.Sign(secret, webhookID, at, body)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("webhook-id", webhookID)
	h.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
	h.Set("webhook-signature", sig)
	return h, nil
}

// GetJSON reads path (with its query) with the client's bearer token and
// decodes a 200 answer into v; any other status is an error.
func (c *Client) GetJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := c.http().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", req.URL.Path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// WaitReady polls the base URL's /readyz until it answers 200, for at most
// limit. alive, if not nil, is asked before each poll; its error (the
// process exited) ends the wait at once.
func (c *Client) WaitReady(ctx context.Context, limit time.Duration, alive func() error) error {
	deadline := time.Now().Add(limit)
	for {
		if alive != nil {
			if err := alive(); err != nil {
				return err
			}
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, c.Base+"/readyz", nil)
		resp, err := c.http().Do(req)
		ready := false
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
		}
		cancel()
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s", c.Base, limit)
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// FreeAddr returns a loopback address "127.0.0.1:PORT" nobody listens on
// right now (another process may take it before the caller does).
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// FreePort is FreeAddr's port.
func FreePort() (int, error) {
	addr, err := FreeAddr()
	if err != nil {
		return 0, err
	}
	_, port, _ := net.SplitHostPort(addr)
	return strconv.Atoi(port)
}
