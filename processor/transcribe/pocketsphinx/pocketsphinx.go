// Package pocketsphinx is stet's offline transcriber (docs/design.md §19):
// it runs Debian's CMU PocketSphinx recognizer (pocketsphinx_continuous,
// package pocketsphinx) with its US English model (package
// pocketsphinx-en-us) on this host. It is the embedded default for audio,
// as processor/rules is for text: region local, retention none.
//
// It reads WAV clips of any common encoding, rate and channel count,
// decodes and mixes them to mono and resamples them to the model's 16 kHz
// here, in Go, and pipes the raw samples to the recognizer's standard
// input: no copy of the audio is written to disk. The recognizer's log goes
// to /dev/null and its standard error is discarded, since either may echo
// words it heard; nothing it prints may reach an error or a log.
package pocketsphinx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/transcribe"
)

// Kind is the transcriber kind this package implements.
const Kind = "pocketsphinx"

// Defaults, as Debian 12's packages install them.
const (
	DefaultBinary   = "pocketsphinx_continuous"
	DefaultModelDir = "/usr/share/pocketsphinx/model/en-us"
	// DefaultTimeout bounds one run when Config.Timeout is zero; the
	// recognizer runs several times faster than real time, so this is
	// minutes of audio.
	DefaultTimeout = 5 * time.Minute
	// DefaultMaxSeconds is the longest clip accepted when
	// Config.MaxSeconds is zero: 30 minutes.
	DefaultMaxSeconds = 30 * 60
)

// InstallCommand installs the recognizer and its model on Debian.
const InstallCommand = "apt-get install -y --no-install-recommends pocketsphinx pocketsphinx-en-us"

// ErrNotInstalled is the cause of New's error when the recognizer binary
// or a model file is missing; the error names InstallCommand.
var ErrNotInstalled = errors.New("pocketsphinx is not installed")

// Codes of the *stet.ProcessorError values Transcribe returns, besides
// those of package transcribe.
const (
	// CodeNotWAV: a content type the recognizer cannot read (it takes WAV
	// only). Class unsupported.
	CodeNotWAV = "unsupported_audio_format"
	// CodeBadWAV: a WAV file that is not one, or of an encoding this
	// package does not decode. Class unsupported.
	CodeBadWAV = "unsupported_wav"
	// CodeTooLong: a clip longer than Config.MaxSeconds. Class unsupported.
	CodeTooLong = "audio_too_long"
	// CodeInterrupted: ctx ended or the run timed out. Class transient.
	CodeInterrupted = "interrupted"
	// CodeRunFailed: the recognizer could not start or exited with an
	// error. Class transient: the stage attempt may run again.
	CodeRunFailed = "run_failed"
)

// Config configures a Client.
type Config struct {
	// ID is the configured transcriber ID ("local-audio").
	ID string
	// Binary is the recognizer: a name looked up on PATH or a path;
	// DefaultBinary when empty.
	Binary string
	// ModelDir holds the model as Debian's pocketsphinx-en-us lays it out:
	// the acoustic model in NAME/, the language model NAME.lm.bin and the
	// dictionary cmudict-NAME.dict, where NAME is the directory's own name.
	// DefaultModelDir when empty. HMM, LM and Dict override each path.
	ModelDir      string
	HMM, LM, Dict string
	// Timeout bounds one run; DefaultTimeout when zero.
	Timeout time.Duration
	// MaxSeconds is the longest clip accepted; DefaultMaxSeconds when
	// zero.
	MaxSeconds float64
}

// Client is a transcribe.Transcriber that runs the recognizer once per
// call. It is immutable after New and safe for concurrent use; each call
// is its own process, so concurrent calls take a core each.
type Client struct {
	id         string
	model      string
	binary     string
	args       []string
	timeout    time.Duration
	maxSeconds float64
}

var _ transcribe.Transcriber = (*Client)(nil)

