package openai

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/fakekit"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/openai/openaifake"
	"github.com/stetlabs/stet/processor/transcribe"
	"github.com/stetlabs/stet/processor/transcribe/transcribetest"
)

// transcribeCanary goes into the fake's error messages and transcripts; no error
// string may carry it.
const transcribeCanary = "CANARY-7f3a Jane Roe 555-0100"

func transcribeNote(t *testing.T) transcribe.Audio {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "audio", "samples", "note-001.wav"))
	if err != nil {
		t.Fatalf("read sample: %v", err)
	}
	return transcribe.Audio{ContentType: transcribe.WAV, Data: data}
}

func newTranscribeFake(t *testing.T) *openaifake.Server {
	return fakekit.Started(t, openaifake.New(openaifake.Options{APIKey: testKey}))
}

func newTranscriber(t *testing.T, cfg TranscriberConfig) *Transcriber {
	t.Helper()
	cfg.ID = "openai-transcribe-test"
	cfg.APIKey = testKey
	c, err := NewTranscriber(cfg)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	return c
}

func TestTranscribeConformance(t *testing.T) {
	t.Parallel()
	transcribetest.Run(t, func(t *testing.T) transcribetest.Setup {
		f := newTranscribeFake(t)
		return transcribetest.Setup{
			Transcriber: newTranscriber(t, TranscriberConfig{Config: Config{Common: processor.Common{BaseURL: f.URL()}}}),
			Clip:        transcribeNote(t),
			Fake: &transcribetest.Fake{
				RateLimit: func(retryAfter string) {
					// Without the reset headers: they would be a second source of wait.
					f.EnqueueTranscription(openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: retryAfter,
						Header: http.Header{"X-Ratelimit-Reset-Requests": nil, "X-Ratelimit-Reset-Tokens": nil}})
				},
				Hang:  func() { f.EnqueueTranscription(openaifake.Fault{Kind: openaifake.Delay, Delay: time.Hour}) },
				Calls: f.TranscriptionCalls,
			},
		}
	})
}

// TestTranscribeRateLimitThenSuccess is the case the pipeline lives by: a 429 with
// Retry-After is rate_limited with that wait, the retry succeeds, and the
// provider saw the same audio twice.
func TestTranscribeRateLimitThenSuccess(t *testing.T) {
	t.Parallel()
	f := newTranscribeFake(t)
	c := newTranscriber(t, TranscriberConfig{Config: Config{Common: processor.Common{BaseURL: f.URL()}}})
	a := transcribeNote(t)
	f.EnqueueTranscription(openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: "2"})

	_, err := c.Transcribe(t.Context(), a)
	if stet.ClassOf(err) != stet.FailureRateLimited || stet.RetryAfterOf(err) != 2*time.Second {
		t.Fatalf("Transcribe() on 429 = %v (retry after %v), want rate_limited after 2s", err, stet.RetryAfterOf(err))
	}
	tr, err := c.Transcribe(t.Context(), a)
	if err != nil {
		t.Fatalf("Transcribe() after 429 = %v", err)
	}
	if tr.Text != openaifake.DefaultTranscript || tr.Model != DefaultTranscribeModel || tr.StatusCode != 200 || !strings.HasPrefix(tr.RequestID, "req_") {
		t.Errorf("Transcribe() = %q model %q status %d request %q, want the fake's text, %s, 200, req_…", tr.Text, tr.Model, tr.StatusCode, tr.RequestID, DefaultTranscribeModel)
	}
	if !strings.Contains(string(tr.Raw), `"text":"`+openaifake.DefaultTranscript+`"`) {
		t.Errorf("Transcript.Raw = %s, want the body as received", tr.Raw)
	}
	if n := f.TranscriptionCalls(); n != 2 {
		t.Errorf("TranscriptionCalls() = %d, want 2", n)
	}
	reqs := f.Transcriptions()
	if len(reqs) != 2 {
		t.Fatalf("Transcriptions() = %d requests, want 2", len(reqs))
	}
	for i, r := range reqs {
		if r.AudioSHA256 != a.SHA256() || r.Model != DefaultTranscribeModel {
			t.Errorf("request %d: audio sha %s model %s, want %s %s", i, r.AudioSHA256, r.Model, a.SHA256(), DefaultTranscribeModel)
		}
	}
}

