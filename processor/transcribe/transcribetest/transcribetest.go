// Package transcribetest is the conformance suite every
// transcribe.Transcriber passes: Run checks, once for all kinds, the
// guarantees documented on the interface: a good clip gives a non-empty
// transcript, a 429 is rate_limited with its Retry-After and the next call
// succeeds (for a transcriber behind a fake), a content type outside
// transcribe.ContentTypes or an empty clip is unsupported without a call,
// and ending ctx ends the call. A kind's own tests keep only its quirks.
//
// A kind's test calls it with a Factory:
//
//	func TestConformance(t *testing.T) {
//		transcribetest.Run(t, func(t *testing.T) transcribetest.Setup {
//			f := fakekit.Started(t, openaifake.New(openaifake.Options{}))
//			c, err := New(Config{Common: processor.Common{ID: "t", BaseURL: f.URL()}})
//			…
//			return transcribetest.Setup{Transcriber: c, Clip: clip, Fake: &transcribetest.Fake{…}}
//		})
//	}
//
// The suite touches no network beyond the loopback fakes and must never be
// imported by production code.
package transcribetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor/transcribe"
)

// Setup is one fresh transcriber under test, for one case.
type Setup struct {
	Transcriber transcribe.Transcriber
	// Clip is a clip the transcriber turns into a non-empty transcript.
	Clip transcribe.Audio
	// Fake drives the provider fake behind the transcriber; nil for an
	// offline transcriber, whose run on Clip must then outlast CancelAfter
	// (loading a recognizer's model does).
	Fake *Fake
}

// Fake is a provider fake as the suite drives it.
type Fake struct {
	// RateLimit scripts the next call's answer: 429 with Retry-After set to
	// retryAfter (seconds) and no other wait header.
	RateLimit func(retryAfter string)
	// Hang scripts the next call to be held without an answer until the
	// client leaves.
	Hang func()
	// Calls returns how many transcription requests the fake received.
	Calls func() int
}

// Factory builds a fresh Setup for one case; it registers its cleanups
// with t.
type Factory func(t *testing.T) Setup

// CancelAfter is how long the suite lets an offline transcriber run before
// it cancels the call.
const CancelAfter = 20 * time.Millisecond

// returnBound is how long a cancelled call may take to return: a liveness
// bound, not a measurement.
const returnBound = 30 * time.Second

