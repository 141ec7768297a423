package main

import (
	"bytes"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/internal/crash"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/lab/testdb"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// audioBody is an audio report of the quickstart's sample note name.
func audioBody(t *testing.T, externalID, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(quickstartDir(), "..", "audio", "samples", name))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"external_id": externalID, "revision": 1,
		"audio": map[string]string{"content_type": "audio/wav", "data": base64.StdEncoding.EncodeToString(data)}})
	return b
}

// withAudio rewrites cfg so that its source takes audio under a policy
// that lets it leave for transcriber (a YAML list item under
// transcribers:), with the extra replacements, and returns the ledger as
// rewriteConfig does.
func withAudio(t *testing.T, cfg *e2eConfig, dialect ledger.Dialect, transcriber string, extra map[string]string) *sql.DB {
	t.Helper()
	return rewriteConfig(t, cfg, dialect, func(y string) string {
		for old, new := range extra {
			if !strings.Contains(y, old) {
				t.Fatalf("config lacks %q", old)
			}
			y = strings.Replace(y, old, new, 1)
		}
		for old, new := range map[string]string{
			"    mode: sync\n":                "    mode: sync\n    media: [text, audio]\n",
			"    processors: [openai-fake]\n": "    processors: [openai-fake]\n    transcribers: [audio]\n    audio: allow\n",
			// A transcription runs inside the stage's timeout: room for the
			// recognizer's model to load on a loaded machine.
			"  job_timeout: 2s\n  rescue_after: 3s\n": "  job_timeout: 30s\n  rescue_after: 40s\n",
		} {
			if !strings.Contains(y, old) {
				t.Fatalf("config lacks %q", old)
			}
			y = strings.Replace(y, old, new, 1)
		}
		return y + "transcribers:\n" + transcriber
	})
}

// waitRecord waits for the job's review record and returns the job.
func waitRecord(t *testing.T, p *stetProc, jobID string) api.JobView {
	t.Helper()
	var job api.JobView
	waitFor(t, 90*time.Second, "the record", p, func() bool {
		getJSON(t, p.base+"/v1/jobs/"+jobID, &job)
		return job.ReviewRecordID != nil
	})
	return job
}