// TestTranscribeRequest checks the form as the fake decoded it: the file named for
// its media type, the model, response_format json, the language when
// configured, and the bearer key.
func TestTranscribeRequest(t *testing.T) {
	t.Parallel()
	f := newTranscribeFake(t)
	c := newTranscriber(t, TranscriberConfig{Config: Config{Common: processor.Common{BaseURL: f.URL(), Model: "gpt-4o-transcribe"}}, Language: "en"})
	data := transcribeNote(t).Data
	for _, ct := range transcribe.ContentTypes {
		if _, err := c.Transcribe(t.Context(), transcribe.Audio{ContentType: ct + "; codecs=x", Data: data}); err != nil {
			t.Errorf("Transcribe(%s) = %v", ct, err)
		}
	}
	reqs := f.Transcriptions()
	if len(reqs) != len(transcribe.ContentTypes) {
		t.Fatalf("Transcriptions() = %d, want %d", len(reqs), len(transcribe.ContentTypes))
	}
	for i, r := range reqs {
		ct := transcribe.ContentTypes[i]
		if r.Filename != "audio."+transcribeExtensions[ct] || r.FileContentType != ct || r.Model != "gpt-4o-transcribe" || r.ResponseFormat != "json" || r.Language != "en" || r.Prompt != "" {
			t.Errorf("request for %s = %+v, want audio.%s of type %s, gpt-4o-transcribe, json, en", ct, r, transcribeExtensions[ct], ct)
		}
		if got := r.Header.Get("Authorization"); got != "Bearer "+testKey {
			t.Errorf("request for %s: Authorization = %q, want the bearer key", ct, got)
		}
	}
}

func TestTranscribeAzure(t *testing.T) {
	t.Parallel()
	f := newTranscribeFake(t)
	c := newTranscriber(t, TranscriberConfig{Config: Config{Common: processor.Common{BaseURL: f.HTTP.URL(), Model: "transcribe-deployment"}, AzureAPIVersion: "2025-03-01-preview"}})
	tr, err := c.Transcribe(t.Context(), transcribeNote(t))
	if err != nil {
		t.Fatalf("Transcribe() on Azure = %v", err)
	}
	if tr.Model != "transcribe-deployment" {
		t.Errorf("Transcript.Model = %q, want the deployment", tr.Model)
	}
	r := f.Transcriptions()[0]
	if r.Header.Get("api-key") != testKey || r.Header.Get("Authorization") != "" {
		t.Errorf("Azure request headers: api-key %q, Authorization %q; want the key in api-key only", r.Header.Get("api-key"), r.Header.Get("Authorization"))
	}
}

func TestTranscribeWhisperDuration(t *testing.T) {
	t.Parallel()
	f := newTranscribeFake(t)
	c := newTranscriber(t, TranscriberConfig{Config: Config{Common: processor.Common{BaseURL: f.URL(), Model: "whisper-1"}}})
	tr, err := c.Transcribe(t.Context(), transcribeNote(t))
	if err != nil || tr.AudioSeconds != 3 {
		t.Errorf("Transcribe() with whisper-1 = %v, %v; want AudioSeconds 3 (usage.seconds, rounded up by the API)", tr, err)
	}
}

