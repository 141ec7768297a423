package openai

// The transcriber of kind openai-transcribe (docs/design.md §19):
// /v1/audio/transcriptions through the official SDK, for OpenAI and Azure
// OpenAI. One provider, two endpoints: it shares this package's request
// options, answer recording and failure classification with the chat
// processor. It must never put the audio, the transcript or the provider's
// error message into an error string or a log: the message may quote the
// transcript. Its fake is the transcription route of openaifake.

import (
	"bytes"
	"context"
	"errors"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/transcribe"
)

// TranscribeKind is the transcriber kind Transcriber implements.
const TranscribeKind = "openai-transcribe"

// DefaultTranscribeModel is the model used when TranscriberConfig.Model is
// empty.
const DefaultTranscribeModel = "gpt-4o-mini-transcribe"

// DefaultTranscribeTimeout bounds one call when TranscriberConfig.Timeout
// is zero. Transcribing
// takes longer than a chat answer: the audio goes up and the model hears
// all of it.
const DefaultTranscribeTimeout = 120 * time.Second

var errTranscribeTimeout = errors.New("openai-transcribe call timed out")

// TranscriberConfig configures a Transcriber: Config's fields (BaseURL
// defaults to DefaultBaseURL, Model to DefaultTranscribeModel; on Azure,
// Model names the deployment and requests go to
// /openai/deployments/MODEL/audio/transcriptions) and the clip's language.
type TranscriberConfig struct {
	Config
	// Language, when set, is the clip's language as ISO-639-1 ("en"),
	// which the API says improves accuracy and latency.
	Language string
}

// Transcriber is a transcribe.Transcriber backed by
// /v1/audio/transcriptions, on the same wire rules as Client. It is safe for
// concurrent use.
type Transcriber struct {
	info     stet.ProcessorInfo
	model    string
	language string
	timeout  time.Duration
	svc      sdk.AudioTranscriptionService
	now      func() time.Time // for Retry-After HTTP-dates
}

var _ transcribe.Transcriber = (*Transcriber)(nil)

// NewTranscriber returns a Transcriber for cfg. It makes no network call.
func NewTranscriber(cfg TranscriberConfig) (*Transcriber, error) {
	if cfg.Model == "" {
		cfg.Model = DefaultTranscribeModel
	}
	if err := cfg.CheckModel(TranscribeKind); err != nil {
		return nil, err
	}
	base, _, err := cfg.ParseBaseURL(TranscribeKind, DefaultBaseURL)
	if err != nil {
		return nil, err
	}

	info := cfg.Info(TranscribeKind)
	info.Capabilities = []string{"sync", "transcribe"}
	return &Transcriber{
		info:     info,
		model:    cfg.Model,
		language: cfg.Language,
		timeout:  cfg.TimeoutOr(DefaultTranscribeTimeout),
		svc:      sdk.NewAudioTranscriptionService(requestOptions(cfg.Config, base)...),
		now:      time.Now,
	}, nil
}

// Info declares the transcriber's identity and data boundary.
func (c *Transcriber) Info() stet.ProcessorInfo { return processor.CopyInfo(c.info) }

// Transcribe sends one transcription request (response_format json) and
// returns the text. Every error is a *stet.ProcessorError.
func (c *Transcriber) Transcribe(ctx context.Context, a transcribe.Audio) (*transcribe.Transcript, error) {
	mt, err := transcribe.MediaType(a)
	if err != nil {
		return nil, err
	}
	params := sdk.AudioTranscriptionNewParams{
		// The API tells the format by the file name's extension.
		File:           sdk.File(bytes.NewReader(a.Data), "audio."+transcribeExtensions[mt], mt),
		Model:          sdk.AudioModel(c.model),
		ResponseFormat: sdk.AudioResponseFormatJSON,
	}
	if c.language != "" {
		params.Language = sdk.String(c.language)
	}

	callCtx, cancel := context.WithTimeoutCause(ctx, c.timeout, errTranscribeTimeout)
	defer cancel()
	var capt capture
	start := time.Now()
	resp, err := c.svc.New(callCtx, params, option.WithMiddleware(recordInto(&capt)))
	latency := time.Since(start)
	if err != nil {
		return nil, classify(ctx, callCtx, err, &capt, c.now())
	}
	if resp == nil || !resp.JSON.Text.Valid() {
		// Not a transcription at all: a server fault, not the clip's.
		return nil, capt.Fail(stet.FailureTransient, "", errors.New("response has no text"))
	}
	t := &transcribe.Transcript{
		Text:       resp.Text,
		Model:      c.model,
		RequestID:  capt.RequestID,
		StatusCode: capt.Status,
		Latency:    latency,
		Raw:        capt.Raw,
	}
	if resp.Usage.Type == "duration" {
		// whisper-1 bills by the second and says how many it heard.
		t.AudioSeconds = resp.Usage.Seconds
	}
	return transcribe.Complete(t)
}

// transcribeExtensions names the file extension the API reads each media type by.
var transcribeExtensions = map[string]string{
	transcribe.WAV:  "wav",
	transcribe.MPEG: "mp3",
	transcribe.OGG:  "ogg",
	transcribe.WebM: "webm",
	transcribe.MP4:  "m4a",
}
