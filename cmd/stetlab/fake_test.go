package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet/webhook"
)

// stetlab fake openai serves the OpenAI fake and its control listener as
// a process would: it prints both addresses, scripts faults on request and
// counts what it received; it stops when its context ends.
func TestFakeOpenAI(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		code := run(ctx, []string{"fake", "openai", "--control", "127.0.0.1:0", "--api-key", "sk-test"}, pw, io.Discard)
		pw.Close()
		done <- code
	}()
	lines := bufio.NewScanner(pr)
	urls := map[string]string{}
	for len(urls) < 2 && lines.Scan() {
		if k, v, ok := strings.Cut(lines.Text(), " "); ok {
			urls[k] = strings.TrimSpace(v)
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if !strings.HasPrefix(urls["fake"], "http://127.0.0.1:") || !strings.HasPrefix(urls["control"], "http://127.0.0.1:") {
		t.Fatalf("printed addresses = %v", urls)
	}
	res, err := http.Post(urls["control"]+"/fault?kind=quota&n=2", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), "scripted 2 × quota") {
		t.Errorf("POST /fault = %d %q", res.StatusCode, b)
	}
	res, err = http.Get(urls["control"] + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	var stats map[string]int
	err = json.NewDecoder(res.Body).Decode(&stats)
	res.Body.Close()
	if err != nil || stats["chat_calls"] != 0 || len(stats) != 6 {
		t.Errorf("GET /stats = %v, %v; want six counters, no chat call", stats, err)
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("fake openai exited %d after its context ended, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fake openai did not stop when its context ended")
	}
	if code := run(context.Background(), []string{"fake", "anthropic"}, io.Discard, io.Discard); code != exitUsage {
		t.Errorf("fake anthropic = %d, want 2 (only openai is served)", code)
	}
}

// stetlab post sends one delivery signed as the source would, and prints
// the answer's status and body. Not parallel: t.Setenv.
func TestPostSignsTheDelivery(t *testing.T) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("stetlab-post-test-secret-0123456789"))
	t.Setenv("STET_SOURCE_SECRET", secret)
	v, err := webhook.NewVerifier([]string{secret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := v.Verify(r.Header, body); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		got = r.Header.Get("webhook-id") + " " + string(body)
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"job_id":"job_1"}`)
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(file, []byte(`{"external_id":"r1","revision":1,"text":"hello"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runInProcess(t, "post", "--url", srv.URL, "--id", "msg_1", file)
	if code != exitOK || stdout != `202 {"job_id":"job_1"}` {
		t.Fatalf("post = %d %q %q", code, stdout, stderr)
	}
	if got != `msg_1 {"external_id":"r1","revision":1,"text":"hello"}` {
		t.Errorf("the receiver got %q", got)
	}
	if code, _, _ := runInProcess(t, "post", "--url", srv.URL, file); code != exitUsage {
		t.Errorf("post without --id = %d, want 2", code)
	}
}
