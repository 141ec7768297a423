package processor

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxRetryAfter caps every wait a provider asks for (docs/design.md §15: sync 1 h).
// A provider that answers "Retry-After: <a date a year ahead>" snoozes a job
// for an hour, not a year; the next attempt asks again.
const MaxRetryAfter = time.Hour

// RetryAfter reads how long h asks the client to wait: retry-after-ms
// first (OpenAI, Anthropic and their gateways send it beside the coarser
// Retry-After), then Retry-After as delta-seconds or an HTTP-date measured
// from now. ok is false when neither header holds a usable value; a value
// that is present but unparseable, negative or not finite is ignored. The
// wait is capped at MaxRetryAfter.
func RetryAfter(h http.Header, now time.Time) (d time.Duration, ok bool) {
	if h == nil {
		return 0, false
	}
	if d, ok := ParseRetryAfterMS(h.Get("retry-after-ms")); ok {
		return d, true
	}
	return ParseRetryAfter(h.Get("Retry-After"), now)
}

// ParseRetryAfterMS parses a retry-after-ms value (milliseconds, fractions
// allowed), capped at MaxRetryAfter.
func ParseRetryAfterMS(v string) (time.Duration, bool) {
	ms, ok := parseNonNegative(v)
	if !ok {
		return 0, false
	}
	return capSeconds(ms / 1000), true
}

// ParseRetryAfter parses a Retry-After value: delta-seconds (fractions
// allowed) or an HTTP-date, which counts from now and is zero when past.
// The result is capped at MaxRetryAfter.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
			return 0, false
		}
		return capSeconds(s), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return CapRetryAfter(t.Sub(now)), true
}

// CapRetryAfter clamps a wait into [0, MaxRetryAfter]. Adapters pass every
// wait they derive from elsewhere (reset headers, RetryInfo details, "try
// again in N seconds" messages) through it.
func CapRetryAfter(d time.Duration) time.Duration {
	return min(max(d, 0), MaxRetryAfter)
}

func parseNonNegative(v string) (float64, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// capSeconds converts seconds to a duration without overflowing.
func capSeconds(s float64) time.Duration {
	if s >= MaxRetryAfter.Seconds() {
		return MaxRetryAfter
	}
	return time.Duration(s * float64(time.Second))
}
