// Package transcribe is the seam between stet and the transcribers that turn
// an audio report into text (docs/design.md §19): the Transcriber interface,
// the Audio it takes and the Transcript it returns, and the checks every
// transcriber makes the same way (accepted content types, an empty answer).
// Each kind implements it in its provider's package: openai.Transcriber
// (processor/openai, /v1/audio/transcriptions, sharing the chat processor's
// wire rules) and processor/transcribe/pocketsphinx (offline);
// transcribe/transcribetest is the suite both pass.
//
// Audio and transcripts are document content. Nothing here may copy either
// into an error, a log line or a metric: Audio and Transcript print only
// their sizes and SHA-256s.
package transcribe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"slices"
	"strings"
	"time"

	"github.com/stetlabs/stet"
)

// Transcriber turns one audio clip into text. One package per kind
// implements it.
//
// Guarantees an implementation must give, as stet.Processor's do:
//   - At most one provider call (or one local run) per Transcribe call, and
//     no retries of its own: stet owns the retry policy.
//   - Every failure is a *stet.ProcessorError whose FailureClass is decided
//     here, at the boundary, with the helpers of package processor: 429 is
//     rate_limited with Retry-After honoured, 5xx, timeouts and dropped
//     connections are transient, a content type outside ContentTypes, empty
//     audio and an empty transcript are unsupported.
//   - Errors never carry audio bytes, transcript text or the provider's
//     message in their Error string.
//   - When ctx ends, the call ends: the request is abandoned or the local
//     process killed, and the error says so (class transient).
//   - It is safe for concurrent use.
type Transcriber interface {
	// Info declares the transcriber's identity and data boundary, as a
	// processor's does; the policy gate reads it before audio leaves.
	Info() stet.ProcessorInfo
	// Transcribe returns the transcript of a, which it does not modify.
	Transcribe(ctx context.Context, a Audio) (*Transcript, error)
}

// Audio is one clip as a source delivered it: its media type (one of
// ContentTypes) and the exact bytes, whose SHA-256 is the clip's identity.
type Audio struct {
	ContentType string
	Data        []byte
}

// SHA256 returns the hex SHA-256 of the audio bytes: what an attempt records
// as the input it sent.
func (a Audio) SHA256() string { return stet.SHA256Hex(a.Data) }

// String prints the content type, size and a short hash, never the bytes.
func (a Audio) String() string {
	return fmt.Sprintf("audio(%s len=%d sha256=%s)", a.ContentType, len(a.Data), a.SHA256()[:12])
}

// GoString prints the same description as String.
func (a Audio) GoString() string { return a.String() }

// LogValue prints only the content type, size and hash.
func (a Audio) LogValue() slog.Value {
	return slog.GroupValue(slog.String("content_type", a.ContentType), slog.Int("len", len(a.Data)), slog.String("sha256", a.SHA256()))
}

// Transcript is a transcriber's answer.
type Transcript struct {
	Text       string
	Model      string
	RequestID  string
	StatusCode int
	Latency    time.Duration
	// Raw is the response body as received; nil for an offline transcriber.
	Raw []byte
	// AudioSeconds is the clip's duration when known, else 0.
	AudioSeconds float64
}

// String describes t without its text: the text's length and hash stand in
// for it.
func (t Transcript) String() string {
	return fmt.Sprintf("transcript(model=%s status=%d len=%d sha256=%s)", t.Model, t.StatusCode, len(t.Text), stet.SHA256Hex([]byte(t.Text))[:12])
}

// GoString prints the same description as String.
func (t Transcript) GoString() string { return t.String() }

// LogValue prints what a log line may carry: model, request ID, status,
// latency, duration, and the text's length and hash.
func (t Transcript) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("model", t.Model),
		slog.String("request_id", t.RequestID),
		slog.Int("status_code", t.StatusCode),
		slog.Int64("duration_ms", t.Latency.Milliseconds()),
		slog.Float64("audio_seconds", t.AudioSeconds),
		slog.Int("len", len(t.Text)),
		slog.String("sha256", stet.SHA256Hex([]byte(t.Text))),
	)
}

// The audio media types a source may deliver (docs/design.md §19).
const (
	WAV  = "audio/wav"
	MPEG = "audio/mpeg"
	OGG  = "audio/ogg"
	WebM = "audio/webm"
	MP4  = "audio/mp4"
)

// ContentTypes lists every accepted audio media type.
var ContentTypes = []string{WAV, MPEG, OGG, WebM, MP4}

// Codes of the *stet.ProcessorError values the checks here return, all of
// class unsupported: the same clip would fail the same way again, so a
// person looks at it and nothing is retried.
const (
	CodeUnsupportedMedia = "unsupported_media_type"
	CodeEmptyAudio       = "empty_audio"
	CodeEmptyTranscript  = "empty_transcript"
)

// ErrUnsupportedMedia is the cause of a CodeUnsupportedMedia error.
var ErrUnsupportedMedia = errors.New("audio content type is not one of " + strings.Join(ContentTypes, ", "))

// MediaType checks a clip before any call: it returns the clip's media type
// (one of ContentTypes; case and parameters such as "; codecs=1" are
// dropped), or an unsupported-class *stet.ProcessorError when the type is
// not accepted or the clip is empty.
func MediaType(a Audio) (string, error) {
	mt, _, err := mime.ParseMediaType(a.ContentType)
	if err != nil || !slices.Contains(ContentTypes, mt) {
		return "", &stet.ProcessorError{Class: stet.FailureUnsupported, Code: CodeUnsupportedMedia, Err: ErrUnsupportedMedia}
	}
	if len(a.Data) == 0 {
		return "", &stet.ProcessorError{Class: stet.FailureUnsupported, Code: CodeEmptyAudio, Err: errors.New("audio is empty")}
	}
	return mt, nil
}

// Unsupported returns an unsupported-class error with code and cause err,
// for a clip a transcriber cannot take (a WAV that is not PCM, a format an
// offline recognizer cannot read). err must not quote the audio.
func Unsupported(code string, err error) *stet.ProcessorError {
	return &stet.ProcessorError{Class: stet.FailureUnsupported, Code: code, Err: err}
}

// Complete returns t when it has text, or, when the text is empty or only
// whitespace, an unsupported-class error with CodeEmptyTranscript carrying
// t's status code and request ID: an empty transcript goes to a person
// (docs/design.md §19), it is not retried.
func Complete(t *Transcript) (*Transcript, error) {
	if strings.TrimSpace(t.Text) != "" {
		return t, nil
	}
	return nil, &stet.ProcessorError{
		Class: stet.FailureUnsupported, Code: CodeEmptyTranscript,
		StatusCode: t.StatusCode, RequestID: t.RequestID,
		Err: errors.New("transcript is empty"),
	}
}
