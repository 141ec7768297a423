package pocketsphinx

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor/transcribe"
	"github.com/stetlabs/stet/processor/transcribe/transcribetest"
)

// samples are the quickstart's voice notes (examples/audio/samples).
var samples = []string{"note-001.wav", "note-002.wav", "note-003.wav"}

func sample(t testing.TB, name string) transcribe.Audio {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "audio", "samples", name))
	if err != nil {
		t.Fatalf("read sample: %v", err)
	}
	return transcribe.Audio{ContentType: transcribe.WAV, Data: data}
}

// missing skips a test whose recognizer is not installed, with one line
// naming the command that installs it, as web/env_test.go does for the
// browser tests. Under scripts/test.sh (STET_BROWSER_TESTS=require: its
// set-up has run) it fails instead, so CI cannot pass by skipping.
func missing(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("STET_BROWSER_TESTS") == "require" {
		t.Fatalf("pocketsphinx test dependency missing after set-up: %s", what)
	}
	t.Skipf("%s; install it with: %s", what, InstallCommand)
}

// installed returns a Client on Debian's recognizer and model, skipping
// (or, under CI, failing) the test when they are absent.
func installed(t testing.TB) *Client {
	t.Helper()
	c, err := New(Config{ID: "local-audio"})
	if errors.Is(err, ErrNotInstalled) {
		missing(t, "pocketsphinx is not installed")
	}
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return c
}

// stub returns a Client whose recognizer is binary (a stand-in such as
// /bin/true) and whose model files are empty placeholders: for the cases
// that never reach the recognizer or only need its exit status.
func stub(t *testing.T, binary string, maxSeconds float64) *Client {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "en-us")
	for _, p := range []string{filepath.Join(dir, "en-us"), filepath.Join(dir, "en-us.lm.bin"), filepath.Join(dir, "cmudict-en-us.dict")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(Config{ID: "stub", Binary: binary, ModelDir: dir, MaxSeconds: maxSeconds})
	if err != nil {
		t.Fatalf("New(stub %s) = %v", binary, err)
	}
	return c
}

func TestConformance(t *testing.T) {
	t.Parallel()
	transcribetest.Run(t, func(t *testing.T) transcribetest.Setup {
		return transcribetest.Setup{Transcriber: installed(t), Clip: sample(t, "note-001.wav")}
	})
}

// TestTranscribesSamples runs the recognizer on every quickstart sample.
// The synthetic voice is heard roughly, so only the presence of words is
// asserted, and the duration read from the WAV.
func TestTranscribesSamples(t *testing.T) {
	t.Parallel()
	c := installed(t)
	for _, name := range samples {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := sample(t, name)
			tr, err := c.Transcribe(t.Context(), a)
			if err != nil {
				t.Fatalf("Transcribe(%s) = %v", name, err)
			}
			if len(strings.Fields(tr.Text)) == 0 {
				t.Errorf("Transcribe(%s).Text is empty, want words", name)
			}
			// 16 kHz mono 16-bit after a 44-byte header.
			want := float64(len(a.Data)-44) / 32000
			if d := tr.AudioSeconds - want; d > 0.001 || d < -0.001 {
				t.Errorf("Transcribe(%s).AudioSeconds = %.3f, want %.3f", name, tr.AudioSeconds, want)
			}
			if tr.Model != "pocketsphinx-en-us" || tr.StatusCode != 0 || tr.RequestID != "" {
				t.Errorf("Transcribe(%s) = model %q status %d request %q, want pocketsphinx-en-us, 0, none", name, tr.Model, tr.StatusCode, tr.RequestID)
			}
		})
	}
}

// TestTranscribesAnyWAV re-encodes a sample as other rates, channel counts
// and encodings; each must still give words after the decoding and
// resampling done here.
func TestTranscribesAnyWAV(t *testing.T) {
	t.Parallel()
	c := installed(t)
	src, err := decodeWAV(sample(t, "note-001.wav").Data)
	if err != nil {
		t.Fatalf("decodeWAV(note-001) = %v", err)
	}
	for _, tc := range []struct {
		rate, channels int
		enc            encoding
	}{
		{44100, 2, pcm24},
		{48000, 1, float32LE},
		{22050, 2, pcm8},
		{32000, 6, extensible32},
		{11025, 1, pcm16LE},
	} {
		name := tc.enc.name + "/" + itoa(tc.rate) + "Hz/" + itoa(tc.channels) + "ch"
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data := encodeWAV(resample(src.samples, src.rate, tc.rate), tc.rate, tc.channels, tc.enc)
			tr, err := c.Transcribe(t.Context(), transcribe.Audio{ContentType: "audio/wav", Data: data})
			if err != nil {
				t.Fatalf("Transcribe(%s) = %v", name, err)
			}
			if len(strings.Fields(tr.Text)) == 0 {
				t.Errorf("Transcribe(%s).Text is empty, want words", name)
			}
			if d := tr.AudioSeconds - src.seconds(); d > 0.01 || d < -0.01 {
				t.Errorf("Transcribe(%s).AudioSeconds = %.3f, want %.3f", name, tr.AudioSeconds, src.seconds())
			}
		})
	}
}