// An audio report through the offline transcriber on the real binary, on
// each dialect: a source that takes text only answers 422 to audio; one
// that takes audio accepts it, pocketsphinx turns it into a non-empty
// transcript that becomes the revision's text, extraction then runs once,
// and the record exists; the audio is purged once transcribed; the same
// audio again is a duplicate with no new call; a deletion lists the
// transcriber's provider_retention task, closed by its retention none.
func TestAudioOfflineTranscriber(t *testing.T) {
	t.Parallel()
	for _, dialect := range testdb.Dialects() {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			fake := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
			t.Cleanup(fake.Close)
			cfg := writeConfig(t, t.TempDir(), fake.URL())

			p := startStet(t, cfg, nil)
			if status, _, err := postReport(p.base, "msg_audio_text_only", audioBody(t, "voice-0", "note-001.wav")); err != nil || status != http.StatusUnprocessableEntity {
				t.Errorf("audio to a text-only source = %d, %v; want 422", status, err)
			}
			p.kill()

			db := withAudio(t, cfg, dialect, "  - {id: audio, kind: pocketsphinx, region: local, retention: none}\n", map[string]string{
				"    retention: {text: 30d, artifacts: 365d}\n": "    retention: {text: 30d, artifacts: 365d, audio: 1d}\n",
			})
			p = startStet(t, cfg, nil)
			if db == nil {
				db = openLedgerRO(t, cfg.DBPath)
			}
			body := audioBody(t, "voice-1", "note-001.wav")
			status, in, err := postReport(p.base, "msg_audio_1", body)
			if err != nil || status != http.StatusAccepted {
				t.Fatalf("audio report = %d, %v; want 202", status, err)
			}
			job := waitRecord(t, p, in.JobID)
			if len(job.Attempts) != 2 || job.Attempts[0].Processor != "audio" || job.Attempts[0].Status != "succeeded" ||
				job.Attempts[1].Processor != "openai-fake" || job.Attempts[1].Status != "succeeded" {
				t.Errorf("attempts = %+v, want the transcriber's then the processor's, both succeeded", job.Attempts)
			}
			if n := fake.Calls(); n != 1 {
				t.Errorf("extraction calls = %d, want 1", n)
			}
			clip, _ := os.ReadFile(filepath.Join(quickstartDir(), "..", "audio", "samples", "note-001.wav"))
			if job.AudioSHA256 != stet.SHA256Hex(clip) || len(job.TranscriptSHA256) != 64 || job.Transcriber == nil ||
				job.Transcriber.Processor != "audio" || job.Attempts[0].InputSHA256 != job.AudioSHA256 {
				t.Errorf("job view: audio %s, transcript %s, transcriber %+v, first attempt's input %s; want the clip's SHA-256 on both, a transcript hash, audio",
					job.AudioSHA256, job.TranscriptSHA256, job.Transcriber, job.Attempts[0].InputSHA256)
			}
			var report api.ReportView
			getJSON(t, p.base+"/v1/reports/"+in.ReportID, &report)
			if len(report.Revisions) != 1 || report.Revisions[0].TranscriptSHA256 != job.TranscriptSHA256 || report.Revisions[0].Transcriber == nil {
				t.Errorf("report view revisions = %+v, want the transcript's hash and the transcriber", report.Revisions)
			}
			var transcriber, model string
			var textLen int
			if err := db.QueryRow(`SELECT transcriber_id, transcriber_model, LENGTH(text) FROM revisions WHERE transcript_sha256 IS NOT NULL`).
				Scan(&transcriber, &model, &textLen); err != nil || transcriber != "audio" || !strings.HasPrefix(model, "pocketsphinx-") || textLen == 0 {
				t.Errorf("transcribed revision = %q %q, %d bytes of text, %v; want audio, pocketsphinx-…, a non-empty transcript", transcriber, model, textLen, err)
			}
			if n := count(t, db, `SELECT COUNT(*) FROM revision_audio`); n != 1 {
				t.Errorf("audio rows after the transcript = %d, want 1 (kept a day)", n)
			}

			// The record page names the transcriber and plays the audio
			// it keeps; the audio route answers the clip.
			noFollow := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			_, session, _ := uiSignIn(t, noFollow, p.base, testToken)
			page := uiGet(t, p.base+"/ui/review/"+*job.ReviewRecordID, session)
			if !strings.Contains(string(page.body), "Transcribed from audio by") || !strings.Contains(string(page.body), "<audio controls") {
				t.Errorf("record page (%d) names no transcriber or has no player", page.status)
			}
			heard := uiGet(t, p.base+"/ui/review/"+*job.ReviewRecordID+"/audio", session)
			if heard.status != http.StatusOK || heard.contentType != "audio/wav" || !bytes.Equal(heard.body, clip) {
				t.Errorf("GET the record's audio = %d %s, %d bytes; want 200 audio/wav and the clip's %d bytes", heard.status, heard.contentType, len(heard.body), len(clip))
			}

			status, dup, err := postReport(p.base, "msg_audio_1_again", body)
			if err != nil || status != http.StatusOK || !dup.Duplicate || dup.JobID != in.JobID {
				t.Errorf("the same audio again = %d %+v, %v; want 200, a duplicate of %s", status, dup, err, in.JobID)
			}
			time.Sleep(300 * time.Millisecond)
			if n := count(t, db, `SELECT COUNT(*) FROM attempts`); n != 2 || fake.Calls() != 1 {
				t.Errorf("after the duplicate: %d attempts, %d extraction calls; want 2 and 1", n, fake.Calls())
			}

			var del api.DeletionView
			if st, b := call(t, http.MethodDelete, p.base+"/v1/reports/"+in.ReportID, "", nil); st != http.StatusAccepted || json.Unmarshal([]byte(b), &del) != nil {
				t.Fatalf("DELETE report = %d %s, want 202 and the deletion", st, b)
			}
			var task api.DeletionTaskView
			waitFor(t, 60*time.Second, "the transcriber's deletion task", p, func() bool {
				getJSON(t, p.base+"/v1/deletions/"+del.DeletionID, &del)
				for _, tk := range del.Tasks {
					if tk.Copy == "provider_retention:audio" {
						task = tk
					}
				}
				return task.State != "" && task.State != "pending"
			})
			if task.State != "done" {
				t.Errorf("task provider_retention:audio = %+v, want done (retention none)", task)
			}
			if n := count(t, db, `SELECT (SELECT COUNT(*) FROM revisions WHERE audio_sha256 IS NOT NULL OR transcript_sha256 IS NOT NULL OR text IS NOT NULL)
				+ (SELECT COUNT(*) FROM revision_audio)`); n != 0 {
				t.Errorf("revisions keeping audio or transcript, and clips, after the deletion = %d, want 0", n)
			}
		})
	}
}

