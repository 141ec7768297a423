package outbound

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func TestSendSignsAndNeverFollowsRedirects(t *testing.T) {
	t.Parallel()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	var followed atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		b := make([]byte, 1024)
		n, _ := r.Body.Read(b)
		if err := wh.Verify(b[:n], r.Header); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(strings.Repeat("x", 1<<20))) // a large answer is read only in part
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/elsewhere", http.StatusFound) })
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) { followed.Add(1) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { time.Sleep(time.Second) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	s := NewSender(200*time.Millisecond, nil)
	msg := func(path string) Message {
		return Message{URL: srv.URL + path, Secret: secret, WebhookID: "evt_1_record.committed", Body: []byte(`{"a":1}`)}
	}
	if r := s.Send(context.Background(), msg("/ok")); r.Status != http.StatusOK || !r.HasRetryAfter || r.RetryAfter != 7*time.Second {
		t.Errorf("Send(/ok) = %+v, want 200 verified, Retry-After 7s", r)
	}
	if r := s.Send(context.Background(), msg("/moved")); r.Status != http.StatusFound || followed.Load() != 0 {
		t.Errorf("Send(/moved) = %+v, followed %d, want 302 and no redirect followed", r, followed.Load())
	}
	if r := s.Send(context.Background(), msg("/slow")); r.Status != 0 || r.Error != ErrTimeout {
		t.Errorf("Send(/slow) = %+v, want a timeout", r)
	}
	srv.Close()
	if r := s.Send(context.Background(), msg("/ok")); r.Status != 0 || r.Error != ErrConnect {
		t.Errorf("Send to a closed server = %+v, want connect", r)
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	for u, ok := range map[string]bool{
		"https://mod.example.org/h": true, "http://127.0.0.1:9/h": true, "http://[::1]:9/h": true, "http://localhost/h": true,
		"http://mod.example.org/h": false, "ftp://x/h": false, "/relative": false,
	} {
		if err := CheckURL(u); (err == nil) != ok {
			t.Errorf("CheckURL(%q) = %v, want ok %v", u, err, ok)
		}
	}
}
