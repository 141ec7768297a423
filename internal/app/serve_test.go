package app

import (
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

// Every stet http.Server bounds headers at 64 KiB and sets every timeout.
func TestHTTPServerBounds(t *testing.T) {
	t.Parallel()
	srv := NewHTTPServer(http.NotFoundHandler(), slog.New(slog.DiscardHandler))
	if srv.MaxHeaderBytes != 64<<10 || srv.ReadTimeout == 0 || srv.WriteTimeout == 0 || srv.IdleTimeout == 0 || srv.ReadHeaderTimeout == 0 {
		t.Fatalf("server = max header %d, timeouts %v %v %v %v; want 64 KiB and every timeout set",
			srv.MaxHeaderBytes, srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 100<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 100 KiB header = %d, want 431", resp.StatusCode)
	}
}
