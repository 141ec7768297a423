package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stetlabs/stet/processor"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor/openai"
	"github.com/stetlabs/stet/processor/openai/openaifake"
)

// TestScripts runs the CLI scripts in testdata/script. Each gets a copy of
// the quickstart in $WORK/qs and the test secrets in its environment, and
// these commands beside testscript's own:
//
//	stet ARGS...        stet itself: the test binary as stet, through run
//	                    (TestMain registers it)
//	exits N CMD ARGS... CMD exits with status N
//	sqlite DB SQL       run one statement on the SQLite ledger DB
//	openai-fake FILE    start an OpenAI fake with one batch in flight;
//	                    replace @FAKE_URL@ in FILE by its URL, set $BATCH_ID
//	freeport VAR        set $VAR to a free loopback port
//	waitready URL       wait up to 30s for URL/readyz to answer 200
func TestScripts(t *testing.T) {
	t.Parallel()
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("testdata", "script"),
		Setup: func(env *testscript.Env) error {
			env.Setenv(envSourceSecret, testSecret)
			env.Setenv(envToken, testToken)
			env.Setenv(envOpenAIKey, testOpenAIKey)
			return copyDir(quickstartDir(), filepath.Join(env.WorkDir, "qs"), "stet-data")
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":       scriptExits,
			"openai-fake": scriptOpenAIFake,
			"sqlite":      scriptSQLite,
			"freeport":    scriptFreePort,
			"waitready":   scriptWaitReady,
		},
	})
}

// scriptExits runs "exits N CMD ARGS...": CMD must exit N. Its stdout and
// stderr are there for the next stdout and stderr commands.
func scriptExits(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 || neg {
		ts.Fatalf("usage: exits N CMD [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	err = ts.Exec(args[1], args[2:]...)
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		ts.Fatalf("%s: %v", strings.Join(args[1:], " "), err)
	}
	if code != want {
		ts.Fatalf("%s exited %d, want %d", strings.Join(args[1:], " "), code, want)
	}
}

func scriptOpenAIFake(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 || neg {
		ts.Fatalf("usage: openai-fake FILE")
	}
	f := openaifake.New(openaifake.Options{APIKey: testOpenAIKey, Batch: openaifake.BatchOptions{PollsToEnd: -1}})
	ts.Defer(f.Close)
	c, err := openai.New(openai.Config{Common: processor.Common{ID: "openai-fake", BaseURL: f.URL(), APIKey: testOpenAIKey, Model: "gpt-test", Region: "us", Retention: "30d"}})
	ts.Check(err)
	h, err := c.SubmitBatch(context.Background(), stet.BatchSubmit{BatchID: "bat_script", Items: []stet.BatchItem{{JobID: "job_1",
		Params: stet.ExtractParams{JobID: "job_1", Prompt: stet.NewText("Classify: hello"), SchemaName: "moderation_v1",
			Schema: json.RawMessage(`{"type":"object","properties":{"category":{"type":"string"}},"required":["category"],"additionalProperties":false}`)}}},
		BeforeCreate: func(context.Context, string) error { return nil }})
	ts.Check(err)
	path := ts.MkAbs(args[0])
	b, err := os.ReadFile(path)
	ts.Check(err)
	ts.Check(os.WriteFile(path, []byte(strings.ReplaceAll(string(b), "@FAKE_URL@", f.URL())), 0o600))
	ts.Setenv("BATCH_ID", h.ProviderID)
}

func scriptSQLite(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 || neg {
		ts.Fatalf("usage: sqlite DB SQL")
	}
	db, err := sql.Open("sqlite", "file:"+ts.MkAbs(args[0])+"?_pragma=busy_timeout(5000)")
	ts.Check(err)
	defer db.Close()
	_, err = db.Exec(args[1])
	ts.Check(err)
}

func scriptFreePort(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 || neg {
		ts.Fatalf("usage: freeport VAR")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	port := ln.Addr().(*net.TCPAddr).Port
	ts.Check(ln.Close())
	ts.Setenv(args[0], strconv.Itoa(port))
}

func scriptWaitReady(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 || neg {
		ts.Fatalf("usage: waitready URL")
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(args[0] + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	ts.Fatalf("%s/readyz did not answer 200 within 30s", args[0])
}
