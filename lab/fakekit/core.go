package fakekit

import (
	"io"
	"net/http"
	"time"
)

// Core is what every fake's Server holds the same way: its local HTTP
// server and handler, its fault queue and its call count. A fake embeds it
// and calls Start in its New; Core's methods are then the fake's own.
type Core[F any] struct {
	HTTP   *Server
	Faults *Faults[F]
	// Seen counts the requests Calls reports and keeps the text
	// CallsContaining searches; each fake says which requests those are.
	Seen    Calls
	handler http.Handler
}

// Start serves h on a local httptest server.
func (c *Core[F]) Start(h http.HandlerFunc) {
	c.handler = h
	c.HTTP = NewServer(h)
}

// Handler returns the fake's handler, to serve from another listener. Calls,
// faults and Close apply to it as to the built-in server.
func (c *Core[F]) Handler() http.Handler { return c.handler }

// Close releases held connections and stops the server. It is safe to call
// more than once.
func (c *Core[F]) Close() { c.HTTP.Close() }

// Enqueue scripts faults for the next calls, in order; later calls are
// answered normally.
func (c *Core[F]) Enqueue(faults ...F) { c.Faults.Enqueue(faults...) }

// Calls returns the number of requests counted in Seen: those that reached
// the handler, faulted ones included, on the routes the fake counts.
func (c *Core[F]) Calls() int { return c.Seen.Count() }

// CallsContaining returns the number of texts recorded in Seen (the user
// text of requests) that contain s.
func (c *Core[F]) CallsContaining(s string) int { return c.Seen.Containing(s) }

// ReadBody reads r's body up to limit bytes and one more, so that the
// caller can tell an oversized body (len(body) > limit) from a whole one.
func ReadBody(r *http.Request, limit int64) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r.Body, limit+1))
}

// Arrive counts a request in Seen, keeps its text when its body decoded,
// and waits latency. It reports false when the client left or the server
// closed during the wait: the handler then answers nothing.
func (c *Core[F]) Arrive(r *http.Request, decoded bool, text string, latency time.Duration) bool {
	c.Seen.Add()
	if decoded {
		c.Seen.Record(text)
	}
	return c.HTTP.Sleep(r, latency)
}