// An audio report through openai-transcribe on the real binary, on each
// dialect: the first transcription call is rate-limited, the second
// answers, and extraction runs once on the minimized transcript; a SIGKILL
// right after the transcript is saved does not transcribe again.
func TestAudioCloudTranscriber(t *testing.T) {
	t.Parallel()
	for _, dialect := range testdb.Dialects() {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			fake := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
			t.Cleanup(fake.Close)
			const said = "Call me at jane.roe@example.com about the dull headache."
			fake.SetTranscript(func([]byte) string { return said })
			cfg := writeConfig(t, t.TempDir(), fake.URL())
			// The audio is kept a moment after its transcript, then swept.
			db := withAudio(t, cfg, dialect, fmt.Sprintf("  - {id: audio, kind: openai-transcribe, base_url: %q, api_key_env: %s, region: us, retention: 30d}\n",
				fake.URL(), envOpenAIKey), map[string]string{
				"    retention: {text: 30d, artifacts: 365d}\n": "    retention: {text: 30d, artifacts: 365d, audio: 5s}\n",
				"  rescue_after: 3s\n":                          "  rescue_after: 3s\n  sweep_interval: 300ms\n",
			})

			fake.EnqueueTranscription(openaifake.Fault{Kind: openaifake.RateLimit, RetryAfter: "1"})
			p := startStet(t, cfg, nil)
			status, in, err := postReport(p.base, "msg_cloud_1", audioBody(t, "voice-1", "note-002.wav"))
			if err != nil || status != http.StatusAccepted {
				t.Fatalf("audio report = %d, %v; want 202", status, err)
			}
			job := waitRecord(t, p, in.JobID)
			if n := fake.TranscriptionCalls(); n != 2 {
				t.Errorf("transcription calls = %d, want 2 (the 429, then the answer)", n)
			}
			if n := fake.Calls(); n != 1 {
				t.Errorf("extraction calls = %d, want 1", n)
			}
			if fake.CallsContaining("dull headache") != 1 || fake.CallsContaining("jane.roe@example.com") != 0 {
				t.Errorf("the extraction request does not carry the minimized transcript (%d with the words, %d with the address)",
					fake.CallsContaining("dull headache"), fake.CallsContaining("jane.roe@example.com"))
			}
			if len(job.Attempts) != 3 || job.Attempts[0].FailureClass != "rate_limited" || job.Attempts[1].Processor != "audio" {
				t.Errorf("attempts = %+v, want the 429, the transcription, the extraction", job.Attempts)
			}
			if db == nil {
				db = openLedgerRO(t, cfg.DBPath)
			}
			if n := count(t, db, `SELECT COUNT(*) FROM revision_audio WHERE purge_after IS NOT NULL`); n != 1 {
				t.Errorf("audio kept after its transcript = %d rows, want 1 (retention.audio 5s)", n)
			}
			waitFor(t, 30*time.Second, "the audio swept at the end of its retention", p, func() bool {
				return count(t, db, `SELECT COUNT(*) FROM revision_audio`) == 0
			})
			p.kill()

			p = startStet(t, cfg, map[string]string{"STET_CRASH_AT": crash.AfterTranscript})
			if status, in, err = postReport(p.base, "msg_cloud_2", audioBody(t, "voice-2", "note-003.wav")); err != nil || status != http.StatusAccepted {
				t.Fatalf("second audio report = %d, %v; want 202", status, err)
			}
			if st := p.waitExit(t, 60*time.Second); !killedBySIGKILL(st) {
				t.Fatalf("serve ended with %v, want SIGKILL at %s", st, crash.AfterTranscript)
			}
			if n := fake.TranscriptionCalls(); n != 3 {
				t.Fatalf("transcription calls before the restart = %d, want 3", n)
			}
			p = startStet(t, cfg, nil)
			waitRecord(t, p, in.JobID)
			if n := fake.TranscriptionCalls(); n != 3 {
				t.Errorf("transcription calls after the restart = %d, want 3: the saved transcript is not asked for again", n)
			}
			if n := fake.Calls(); n != 2 {
				t.Errorf("extraction calls = %d, want 2", n)
			}

			// An empty transcript goes to a person: manual, unsupported.
			fake.SetTranscript(func([]byte) string { return "  " })
			if status, in, err = postReport(p.base, "msg_cloud_3", audioBody(t, "voice-3", "note-001.wav")); err != nil || status != http.StatusAccepted {
				t.Fatalf("third audio report = %d, %v; want 202", status, err)
			}
			job = waitRecord(t, p, in.JobID)
			if job.State != "manual" || job.FailureClass != "unsupported" || fake.Calls() != 2 {
				t.Errorf("empty transcript: job %s %s, %d extraction calls; want manual, unsupported, still 2", job.State, job.FailureClass, fake.Calls())
			}

			// No transcript word reaches a log line.
			for i := 1; i <= cfg.starts; i++ {
				logs, _ := os.ReadFile(filepath.Join(cfg.Dir, fmt.Sprintf("serve-%d.stderr", i)))
				for _, w := range []string{"headache", "jane.roe", "example.com"} {
					if strings.Contains(string(logs), w) {
						t.Errorf("serve-%d.stderr carries %q from the transcript", i, w)
					}
				}
			}
		})
	}
}

