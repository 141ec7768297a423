package processor

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestClientBoundsBodies(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("x", 100))
	}))
	defer srv.Close()
	read := func(hc *http.Client, raise int64) (int, error) {
		ctx := t.Context()
		if raise > 0 {
			ctx = WithBodyLimit(ctx, raise)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		res, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return len(b), err
	}
	tests := []struct {
		name   string
		max    int64
		raise  int64
		hard   int64 // the caller's NewHTTPClient limit
		wantN  int
		wantTL bool
	}{
		{name: "under the limit", max: 101, wantN: 100},
		{name: "at the limit", max: 100, wantN: 100},
		{name: "over the limit", max: 99, wantN: 99, wantTL: true},
		{name: "over, raised by the call", max: 10, raise: 100, wantN: 100},
		{name: "default limit", max: 0, wantN: 100},
		{name: "a caller's hard limit, under an adapter's", max: 1000, raise: 1000, hard: 50, wantN: 50, wantTL: true},
	}
	for _, tt := range tests {
		c := Common{}
		if tt.hard > 0 {
			c.HTTPClient = NewHTTPClient(time.Second, tt.hard)
		}
		n, err := read(c.Client(tt.max), tt.raise)
		if n != tt.wantN || errors.Is(err, ErrBodyTooLarge) != tt.wantTL || (!tt.wantTL && err != nil) {
			t.Errorf("%s: read %d bytes, %v; want %d bytes, too large %v", tt.name, n, err, tt.wantN, tt.wantTL)
		}
	}
}

func TestClientRefusesRedirects(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer target.Close()
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/x", http.StatusTemporaryRedirect)
	}))
	defer front.Close()

	caller := &http.Client{Timeout: 7 * time.Second} // follows redirects
	for name, hc := range map[string]*http.Client{
		"own":           Common{}.Client(0),
		"caller's":      Common{HTTPClient: caller}.Client(0),
		"NewHTTPClient": NewHTTPClient(time.Second, 1<<20),
	} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, front.URL, strings.NewReader("text"))
		res, err := hc.Do(req)
		if !errors.Is(err, ErrRedirect) {
			t.Errorf("%s client: Do() = %v, want ErrRedirect", name, err)
		}
		if res != nil {
			res.Body.Close()
		}
		req, _ = http.NewRequestWithContext(t.Context(), http.MethodPost, front.URL, strings.NewReader("text"))
		res, err = Do(hc, req)
		if err != nil || res.StatusCode != http.StatusTemporaryRedirect {
			t.Errorf("%s client: processor.Do() = %v, %v; want the 307 itself", name, res, err)
		} else if b, err := io.ReadAll(res.Body); len(b) != 0 || err != nil {
			t.Errorf("%s client: processor.Do() body = %q, %v; want empty", name, b, err)
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect's target received %d requests, want 0", n)
	}
	if caller.CheckRedirect != nil || caller.Transport != nil || caller.Timeout != 7*time.Second {
		t.Errorf("the caller's client was modified: %+v", caller)
	}
	if hc := (Common{HTTPClient: caller}).Client(0); hc.Timeout != 7*time.Second {
		t.Errorf("Client() timeout = %v, want the caller's 7s", hc.Timeout)
	}
}
