package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/processor/openai/openaifake"
	"github.com/stetlabs/stet/web"
)

// The browser tests run the whole stet in-process (stettest: a real ledger
// on SQLite, or PostgreSQL when STET_TEST_DATABASE_URL is set; River; the
// pipeline; the API on a local listener) with the UI mounted, and drive
// Debian's chromium through chromedp. They do not call t.Parallel: one
// headless browser at a time is what a 2-core CI runner holds.

const (
	xssText   = `Patient asks about dosing. XSSMARK <script>window.__xss = 1</script><img src=x onerror="window.__xss = 2"> end.`
	xssOutput = `Model says <script>window.__xss = 3</script><img src=x onerror="window.__xss = 4">`
)

// respond is the fake model: harassment for a text with "idiot", the
// script-laden rationale for the XSS document, none otherwise.
func respond(req openaifake.Request) string {
	var all strings.Builder
	for _, m := range req.Messages {
		all.WriteString(m.Content)
	}
	text := all.String()
	out := map[string]any{"category": "none", "severity": "none", "action": "allow", "labels": []string{}, "rationale": "Nothing to act on."}
	switch {
	case strings.Contains(text, "idiot"):
		out = map[string]any{"category": "harassment", "severity": "medium", "action": "review", "labels": []string{"harassment"}, "rationale": "Insults another member."}
	case strings.Contains(text, "double it"):
		out = map[string]any{"category": "unsafe_medical_advice", "severity": "high", "action": "escalate", "labels": []string{"unsafe_medical_advice"}, "rationale": "Advises changing a prescribed dose."}
	case strings.Contains(text, "off, limited"):
		out = map[string]any{"category": "spam", "severity": "low", "action": "remove", "labels": []string{"spam"}, "rationale": "Advertises a pharmacy."}
	case strings.Contains(text, "XSSMARK"):
		out["rationale"] = xssOutput
	}
	b, _ := json.Marshal(out)
	return string(b)
}

type uiEnv struct {
	*stettest.Env
	UI *web.UI
}

type envOptions struct {
	clock *stet.ManualClock
	oidc  *web.OIDCConfig
}

func newEnv(t *testing.T, o envOptions) *uiEnv {
	t.Helper()
	ue := &uiEnv{}
	opts := stettest.Options{Clock: o.clock, FakeOptions: openaifake.Options{Respond: respond}}
	opts.MountUI = func(e *stettest.Env, s *api.Server) {
		cfg := web.Config{DB: e.DB, API: s, Clock: e.Clock, IdleTimeout: 15 * time.Minute, SessionMax: 12 * time.Hour}
		if o.oidc != nil {
			c := *o.oidc
			cfg.OIDC = &c
		}
		ui, err := web.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s.MountUI(ui)
		ue.UI = ui
	}
	ue.Env = stettest.New(t, opts)
	return ue
}

// record delivers a report, waits for its job to settle, and returns its
// review record's ID.
func (e *uiEnv) record(t *testing.T, source, ext, text string, states ...stet.JobState) string {
	t.Helper()
	d := e.Deliver(source, stettest.MustID(ext), stettest.Report{ExternalID: ext, Revision: 1, Text: text})
	if d.Status != http.StatusAccepted {
		t.Fatalf("deliver %s = %d %s", ext, d.Status, d.Body)
	}
	if len(states) == 0 {
		states = []stet.JobState{stet.JobCommitted}
	}
	e.WaitJob(d.JobID, states...)
	return e.Record(d.JobID).ID
}

// seed fills the queue: two extracted records (one harassment) and one
// manual record the model refused.
func (e *uiEnv) seed(t *testing.T) (harass, calm, manual string) {
	t.Helper()
	calm = e.record(t, stettest.SourceReports, "report-calm", "Thanks everyone for the advice on my recovery.")
	harass = e.record(t, stettest.SourceReports, "report-harass", "You are an idiot and everyone here knows it.")
	e.Fake.Enqueue(openaifake.Fault{Kind: openaifake.Refusal})
	manual = e.record(t, stettest.SourceReports, "report-refused", "A post the model will not classify.", stet.JobManual)
	return harass, calm, manual
}

// apiRecord reads a record through the JSON API.
func (e *uiEnv) apiRecord(t *testing.T, id string) api.RecordView {
	t.Helper()
	var r api.RecordView
	if st, b := e.Do(http.MethodGet, "/v1/review/"+id, stettest.OperatorToken, nil, &r); st != http.StatusOK {
		t.Fatalf("GET /v1/review/%s = %d %s", id, st, b)
	}
	return r
}

// chromium finds the browser: STET_CHROMIUM, else chromium on PATH.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("STET_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	missing(t, "Chromium is not on PATH (or set STET_CHROMIUM)")
	return ""
}

// missing skips a browser test whose dependency is absent, with one line
// naming the command that installs it and runs the test. Under
// scripts/test.sh (STET_BROWSER_TESTS=require) it fails instead: there the
// set-up has run, and a skip would hide a broken one.
func missing(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("STET_BROWSER_TESTS") == "require" {
		t.Fatalf("browser test dependency missing after set-up: %s", what)
	}
	t.Skipf("%s; scripts/test.sh installs it and runs this test", what)
}

// browser starts a fresh headless Chromium (its own profile folder) for the
// test, at width × 900.
func browser(t *testing.T, width int) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	// The first run starts the browser, which lives as long as ctx: no
	// timeout on it; each step below has its own.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if width < 500 { // narrower than a desktop window may be: a phone's viewport
		do(t, ctx, chromedp.EmulateViewport(int64(width), 844, chromedp.EmulateMobile))
	}
	return ctx
}

// into runs a that returns a value and stores it in dst.
func into[T any](a chromedp.Action[T], dst *T) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		v, err := a(ctx, tg)
		if err == nil {
			*dst = v
		}
		return chromedp.Void{}, err
	}
}

// discard runs a and drops its value.
func discard[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	var v T
	return into(a, &v)
}

func failBrowser(t *testing.T, ctx context.Context, err error) {
	t.Helper()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(dctx, chromedp.Location())
	html, _ := chromedp.Run(dctx, chromedp.OuterHTML(chromedp.CSS("main")))
	if len(html) > 3000 {
		html = html[:3000]
	}
	t.Fatalf("browser: %v\nat %s\n%s", err, loc, html)
}

// do runs steps with a 30 s limit, failing the test with the page's state.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		failBrowser(t, ctx, err)
	}
}

// get runs one action that returns a value.
func get[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	var v T
	do(t, ctx, into(a, &v))
	return v
}

// login signs in with token and waits for the queue.
func login(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	do(t, ctx,
		chromedp.Navigate(base+"/ui/login"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`form[action="/ui/login"] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS("main .pagehead h1")),
	)
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return get(t, ctx, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
}

func count(t *testing.T, ctx context.Context, sel string) int {
	t.Helper()
	return get(t, ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
}

func location(t *testing.T, ctx context.Context) string {
	t.Helper()
	return get(t, ctx, chromedp.Location())
}

// repoPath is a path under the repository root.
func repoPath(parts ...string) string {
	return filepath.Join(append([]string{stettest.RepoRoot()}, parts...)...)
}