// TestTranscribeClassification covers the answers transcribetest does not, each
// with the transcribeCanary in the provider's message.
func TestTranscribeClassification(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fault   openaifake.Fault
		timeout time.Duration
		class   stet.FailureClass
		status  int
		code    string
		wait    time.Duration
	}{
		{"quota", openaifake.Fault{Kind: openaifake.Quota}, 0, stet.FailureQuota, 429, "insufficient_quota", 0},
		{"bad key", openaifake.Fault{Kind: openaifake.Unauthorized}, 0, stet.FailureAuth, 401, "invalid_api_key", 0},
		{"server error", openaifake.Fault{Kind: openaifake.ServerError}, 0, stet.FailureTransient, 500, "server_error", 0},
		{"overloaded", openaifake.Fault{Kind: openaifake.ServerError, Status: 503}, 0, stet.FailureTransient, 503, "server_error", 0},
		{"bad request", openaifake.Fault{Kind: openaifake.HTTPError, Status: 400, Code: "audio_too_short"}, 0, stet.FailureUnsupported, 400, "audio_too_short", 0},
		{"region", openaifake.Fault{Kind: openaifake.HTTPError, Status: 403, Code: "unsupported_country_region_territory"}, 0, stet.FailureUnsupported, 403, "unsupported_country_region_territory", 0},
		{"429 with reset headers only", openaifake.Fault{Kind: openaifake.RateLimit}, 0, stet.FailureRateLimited, 429, "rate_limit_exceeded", 120 * time.Millisecond},
		{"429 retry-after-ms", openaifake.Fault{Kind: openaifake.RateLimit, RetryAfterMS: 1500, RetryAfter: "9"}, 0, stet.FailureRateLimited, 429, "rate_limit_exceeded", 1500 * time.Millisecond},
		{"disconnect", openaifake.Fault{Kind: openaifake.Disconnect}, 0, stet.FailureTransient, 0, "", 0},
		{"truncated answer", openaifake.Fault{Kind: openaifake.TruncatedJSON}, 0, stet.FailureTransient, 200, "", 0},
		// Timeouts long enough for the upload to reach the fake under a
		// loaded -race run: the fake counts a call once it has the form.
		{"timeout", openaifake.Fault{Kind: openaifake.Delay, Delay: time.Hour}, time.Second, stet.FailureTransient, 0, "", 0},
		{"timeout after headers", openaifake.Fault{Kind: openaifake.TimeoutAfterAnswer}, time.Second, stet.FailureTransient, 200, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newTranscribeFake(t)
			f.SetTranscript(func([]byte) string { return transcribeCanary })
			tc.fault.Message = transcribeCanary
			f.EnqueueTranscription(tc.fault)
			c := newTranscriber(t, TranscriberConfig{Config: Config{Common: processor.Common{BaseURL: f.URL(), Timeout: tc.timeout}}})
			_, err := c.Transcribe(t.Context(), transcribeNote(t))
			var pe *stet.ProcessorError
			if !errors.As(err, &pe) {
				t.Fatalf("Transcribe() = %v, want a *stet.ProcessorError", err)
			}
			if pe.Class != tc.class || pe.StatusCode != tc.status || pe.Code != tc.code || pe.RetryAfter != tc.wait {
				t.Errorf("Transcribe() = class %s status %d code %q wait %v, want %s %d %q %v", pe.Class, pe.StatusCode, pe.Code, pe.RetryAfter, tc.class, tc.status, tc.code, tc.wait)
			}
			if strings.Contains(err.Error(), "CANARY") {
				t.Errorf("Transcribe() error %q carries the provider's text", err)
			}
			if n := f.TranscriptionCalls(); n != 1 {
				t.Errorf("TranscriptionCalls() = %d, want 1: no retries of the adapter's own", n)
			}
		})
	}
}

func TestTranscribeEmptyTranscript(t *testing.T) {
	t.Parallel()
	f := newTranscribeFake(t)
	f.SetTranscript(func([]byte) string { return " \n" })
	_, err := newTranscriber(t, TranscriberConfig{Config: Config{Common: processor.Common{BaseURL: f.URL()}}}).Transcribe(t.Context(), transcribeNote(t))
	var pe *stet.ProcessorError
	if !errors.As(err, &pe) || pe.Class != stet.FailureUnsupported || pe.Code != transcribe.CodeEmptyTranscript || pe.StatusCode != 200 || pe.RequestID == "" {
		t.Errorf("Transcribe() of silence = %v, want unsupported %s carrying status 200 and the request ID", err, transcribe.CodeEmptyTranscript)
	}
}

func TestTranscribeNewRefuses(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{},
		{Common: processor.Common{ID: "x", Timeout: -time.Second}},
		{Common: processor.Common{ID: "x", BaseURL: "ftp://example.com"}},
		{Common: processor.Common{ID: "x", BaseURL: "/v1"}},
	} {
		if _, err := NewTranscriber(TranscriberConfig{Config: cfg}); err == nil {
			t.Errorf("NewTranscriber(%+v) = nil error, want a config error", cfg)
		}
	}
	c, err := NewTranscriber(TranscriberConfig{Config: Config{Common: processor.Common{ID: "x", Region: "us", Retention: "30d"}}})
	if err != nil {
		t.Fatal(err)
	}
	info := c.Info()
	if info.Kind != TranscribeKind || info.Model != DefaultTranscribeModel || !info.SendsTextOffHost || info.Region != "us" || info.Retention != "30d" {
		t.Errorf("Info() = %+v, want kind %s, model %s, off host, the declared region and retention", info, TranscribeKind, DefaultTranscribeModel)
	}
}

// TestTranscribeIgnoresEnvironment: where audio goes is stet's config alone, never
// OPENAI_BASE_URL or OPENAI_API_KEY. Not parallel: it sets the
// environment.
func TestTranscribeIgnoresEnvironment(t *testing.T) {
	f := newTranscribeFake(t)
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	if _, err := newTranscriber(t, TranscriberConfig{Config: Config{Common: processor.Common{BaseURL: f.URL()}}}).Transcribe(t.Context(), transcribeNote(t)); err != nil {
		t.Errorf("Transcribe() with OPENAI_* set = %v, want the configured fake to answer", err)
	}
}