func TestNewNamesTheInstallCommand(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{ID: "a", Binary: "stet-no-such-recognizer"},
		{ID: "b", Binary: "/bin/true", ModelDir: filepath.Join(t.TempDir(), "en-us")},
	} {
		_, err := New(cfg)
		if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), InstallCommand) {
			t.Errorf("New(%+v) = %v, want ErrNotInstalled naming %q", cfg, err, InstallCommand)
		}
	}
	for _, cfg := range []Config{{}, {ID: "x", Timeout: -time.Second}, {ID: "x", MaxSeconds: -1}} {
		if _, err := New(cfg); err == nil || errors.Is(err, ErrNotInstalled) {
			t.Errorf("New(%+v) = %v, want a config error", cfg, err)
		}
	}
}

func TestInfo(t *testing.T) {
	t.Parallel()
	got := stub(t, "/bin/true", 0).Info()
	if got.Kind != Kind || got.Region != "local" || got.Retention != "none" || !got.ZeroRetention || got.SendsTextOffHost || got.Model != "pocketsphinx-en-us" {
		t.Errorf("Info() = %+v, want kind pocketsphinx, region local, retention none, zero retention, nothing off host, model pocketsphinx-en-us", got)
	}
}

// TestRefusals covers what is refused before the recognizer runs and how
// its failures are classified, with stand-in binaries.
func TestRefusals(t *testing.T) {
	t.Parallel()
	note := sample(t, "note-001.wav")
	for _, tc := range []struct {
		name   string
		binary string
		max    float64
		audio  transcribe.Audio
		class  stet.FailureClass
		code   string
	}{
		{"mp3", "/bin/true", 0, transcribe.Audio{ContentType: transcribe.MPEG, Data: note.Data}, stet.FailureUnsupported, CodeNotWAV},
		{"webm", "/bin/true", 0, transcribe.Audio{ContentType: transcribe.WebM, Data: note.Data}, stet.FailureUnsupported, CodeNotWAV},
		{"flac", "/bin/true", 0, transcribe.Audio{ContentType: "audio/flac", Data: note.Data}, stet.FailureUnsupported, transcribe.CodeUnsupportedMedia},
		{"not a WAV", "/bin/true", 0, transcribe.Audio{ContentType: transcribe.WAV, Data: []byte("ID3\x04 pretending")}, stet.FailureUnsupported, CodeBadWAV},
		{"no samples", "/bin/true", 0, transcribe.Audio{ContentType: transcribe.WAV, Data: note.Data[:44]}, stet.FailureUnsupported, transcribe.CodeEmptyAudio},
		{"too long", "/bin/true", 1, note, stet.FailureUnsupported, CodeTooLong},
		{"nothing heard", "/bin/true", 0, note, stet.FailureUnsupported, transcribe.CodeEmptyTranscript},
		{"recognizer fails", "/bin/false", 0, note, stet.FailureTransient, CodeRunFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := stub(t, tc.binary, tc.max).Transcribe(t.Context(), tc.audio)
			var pe *stet.ProcessorError
			if !errors.As(err, &pe) || pe.Class != tc.class || pe.Code != tc.code {
				t.Errorf("Transcribe(%s) = %v, want class %s code %s", tc.name, err, tc.class, tc.code)
			}
		})
	}
}

// BenchmarkTranscribe measures the whole call (decode, resample, a
// recognizer run with its model load) as seconds of wall time per second
// of audio: on the quickstart notes (about 2.7 s each, so the model load
// weighs heavily) and on the three notes joined and repeated into one
// longer clip (about 25 s), which shows the rate at length.
func BenchmarkTranscribe(b *testing.B) {
	c := installed(b)
	var notes []transcribe.Audio
	var joined []float32
	for _, name := range samples {
		a := sample(b, name)
		notes = append(notes, a)
		cl, err := decodeWAV(a.Data)
		if err != nil {
			b.Fatal(err)
		}
		joined = append(joined, cl.samples...)
	}
	long := transcribe.Audio{ContentType: transcribe.WAV, Data: encodeWAV(slices.Concat(joined, joined, joined), modelRate, 1, pcm16LE)}
	for _, bc := range []struct {
		name  string
		clips []transcribe.Audio
	}{
		{"notes", notes},
		{"long", []transcribe.Audio{long}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var audio float64
			for i := 0; b.Loop(); i++ {
				tr, err := c.Transcribe(b.Context(), bc.clips[i%len(bc.clips)])
				if err != nil {
					b.Fatalf("Transcribe = %v", err)
				}
				audio += tr.AudioSeconds
			}
			b.ReportMetric(b.Elapsed().Seconds()/audio, "s/audio-s")
		})
	}
}

// BenchmarkPrepare measures the Go side alone: decoding a 44.1 kHz stereo
// 24-bit clip and resampling it to 16 kHz mono.
func BenchmarkPrepare(b *testing.B) {
	src, err := decodeWAV(sample(b, "note-001.wav").Data)
	if err != nil {
		b.Fatal(err)
	}
	data := encodeWAV(resample(src.samples, src.rate, 44100), 44100, 2, pcm24)
	for b.Loop() {
		cl, err := decodeWAV(data)
		if err != nil {
			b.Fatal(err)
		}
		_ = pcm16(resample(cl.samples, cl.rate, modelRate))
	}
	b.ReportMetric(b.Elapsed().Seconds()/(src.seconds()*float64(b.N)), "s/audio-s")
}