// The audio example runs offline as the quickstart does: each voice note
// is accepted as an audio report, transcribed on this machine by
// pocketsphinx into a non-empty transcript, extracted by the rules
// processor, and gets a review record; stet check is clean.
func TestAudioExample(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	examples := filepath.Join(stettest.RepoRoot(), "examples")
	copyTree(t, filepath.Join(examples, "quickstart"), filepath.Join(root, "quickstart"), "stet-data")
	copyTree(t, filepath.Join(examples, "audio"), filepath.Join(root, "audio"), "stet-data")
	dir := filepath.Join(root, "audio")
	code, out, stderr := runInProcess(t, "quickstart", "--once", "--dir", dir, "--listen", "127.0.0.1:0")
	if code != exitOK || !strings.Contains(out, "review queue (3 records)") {
		t.Fatalf("quickstart --dir examples/audio = %d\n%s\n%s", code, out, stderr)
	}
	db := openLedgerRO(t, filepath.Join(dir, "stet-data", "stet.db"))
	if n := count(t, db, `SELECT COUNT(*) FROM revisions WHERE transcriber_id = 'local-audio' AND transcript_sha256 IS NOT NULL
		AND LENGTH(text) > 0`); n != 3 {
		t.Errorf("transcribed revisions = %d, want 3", n)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM review_records`); n != 3 {
		t.Errorf("review records = %d, want 3", n)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM revision_audio`); n != 0 {
		t.Errorf("clips kept = %d, want 0: without retention.audio the audio is purged once transcribed", n)
	}
	if code, out, stderr := runInProcess(t, "check", "--config", filepath.Join(dir, "stet.yaml")); code != exitOK {
		t.Errorf("stet check = %d\n%s\n%s", code, out, stderr)
	}
}

