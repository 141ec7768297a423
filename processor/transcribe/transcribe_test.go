package transcribe

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stetlabs/stet"
)

func TestMediaType(t *testing.T) {
	t.Parallel()
	data := []byte("RIFF")
	for _, tc := range []struct {
		in   Audio
		want string
		code string
	}{
		{Audio{"audio/wav", data}, WAV, ""},
		{Audio{"Audio/MPEG", data}, MPEG, ""},
		{Audio{"audio/ogg; codecs=opus", data}, OGG, ""},
		{Audio{"audio/webm", data}, WebM, ""},
		{Audio{"audio/mp4", data}, MP4, ""},
		{Audio{"audio/x-wav", data}, "", CodeUnsupportedMedia},
		{Audio{"audio/flac", data}, "", CodeUnsupportedMedia},
		{Audio{"video/mp4", data}, "", CodeUnsupportedMedia},
		{Audio{"", data}, "", CodeUnsupportedMedia},
		{Audio{"audio/wav;;", data}, "", CodeUnsupportedMedia},
		{Audio{"audio/wav", nil}, "", CodeEmptyAudio},
	} {
		got, err := MediaType(tc.in)
		var pe *stet.ProcessorError
		switch {
		case tc.code == "" && (err != nil || got != tc.want):
			t.Errorf("MediaType(%q) = %q, %v; want %q", tc.in.ContentType, got, err, tc.want)
		case tc.code != "" && (!errors.As(err, &pe) || pe.Class != stet.FailureUnsupported || pe.Code != tc.code):
			t.Errorf("MediaType(%q) = %q, %v; want unsupported %s", tc.in.ContentType, got, err, tc.code)
		}
	}
}

func TestComplete(t *testing.T) {
	t.Parallel()
	if got, err := Complete(&Transcript{Text: "chest pain"}); err != nil || got.Text != "chest pain" {
		t.Errorf("Complete(words) = %v, %v; want the transcript", got, err)
	}
	_, err := Complete(&Transcript{Text: " \n\t", StatusCode: 200, RequestID: "req_1"})
	var pe *stet.ProcessorError
	if !errors.As(err, &pe) || pe.Class != stet.FailureUnsupported || pe.Code != CodeEmptyTranscript || pe.StatusCode != 200 || pe.RequestID != "req_1" {
		t.Errorf("Complete(blank) = %v, want unsupported %s with the status and request ID", err, CodeEmptyTranscript)
	}
}

// TestNeverPrints checks that printing or logging audio or a transcript
// shows sizes and hashes, never content.
func TestNeverPrints(t *testing.T) {
	t.Parallel()
	const secret = "Jane Roe has chest pain"
	a := Audio{ContentType: WAV, Data: []byte(secret)}
	tr := &Transcript{Text: secret, Model: "m"}
	var log bytes.Buffer
	slog.New(slog.NewJSONHandler(&log, nil)).Info("x", "audio", a, "transcript", tr, "value", *tr)
	for _, printed := range []string{
		fmt.Sprint(a), fmt.Sprintf("%+v", a), fmt.Sprintf("%#v", a),
		fmt.Sprint(tr), fmt.Sprintf("%+v", *tr), fmt.Sprintf("%#v", tr), fmt.Sprintf("%v", []*Transcript{tr}),
		log.String(),
	} {
		if strings.Contains(printed, "Jane") {
			t.Errorf("printed %q, want no content", printed)
		}
	}
	if !strings.Contains(log.String(), a.SHA256()) {
		t.Errorf("log %s, want the audio's SHA-256", log.String())
	}
}