// Run runs the conformance cases against the transcribers factory builds,
// each case in parallel with its own Setup.
func Run(t *testing.T, factory Factory) {
	t.Helper()
	t.Run("info", func(t *testing.T) {
		t.Parallel()
		s := factory(t)
		info := s.Transcriber.Info()
		if info.ID == "" || info.Kind == "" {
			t.Errorf("Info() = %+v, want an ID and a Kind", info)
		}
		info.Subprocessors = append(info.Subprocessors, "changed-by-caller")
		for _, sp := range s.Transcriber.Info().Subprocessors {
			if sp == "changed-by-caller" {
				t.Errorf("Info().Subprocessors shares its backing array with the caller")
			}
		}
	})

	t.Run("good clip", func(t *testing.T) {
		t.Parallel()
		s := factory(t)
		tr, err := s.Transcriber.Transcribe(t.Context(), s.Clip)
		if err != nil {
			t.Fatalf("Transcribe(%v) = %v, want a transcript", s.Clip, err)
		}
		checkTranscript(t, s, tr)
		if s.Fake != nil {
			if n := s.Fake.Calls(); n != 1 {
				t.Errorf("fake received %d transcription calls, want 1", n)
			}
		}
	})

	t.Run("rate limited then success", func(t *testing.T) {
		t.Parallel()
		s := factory(t)
		if s.Fake == nil {
			t.Skip("offline transcriber: no provider to rate-limit it")
		}
		s.Fake.RateLimit("7")
		_, err := s.Transcriber.Transcribe(t.Context(), s.Clip)
		pe := processorError(t, "Transcribe() answered 429", err)
		if pe.Class != stet.FailureRateLimited || pe.StatusCode != 429 {
			t.Errorf("Transcribe() answered 429: class %q status %d, want %q 429", pe.Class, pe.StatusCode, stet.FailureRateLimited)
		}
		if got := stet.RetryAfterOf(err); got != 7*time.Second {
			t.Errorf("RetryAfterOf(Transcribe() answered 429) = %v, want 7s from Retry-After", got)
		}
		tr, err := s.Transcriber.Transcribe(t.Context(), s.Clip)
		if err != nil {
			t.Fatalf("Transcribe() after the 429 = %v, want a transcript", err)
		}
		checkTranscript(t, s, tr)
		if n := s.Fake.Calls(); n != 2 {
			t.Errorf("fake received %d transcription calls, want 2 (the 429 and the retry)", n)
		}
	})

	t.Run("unsupported clip", func(t *testing.T) {
		t.Parallel()
		s := factory(t)
		for _, a := range []transcribe.Audio{
			{ContentType: "audio/flac", Data: s.Clip.Data},
			{ContentType: "text/plain", Data: s.Clip.Data},
			{ContentType: "", Data: s.Clip.Data},
			{ContentType: s.Clip.ContentType, Data: nil},
		} {
			_, err := s.Transcriber.Transcribe(t.Context(), a)
			if pe := processorError(t, fmt.Sprintf("Transcribe(%v)", a), err); pe.Class != stet.FailureUnsupported {
				t.Errorf("Transcribe(%v): class %q, want %q", a, pe.Class, stet.FailureUnsupported)
			}
		}
		if s.Fake != nil {
			if n := s.Fake.Calls(); n != 0 {
				t.Errorf("fake received %d transcription calls for clips refused up front, want 0", n)
			}
		}
	})

	t.Run("cancel ends the call", func(t *testing.T) {
		t.Parallel()
		s := factory(t)
		errShutdown := errors.New("shutting down")
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		if s.Fake != nil {
			s.Fake.Hang()
		}
		done := make(chan error, 1)
		go func() {
			_, err := s.Transcriber.Transcribe(ctx, s.Clip)
			done <- err
		}()
		if s.Fake != nil {
			waitFor(t, func() bool { return s.Fake.Calls() == 1 })
		} else {
			time.Sleep(CancelAfter)
		}
		cancel(errShutdown)
		select {
		case err := <-done:
			pe := processorError(t, "Transcribe() cancelled mid-call", err)
			if pe.Class != stet.FailureTransient {
				t.Errorf("Transcribe() cancelled mid-call: class %q, want %q", pe.Class, stet.FailureTransient)
			}
			if !errors.Is(err, errShutdown) {
				t.Errorf("Transcribe() cancelled mid-call = %v, want it to wrap the cause %v", err, errShutdown)
			}
		case <-time.After(returnBound):
			t.Fatalf("Transcribe() still running %v after its ctx was cancelled", returnBound)
		}
	})

	t.Run("cancelled before the call", func(t *testing.T) {
		t.Parallel()
		s := factory(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := s.Transcriber.Transcribe(ctx, s.Clip)
		if pe := processorError(t, "Transcribe(cancelled ctx)", err); pe.Class != stet.FailureTransient {
			t.Errorf("Transcribe(cancelled ctx): class %q, want %q", pe.Class, stet.FailureTransient)
		}
		if s.Fake != nil {
			if n := s.Fake.Calls(); n != 0 {
				t.Errorf("fake received %d transcription calls with a cancelled ctx, want 0", n)
			}
		}
	})
}

// checkTranscript checks what every successful answer carries, and that
// printing it never prints the text.
func checkTranscript(t *testing.T, s Setup, tr *transcribe.Transcript) {
	t.Helper()
	if strings.TrimSpace(tr.Text) == "" {
		t.Errorf("Transcribe(%v).Text is empty, want words", s.Clip)
	}
	if tr.Model == "" {
		t.Errorf("Transcribe(%v).Model is empty", s.Clip)
	}
	if tr.Latency <= 0 {
		t.Errorf("Transcribe(%v).Latency = %v, want > 0", s.Clip, tr.Latency)
	}
	if tr.AudioSeconds < 0 {
		t.Errorf("Transcribe(%v).AudioSeconds = %v, want >= 0", s.Clip, tr.AudioSeconds)
	}
	if s.Fake != nil && (tr.StatusCode != 200 || tr.RequestID == "" || len(tr.Raw) == 0) {
		t.Errorf("Transcribe(%v): status %d, request ID %q, %d raw bytes; want 200, an ID and the body", s.Clip, tr.StatusCode, tr.RequestID, len(tr.Raw))
	}
	if s.Fake == nil && tr.Raw != nil {
		t.Errorf("Transcribe(%v).Raw = %d bytes, want nil from an offline transcriber", s.Clip, len(tr.Raw))
	}
	for _, printed := range []string{fmt.Sprint(tr), fmt.Sprintf("%+v", *tr), fmt.Sprintf("%#v", tr)} {
		if strings.Contains(printed, strings.TrimSpace(tr.Text)) {
			t.Errorf("printing a transcript shows its text: %s", printed)
		}
	}
}

// processorError returns err as a *stet.ProcessorError, failing t when it
// is not one.
func processorError(t *testing.T, what string, err error) *stet.ProcessorError {
	t.Helper()
	var pe *stet.ProcessorError
	if !errors.As(err, &pe) {
		t.Fatalf("%s = %v (%T), want a *stet.ProcessorError", what, err, err)
	}
	return pe
}

// waitFor polls cond until it holds, failing t after returnBound.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(returnBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", returnBound)
		}
		time.Sleep(time.Millisecond)
	}
}