// New checks that the recognizer and its model files are installed and
// returns a Client. A missing one is an error wrapping ErrNotInstalled
// that names InstallCommand.
func New(cfg Config) (*Client, error) {
	if cfg.ID == "" {
		return nil, errors.New("pocketsphinx: config: id is required")
	}
	if cfg.Timeout < 0 || cfg.MaxSeconds < 0 {
		return nil, fmt.Errorf("pocketsphinx: config %s: timeout and max_seconds must not be negative", cfg.ID)
	}
	bin := cfg.Binary
	if bin == "" {
		bin = DefaultBinary
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("pocketsphinx: config %s: recognizer %s not found: %w; install it with: %s", cfg.ID, bin, ErrNotInstalled, InstallCommand)
	}
	dir := cfg.ModelDir
	if dir == "" {
		dir = DefaultModelDir
	}
	name := filepath.Base(dir)
	files := []struct{ flag, path string }{
		{"-hmm", orDefault(cfg.HMM, filepath.Join(dir, name))},
		{"-lm", orDefault(cfg.LM, filepath.Join(dir, name+".lm.bin"))},
		{"-dict", orDefault(cfg.Dict, filepath.Join(dir, "cmudict-"+name+".dict"))},
	}
	args := []string{"-infile", "/dev/stdin", "-samprate", fmt.Sprint(modelRate), "-logfn", os.DevNull}
	for _, f := range files {
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("pocketsphinx: config %s: model file %s: %w; install it with: %s", cfg.ID, f.path, ErrNotInstalled, InstallCommand)
		}
		args = append(args, f.flag, f.path)
	}
	return &Client{
		id:         cfg.ID,
		model:      "pocketsphinx-" + name,
		binary:     path,
		args:       args,
		timeout:    orDefault(cfg.Timeout, DefaultTimeout),
		maxSeconds: orDefault(cfg.MaxSeconds, DefaultMaxSeconds),
	}, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Info declares the transcriber's boundary: local, nothing retained, no
// audio or text leaves the host.
func (c *Client) Info() stet.ProcessorInfo {
	return stet.ProcessorInfo{
		ID:               c.id,
		Kind:             Kind,
		Model:            c.model,
		Region:           "local",
		Retention:        "none",
		ZeroRetention:    true,
		Subprocessors:    []string{},
		Capabilities:     []string{"sync", "transcribe"},
		SendsTextOffHost: false,
	}
}

var errRunTimeout = errors.New("pocketsphinx run timed out")

// maxOutput bounds what is read of the recognizer's standard output: far
// more than the words of MaxSeconds of speech.
const maxOutput = 4 << 20

// Transcribe decodes a (WAV only), resamples it to 16 kHz mono and runs
// the recognizer on it. Every error is a *stet.ProcessorError.
func (c *Client) Transcribe(ctx context.Context, a transcribe.Audio) (*transcribe.Transcript, error) {
	start := time.Now()
	if ctx.Err() != nil {
		return nil, &stet.ProcessorError{Class: stet.FailureTransient, Code: CodeInterrupted,
			Err: fmt.Errorf("pocketsphinx run not started: %w", context.Cause(ctx))}
	}
	mt, err := transcribe.MediaType(a)
	if err != nil {
		return nil, err
	}
	if mt != transcribe.WAV {
		return nil, transcribe.Unsupported(CodeNotWAV, errors.New("pocketsphinx reads WAV only"))
	}
	cl, err := decodeWAV(a.Data)
	switch {
	case err != nil:
		return nil, transcribe.Unsupported(CodeBadWAV, err)
	case len(cl.samples) == 0:
		return nil, transcribe.Unsupported(transcribe.CodeEmptyAudio, errors.New("WAV file holds no samples"))
	case cl.seconds() > c.maxSeconds:
		return nil, transcribe.Unsupported(CodeTooLong, fmt.Errorf("clip is %.0f s, over the limit of %.0f s", cl.seconds(), c.maxSeconds))
	}
	pcm := pcm16(resample(cl.samples, cl.rate, modelRate))

	callCtx, cancel := context.WithTimeoutCause(ctx, c.timeout, errRunTimeout)
	defer cancel()
	out := &cappedBuffer{max: maxOutput}
	cmd := exec.CommandContext(callCtx, c.binary, c.args...)
	cmd.Stdin = bytes.NewReader(pcm)
	cmd.Stdout = out
	cmd.Stderr = nil // discarded: it may echo what was heard
	cmd.Env = []string{}
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Run(); err != nil {
		if ierr, ok := processor.Interrupted(ctx, callCtx, Kind, err); ok {
			return nil, &stet.ProcessorError{Class: stet.FailureTransient, Code: CodeInterrupted, Err: ierr}
		}
		return nil, &stet.ProcessorError{Class: stet.FailureTransient, Code: CodeRunFailed, Err: fmt.Errorf("run %s: %w", filepath.Base(c.binary), err)}
	}
	if out.over {
		return nil, &stet.ProcessorError{Class: stet.FailureTransient, Code: CodeRunFailed, Err: errors.New("recognizer output over the size limit")}
	}
	// One line per utterance the recognizer found.
	return transcribe.Complete(&transcribe.Transcript{
		Text:         strings.Join(strings.Fields(out.String()), " "),
		Model:        c.model,
		Latency:      time.Since(start),
		AudioSeconds: cl.seconds(),
	})
}

// cappedBuffer keeps the first max bytes written to it and notes whether
// more came; it never fails a write, so the recognizer is never cut off
// mid-run by a broken pipe.
type cappedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); len(p) > room {
		b.over = true
		b.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.Buffer.Write(p)
}
