package stetclient_test

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet/internal/stetclient"
	"github.com/stetlabs/stet/webhook"
)

var secret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("stetclient-test-secret-01234567"))

// Deliver signs what the intake's verifier accepts, posts to the source's
// path, and decodes the answer; an error answer carries its problem type.
func TestDeliver(t *testing.T) {
	t.Parallel()
	v, err := webhook.NewVerifier([]string{secret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case r.URL.Path != "/v1/sources/src-1/reports":
			w.WriteHeader(http.StatusNotFound)
		case v.Verify(r.Header, body) != nil:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"type":"bad_signature"}`)
		case strings.Contains(string(body), "busy"):
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"job_id":"job_1","duplicate":false}`)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	tests := []struct {
		name, secret, body string
		status             int
		job, retry, prob   string
	}{
		{"signed", secret, `{"text":"hello"}`, http.StatusAccepted, "job_1", "", ""},
		{"wrong secret", "whsec_" + base64.StdEncoding.EncodeToString([]byte("another-secret-of-32-bytes-long!")), `{}`, http.StatusUnauthorized, "", "", "bad_signature"},
		{"retry after", secret, `{"text":"busy"}`, http.StatusServiceUnavailable, "", "3", ""},
	}
	for _, tt := range tests {
		c := &stetclient.Client{Base: srv.URL, Secret: tt.secret}
		a, err := c.Deliver(ctx, "src-1", "msg_1", []byte(tt.body))
		if err != nil {
			t.Fatalf("Deliver(%s) = %v", tt.name, err)
		}
		if a.Status != tt.status || a.Intake.JobID != tt.job || a.RetryAfter != tt.retry || a.Problem != tt.prob {
			t.Errorf("Deliver(%s) = %+v, want status %d job %q retry-after %q problem %q", tt.name, a, tt.status, tt.job, tt.retry, tt.prob)
		}
	}
	if _, err := (&stetclient.Client{Base: srv.URL, Secret: "not base64!"}).Deliver(ctx, "src-1", "msg_1", nil); err == nil {
		t.Error("Deliver with a malformed secret = nil error, want one")
	}
}

func TestGetJSON(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		io.WriteString(w, `{"n":7}`)
	}))
	defer srv.Close()
	var v struct{ N int }
	if err := (&stetclient.Client{Base: srv.URL, Token: "tok"}).GetJSON(context.Background(), "/x?y=1", &v); err != nil || v.N != 7 {
		t.Errorf("GetJSON = %v, %+v; want nil and n 7", err, v)
	}
	if err := (&stetclient.Client{Base: srv.URL, Token: "nope"}).GetJSON(context.Background(), "/x", &v); err == nil {
		t.Error("GetJSON with a wrong token = nil error, want the 401")
	}
}

// WaitReady returns once /readyz answers 200, at once when alive says the
// process is gone, and an error after its limit.
func TestWaitReady(t *testing.T) {
	t.Parallel()
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if r.URL.Path != "/readyz" || calls < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	c := &stetclient.Client{Base: srv.URL}
	if err := c.WaitReady(ctx, 10*time.Second, nil); err != nil || calls != 3 {
		t.Errorf("WaitReady = %v after %d polls, want nil after 3", err, calls)
	}
	gone := errors.New("exited")
	if err := c.WaitReady(ctx, 10*time.Second, func() error { return gone }); !errors.Is(err, gone) {
		t.Errorf("WaitReady(alive fails) = %v, want %v", err, gone)
	}
	addr, err := stetclient.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("FreeAddr = %q, %v; want a loopback host:port", addr, err)
	}
	if err := (&stetclient.Client{Base: "http://" + addr}).WaitReady(ctx, 200*time.Millisecond, nil); err == nil {
		t.Error("WaitReady on a closed port = nil, want an error after the limit")
	}
}
