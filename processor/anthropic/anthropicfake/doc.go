// Package anthropicfake is a wire-faithful fake of the Anthropic API for
// tests, drills and benchmarks: the Messages API (POST /v1/messages) in its
// structured-output and forced-tool forms, the Message Batches routes, and
// scripted and random faults. It is to processor/anthropic what
// net/http/httptest is to net/http.
//
// It imports neither the Anthropic SDK nor processor/anthropic, so the wire
// it speaks is written down here rather than borrowed from the client it
// tests. The shared scaffolding (server lifecycle, fault queue, call
// counting, wire helpers, the default answer) comes from lab/fakekit.
// It keeps the user text of every request for CallsContaining: it must
// never answer real traffic, and production code never imports it
// (benchmarks and drills excepted).
package anthropicfake
