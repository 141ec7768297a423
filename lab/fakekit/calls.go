package fakekit

import (
	"strings"
	"sync"
)

// Calls counts the requests a fake received and keeps the user text of
// each, so that tests can ask how many requests carried a marker. It keeps
// text: a test tool, never a sink for real documents. It is safe for
// concurrent use; the zero value is ready.
type Calls struct {
	mu     sync.Mutex
	n      int
	inputs []string
}

// Add counts one request.
func (c *Calls) Add() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
}

// Record keeps the user text of one request (or batch item) for
// Containing; it does not count a request.
func (c *Calls) Record(text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inputs = append(c.inputs, text)
}

// Count returns the number of requests counted by Add.
func (c *Calls) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Containing returns the number of recorded texts that contain s.
func (c *Calls) Containing(s string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, in := range c.inputs {
		if strings.Contains(in, s) {
			n++
		}
	}
	return n
}
