package api

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A panic in a handler answers a 500 problem (not a dropped connection) and
// is logged with the request ID, never with the panic's value.
func TestHandlerPanicAnswers500(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	s := New(Config{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	s.handle("GET /boom", func(http.ResponseWriter, *http.Request) { panic("text that must not be logged") })
	srv := httptest.NewServer(s)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/boom")
	if err != nil {
		t.Fatalf("GET /boom: %v (the connection was dropped)", err)
	}
	defer resp.Body.Close()
	var p Problem
	_ = json.NewDecoder(resp.Body).Decode(&p)
	if resp.StatusCode != http.StatusInternalServerError || p.Type != ProblemType("internal") {
		t.Fatalf("GET /boom = %d %+v, want a 500 internal problem", resp.StatusCode, p)
	}
	reqID := resp.Header.Get("X-Request-Id")
	if reqID == "" {
		t.Fatal("no X-Request-Id header")
	}
	if l := logs.String(); !strings.Contains(l, `"msg":"handler panic"`) || !strings.Contains(l, reqID) {
		t.Errorf("log = %s, want a handler panic line with request ID %s", l, reqID)
	}
	if strings.Contains(logs.String(), "must not be logged") {
		t.Errorf("the panic's value reached the log")
	}
}
