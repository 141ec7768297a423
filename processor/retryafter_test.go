package processor

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	date := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
		wantOK bool
	}{
		{"none", http.Header{}, 0, false},
		{"nil", nil, 0, false},
		{"seconds", http.Header{"Retry-After": {"7"}}, 7 * time.Second, true},
		{"fractional seconds", http.Header{"Retry-After": {" 1.5 "}}, 1500 * time.Millisecond, true},
		{"zero seconds", http.Header{"Retry-After": {"0"}}, 0, true},
		{"milliseconds", http.Header{"Retry-After-Ms": {"1500"}}, 1500 * time.Millisecond, true},
		{"milliseconds win", http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"7"}}, 250 * time.Millisecond, true},
		{"bad milliseconds fall back", http.Header{"Retry-After-Ms": {"soon"}, "Retry-After": {"7"}}, 7 * time.Second, true},
		{"HTTP-date", http.Header{"Retry-After": {date(30 * time.Second)}}, 30 * time.Second, true},
		{"HTTP-date in the past", http.Header{"Retry-After": {date(-time.Minute)}}, 0, true},
		// docs/design.md §15: a date a year ahead must not snooze a job for a year.
		{"HTTP-date a year ahead", http.Header{"Retry-After": {date(365 * 24 * time.Hour)}}, MaxRetryAfter, true},
		{"seconds a week ahead", http.Header{"Retry-After": {"604800"}}, MaxRetryAfter, true},
		{"huge seconds", http.Header{"Retry-After": {"1e300"}}, MaxRetryAfter, true},
		{"huge milliseconds", http.Header{"Retry-After-Ms": {"1e300"}}, MaxRetryAfter, true},
		{"negative", http.Header{"Retry-After": {"-3"}}, 0, false},
		{"NaN", http.Header{"Retry-After": {"NaN"}}, 0, false},
		{"infinite", http.Header{"Retry-After-Ms": {"+Inf"}}, 0, false},
		{"garbage", http.Header{"Retry-After": {"tomorrow"}}, 0, false},
	}
	for _, tt := range tests {
		got, ok := RetryAfter(tt.header, now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: RetryAfter(%v) = %v, %v, want %v, %v", tt.name, tt.header, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestCapRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want time.Duration }{
		{-time.Second, 0},
		{0, 0},
		{time.Minute, time.Minute},
		{MaxRetryAfter, MaxRetryAfter},
		{365 * 24 * time.Hour, MaxRetryAfter},
	} {
		if got := CapRetryAfter(tt.in); got != tt.want {
			t.Errorf("CapRetryAfter(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
