// Package geminifake is a wire-faithful fake of the Gemini API for tests,
// drills and benchmarks: generateContent, the batch routes and the Files
// API, with scriptable answers and faults, on a local HTTP server. It is to
// processor/gemini what net/http/httptest is to net/http.
//
// It imports neither the genai SDK nor processor/gemini, so what it speaks
// is written down here, not borrowed from the code it tests. The shared
// scaffolding (server lifecycle, fault queue, call counting, wire helpers)
// comes from lab/fakekit. It keeps the text of every request for
// CallsContaining: it must never answer real traffic or hold real
// documents, and production code never imports it (benchmarks and drills
// excepted).
package geminifake
