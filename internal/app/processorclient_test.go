package app

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stetlabs/stet/processor"
)

// Calls to a provider reuse their connections: 16 calls at once, ten times
// over, through an adapter's client (processor.Common.Client) built on the
// shared ProcessorClient for 16 extractions, open at most 16 connections.
// Through the default transport, which keeps two idle per host, they open
// one for nearly every call past the first round.
func TestProcessorClientReusesConnections(t *testing.T) {
	t.Parallel()
	const calls, rounds = 16, 10
	opened := func(hc *http.Client) int64 {
		var n atomic.Int64
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, `{"ok":true}`)
		}))
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				n.Add(1)
			}
		}
		srv.Start()
		defer srv.Close()
		client := processor.Common{HTTPClient: hc}.Client(0)
		for range rounds {
			var wg sync.WaitGroup
			for range calls {
				wg.Go(func() {
					resp, err := client.Get(srv.URL)
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				})
			}
			wg.Wait()
		}
		client.CloseIdleConnections()
		return n.Load()
	}
	if n := opened(ProcessorClient(calls)); n > calls {
		t.Errorf("shared processor client: %d connections for %d rounds of %d calls; want at most %d", n, rounds, calls, calls)
	}
	// The contrast the shared client exists for (so this test can fail).
	if n := opened(nil); n <= 2*calls {
		t.Errorf("default transport: %d connections for %d rounds of %d calls; expected it to reconnect for most calls", n, rounds, calls)
	}
}