// The audio example with encryption on and the audio kept a day: the
// stored audio and the transcripts are sealed, and no run of the audio's
// base64 is in the database file or its WAL.
func TestAudioEncrypted(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	examples := filepath.Join(stettest.RepoRoot(), "examples")
	copyTree(t, filepath.Join(examples, "quickstart"), filepath.Join(root, "quickstart"), "stet-data")
	copyTree(t, filepath.Join(examples, "audio"), filepath.Join(root, "audio"), "stet-data")
	dir := filepath.Join(root, "audio")
	cfg := filepath.Join(dir, "stet.yaml")
	y, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kept := strings.Replace(string(y), "    retention: {text: 30d, artifacts: 365d}\n", "    retention: {text: 30d, artifacts: 365d, audio: 1d}\n", 1)
	if kept == string(y) {
		t.Fatal("the example's policy retention line moved")
	}
	kept += "encryption:\n  keys:\n    - {id: k1, key_env: " + envKeyK1 + "}\n"
	if err := os.WriteFile(cfg, []byte(kept), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := runInProcess(t, "quickstart", "--once", "--dir", dir, "--listen", "127.0.0.1:0"); code != exitOK || !strings.Contains(out, "review queue (3 records)") {
		t.Fatalf("quickstart --dir examples/audio, encrypted = %d\n%s\n%s", code, out, stderr)
	}
	data := filepath.Join(dir, "stet-data", "stet.db")
	db := openLedgerRO(t, data)
	if n := count(t, db, `SELECT COUNT(*) FROM revision_audio WHERE sealed = 1 AND data LIKE 'stet:v1:%'`); n != 3 {
		t.Errorf("sealed audio rows = %d, want 3 (kept a day)", n)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM revisions WHERE transcript_sha256 IS NOT NULL AND text LIKE 'stet:v1:%'`); n != 3 {
		t.Errorf("sealed transcripts = %d, want 3", n)
	}
	clip, _ := os.ReadFile(filepath.Join(dir, "samples", "note-001.wav"))
	run := base64.StdEncoding.EncodeToString(clip)[4000:4100]
	for _, f := range []string{data, data + "-wal"} {
		b, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if strings.Contains(string(b), run) {
			t.Errorf("%s holds the audio in the clear", filepath.Base(f))
		}
	}
}

// A transcriber whose retention answer is pending never hears audio: the
// job is blocked naming it and the reason, and no call is made.
func TestAudioPendingTranscriberBlocks(t *testing.T) {
	t.Parallel()
	fake := openaifake.New(openaifake.Options{APIKey: testOpenAIKey})
	t.Cleanup(fake.Close)
	cfg := writeConfig(t, t.TempDir(), fake.URL())
	withAudio(t, cfg, ledger.SQLite, fmt.Sprintf("  - {id: audio, kind: openai-transcribe, base_url: %q, api_key_env: %s, region: us, retention: pending}\n",
		fake.URL(), envOpenAIKey), nil)
	p := startStet(t, cfg, nil)
	status, in, err := postReport(p.base, "msg_pending_audio", audioBody(t, "voice-1", "note-001.wav"))
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("audio report = %d, %v; want 202", status, err)
	}
	var job api.JobView
	waitFor(t, 30*time.Second, "the job blocked", p, func() bool {
		getJSON(t, p.base+"/v1/jobs/"+in.JobID, &job)
		return job.State == "blocked"
	})
	if job.BlockedReason == nil || *job.BlockedReason != "audio:pending:retention" || job.FailureClass != "boundary" {
		t.Errorf("blocked job: reason %v, class %s; want audio:pending:retention, boundary", job.BlockedReason, job.FailureClass)
	}
	if n, m := fake.TranscriptionCalls(), fake.Calls(); n != 0 || m != 0 {
		t.Errorf("calls = %d transcription, %d extraction; want 0 and 0", n, m)
	}
}

type uiPage struct {
	status      int
	contentType string
	body        []byte
}

// uiGet reads a review UI page or asset with a session cookie.
func uiGet(t *testing.T, url string, session *http.Cookie) uiPage {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.AddCookie(session)
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return uiPage{res.StatusCode, res.Header.Get("Content-Type"), b}
}
