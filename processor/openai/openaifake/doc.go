// Package openaifake is a wire-faithful fake of the OpenAI API for tests,
// drills and benchmarks: Chat Completions (also at Azure OpenAI's
// deployment path), the Files and Batches routes of the Batch API, scripted
// and random faults, RPM/TPM limits and per-second traffic counts. It is to
// processor/openai what net/http/httptest is to net/http.
//
// It imports neither the OpenAI SDK nor processor/openai, so the wire it
// speaks is written down here rather than borrowed from the client it
// tests. The shared scaffolding (fault queue, call counting, latency,
// buckets, traffic windows) comes from lab/fakekit. It keeps the user
// text of every request for CallsContaining: it must never answer real
// traffic, and production code never imports it (benchmarks and drills
// excepted).
package openaifake
