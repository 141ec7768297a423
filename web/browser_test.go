package web_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/lab/stettest"
)

// A reviewer signs in, sees the queue, filters it, opens a record,
// overrides its category, sees it decided (and the API agrees), signs out,
// and is sent to the login page on the next visit.
func TestBrowserReviewFlow(t *testing.T) {
	e := newEnv(t, envOptions{})
	harass, _, manual := e.seed(t)
	ctx := browser(t, 1280)
	base := e.Server.URL

	login(t, ctx, base, stettest.ReviewerToken)
	if n := count(t, ctx, "tr[data-row]"); n != 3 {
		t.Fatalf("queue rows = %d, want 3", n)
	}
	if got := text(t, ctx, ".pagehead .meta"); !strings.Contains(got, "3 pending of 3") {
		t.Fatalf("queue counts = %q, want 3 pending of 3", got)
	}
	// The manual record is flagged with its failure class.
	if got := text(t, ctx, "span.badge.manual"); got != "manual · refusal" {
		t.Fatalf("manual flag = %q, want manual · refusal", got)
	}
	do(t, ctx,
		chromedp.SetValue(chromedp.CSS(`select[name="category"]`), "harassment"),
		chromedp.Click(chromedp.CSS(`form.filters button[type=submit]`)),
		chromedp.WaitReady(chromedp.CSS(`select[name="category"] option[value="harassment"][selected]`)),
	)
	if n := count(t, ctx, "tr[data-row]"); n != 1 {
		t.Fatalf("rows with category=harassment = %d, want 1", n)
	}
	if !strings.Contains(location(t, ctx), "category=harassment") {
		t.Fatalf("filter is not in the URL: %s", location(t, ctx))
	}
	// Open it, from the keyboard: j selects the first row, Enter opens.
	do(t, ctx,
		chromedp.WaitReady(chromedp.CSS(`html[data-keys="ready"]`)),
		chromedp.KeyEvent("j"),
		chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.CSS("form#decision")),
	)
	if loc := location(t, ctx); !strings.HasSuffix(loc, "/ui/review/"+harass) {
		t.Fatalf("opened %s, want the harassment record %s", loc, harass)
	}
	if got := text(t, ctx, "pre.text"); !strings.Contains(got, "You are an idiot") {
		t.Fatalf("document text = %q", got)
	}
	// Enums are choices: the category select offers the schema's values.
	if n := count(t, ctx, "#in-category option"); n != 8 { // "— choose —" and the 7 categories
		t.Fatalf("category options = %d, want 8", n)
	}
	// Category spam without the spam label breaks the schema's conditional
	// rules: the override is refused and the message sits beside labels.
	do(t, ctx,
		chromedp.SetValue(chromedp.CSS("#in-category"), "spam"),
		chromedp.SendKeys(chromedp.CSS("#note"), "reposted ad, not an insult"),
		chromedp.Click(chromedp.CSS(`button[data-key="o"]`)),
		chromedp.WaitVisible(chromedp.CSS("p.fielderr#e-labels")),
	)
	if got := text(t, ctx, "p.fielderr#e-labels"); !strings.Contains(got, "contain") {
		t.Fatalf("message beside labels = %q, want the validator's", got)
	}
	if n := count(t, ctx, `fieldset[aria-describedby~="e-labels"]`); n != 1 {
		t.Fatalf("labels fieldset described by its message = %d, want 1", n)
	}
	if e.apiRecord(t, harass).State != "pending" {
		t.Fatal("a refused override decided the record")
	}
	do(t, ctx,
		chromedp.Click(chromedp.CSS(`input[name="f.labels"][value="spam"]`)),
		chromedp.Click(chromedp.CSS(`button[data-key="o"]`)),
		chromedp.WaitVisible(chromedp.CSS("p.flash")),
	)
	if got := text(t, ctx, "p.flash"); got != "Decision recorded: override." {
		t.Fatalf("flash = %q", got)
	}
	if n := count(t, ctx, "form#decision"); n != 0 {
		t.Fatal("a decided record still shows the decision form")
	}
	rec := e.apiRecord(t, harass)
	if rec.State != "decided" || rec.Decision == nil || *rec.Decision != "override" || rec.DecidedBy != "token:reviewer" ||
		!strings.Contains(string(rec.Classification), `"category":"spam"`) || rec.Note != "reposted ad, not an insult" {
		t.Fatalf("GET /v1/review/%s = %+v %s", harass, rec, rec.Classification)
	}
	// Every view of the record's text is audited with the session's actor.
	if n := e.Count("audit_log", "actor = 'token:reviewer' AND action = 'review.read' AND object_id = $1", harass); n < 1 {
		t.Fatal("no review.read audit row for the record view")
	}
	if n := e.Count("audit_log", "actor = 'token:reviewer' AND action = 'review.decide.override' AND object_id = $1", harass); n != 1 {
		t.Fatalf("decision audit rows = %d, want 1", n)
	}
	// The manual record still needs a person; sign out.
	if e.apiRecord(t, manual).State != "pending" {
		t.Fatal("the manual record was decided too")
	}
	do(t, ctx,
		chromedp.Click(chromedp.CSS(`form[action="/ui/logout"] button`)),
		chromedp.WaitVisible(chromedp.CSS("#token")),
	)
	if n := e.Count("web_sessions", ""); n != 0 {
		t.Fatalf("web_sessions = %d after logout, want 0", n)
	}
	do(t, ctx, chromedp.Navigate(base+"/ui/review"), chromedp.WaitVisible(chromedp.CSS("#token")))
	if loc := location(t, ctx); !strings.Contains(loc, "/ui/login") {
		t.Fatalf("after logout /ui/review went to %s, want the login page", loc)
	}
	// GET / is the queue, which asks for a login again.
	do(t, ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
}

// After web.idle_timeout without a request the session is over: the next
// page is the login page, and a decision posted from a page opened before
// is not stored.
func TestBrowserIdleLogoff(t *testing.T) {
	clock := stet.NewManualClock(time.Now())
	e := newEnv(t, envOptions{clock: clock})
	harass, _, _ := e.seed(t)
	ctx := browser(t, 1280)
	base := e.Server.URL

	login(t, ctx, base, stettest.ReviewerToken)
	clock.Advance(14 * time.Minute)
	do(t, ctx, chromedp.Navigate(base+"/ui/review"), chromedp.WaitVisible(chromedp.CSS("table.queue"))) // still live: this touches it
	clock.Advance(16 * time.Minute)
	// The invariants job's session sweep may run first (it did in CI); it
	// must leave a just-idle session for its owner's request to end.
	if _, err := e.DB.SweepWebSessions(t.Context(), clock.Now()); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, chromedp.Navigate(base+"/ui/review"), chromedp.WaitVisible(chromedp.CSS("#token")))
	if got := text(t, ctx, "p.flash"); !strings.Contains(got, "inactivity") {
		t.Fatalf("login page says %q, want the idle logoff", got)
	}
	if n := e.Count("audit_log", "action = 'web.idle_logoff'"); n != 1 {
		t.Fatalf("idle logoff audit rows = %d, want 1", n)
	}

	// An expired session cannot decide.
	login(t, ctx, base, stettest.ReviewerToken)
	do(t, ctx, chromedp.Navigate(base+"/ui/review/"+harass), chromedp.WaitVisible(chromedp.CSS("form#decision")))
	clock.Advance(15*time.Minute + time.Second)
	do(t, ctx, chromedp.Click(chromedp.CSS(`button[data-key="a"]`)), chromedp.WaitVisible(chromedp.CSS("#token")))
	if rec := e.apiRecord(t, harass); rec.State != "pending" {
		t.Fatalf("a decision from an idle session was stored: %+v", rec)
	}
	if n := e.Count("audit_log", "action LIKE 'review.decide.%'"); n != 0 {
		t.Fatalf("decision audit rows = %d, want 0", n)
	}
	if n := e.Count("web_sessions", ""); n != 0 {
		t.Fatalf("web_sessions = %d, want 0 (both sessions ended)", n)
	}
}

// A decision POST without the session's CSRF token, or with another
// session's, is 403 and stores nothing.
func TestBrowserCSRF(t *testing.T) {
	e := newEnv(t, envOptions{})
	harass, _, _ := e.seed(t)
	base := e.Server.URL

	// Another session's token, from a second browser.
	other := browser(t, 1280)
	login(t, other, base, stettest.ReviewerToken)
	var foreign string
	do(t, other, chromedp.Navigate(base+"/ui/review/"+harass), chromedp.WaitVisible(chromedp.CSS("form#decision")),
		into(chromedp.Value(chromedp.CSS(`form#decision input[name="csrf"]`)), &foreign))
	if len(foreign) < 40 {
		t.Fatalf("csrf token %q looks wrong", foreign)
	}

	ctx := browser(t, 1280)
	login(t, ctx, base, stettest.ReviewerToken)
	for _, tc := range []struct{ name, js string }{
		{"missing", `document.querySelector('form#decision input[name="csrf"]').remove()`},
		{"foreign", `document.querySelector('form#decision input[name="csrf"]').value = ` + jsString(foreign)},
		{"empty", `document.querySelector('form#decision input[name="csrf"]').value = ""`},
	} {
		var status string
		do(t, ctx,
			chromedp.Navigate(base+"/ui/review/"+harass),
			chromedp.WaitVisible(chromedp.CSS("form#decision")),
			discard(chromedp.Evaluate[any](tc.js)),
			chromedp.Click(chromedp.CSS(`button[data-key="a"]`)),
			chromedp.WaitVisible(chromedp.CSS("section.errorpage")),
			into(chromedp.Text(chromedp.CSS("#err-h .code")), &status),
		)
		if status != "403" {
			t.Errorf("%s csrf: status %s, want 403", tc.name, status)
		}
		if rec := e.apiRecord(t, harass); rec.State != "pending" {
			t.Fatalf("%s csrf: the decision was stored: %+v", tc.name, rec)
		}
	}
	if n := e.Count("audit_log", "action = 'web.denied'"); n != 3 {
		t.Errorf("denied audit rows = %d, want 3", n)
	}
	// The session's own token works.
	do(t, ctx, chromedp.Navigate(base+"/ui/review/"+harass), chromedp.WaitVisible(chromedp.CSS("form#decision")),
		chromedp.Click(chromedp.CSS(`button[data-key="a"]`)), chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if rec := e.apiRecord(t, harass); rec.State != "decided" || *rec.Decision != "approve" {
		t.Fatalf("after a valid approve: %+v", rec)
	}
}

// Document text and model output holding <script> and <img onerror> are
// shown as text: no script runs.
func TestBrowserEscapesTextAndOutput(t *testing.T) {
	e := newEnv(t, envOptions{})
	id := e.record(t, stettest.SourceReports, "report-xss", xssText)
	ctx := browser(t, 1280)
	login(t, ctx, e.Server.URL, stettest.ReaderToken)
	do(t, ctx, chromedp.Navigate(e.Server.URL+"/ui/review/"+id), chromedp.WaitVisible(chromedp.CSS("pre.text")),
		chromedp.Sleep(300*time.Millisecond)) // give an injected onerror time to fire
	flag := get(t, ctx, chromedp.Evaluate[string](`String(window.__xss)`))
	if flag != "undefined" {
		t.Fatalf("window.__xss = %s: a script from the text or the output ran", flag)
	}
	if got := text(t, ctx, "pre.text"); !strings.Contains(got, "<script>window.__xss = 1</script>") || !strings.Contains(got, `onerror="window.__xss = 2"`) {
		t.Fatalf("document text shown as %q, want the markup as text", got)
	}
	if got := text(t, ctx, "dl.values"); !strings.Contains(got, "<script>window.__xss = 3</script>") {
		t.Fatalf("extraction shown as %q, want the model's markup as text", got)
	}
	if n := count(t, ctx, "main script, main img"); n != 0 {
		t.Fatalf("%d script or img elements in the page body", n)
	}
}

// A reader sees records but no decision form, and a decision POST from a
// reader's session is 403; another tenant's record is 404 in the UI too.
func TestBrowserReaderAndTenants(t *testing.T) {
	e := newEnv(t, envOptions{})
	harass, _, _ := e.seed(t)
	d := e.Deliver(stettest.SourceOther, stettest.MustID("other"), stettest.Report{ExternalID: "report-other", Revision: 1, Text: "Another tenant's post."})
	e.WaitJob(d.JobID, stet.JobCommitted)
	var job api.JobView
	if st, b := e.Do(http.MethodGet, "/v1/jobs/"+d.JobID, stettest.OtherToken, nil, &job); st != http.StatusOK || job.ReviewRecordID == nil {
		t.Fatalf("other tenant's job: %d %s", st, b)
	}
	foreign := *job.ReviewRecordID
	ctx := browser(t, 1280)
	base := e.Server.URL
	login(t, ctx, base, stettest.ReaderToken)
	if n := count(t, ctx, "tr[data-row]"); n != 3 {
		t.Fatalf("reader's queue rows = %d, want 3 (not the other tenant's)", n)
	}
	do(t, ctx, chromedp.Navigate(base+"/ui/review/"+harass), chromedp.WaitVisible(chromedp.CSS("dl.values")))
	if n := count(t, ctx, "form#decision, button[data-key]"); n != 0 {
		t.Fatal("a reader sees the decision form")
	}
	// Post the form a reviewer would, with the reader session's own token.
	status := get(t, ctx, chromedp.Evaluate[int](`(async () => {
		const body = new URLSearchParams({csrf: document.querySelector('input[name="csrf"]').value, decision: "reject"});
		const r = await fetch("/ui/review/`+harass+`/decision", {method: "POST", body});
		return r.status; })()`, chromedp.EvalAwaitPromise))
	if status != http.StatusForbidden {
		t.Fatalf("reader's decision POST = %d, want 403", status)
	}
	if rec := e.apiRecord(t, harass); rec.State != "pending" {
		t.Fatalf("a reader's decision was stored: %+v", rec)
	}
	var code string
	do(t, ctx, chromedp.Navigate(base+"/ui/review/"+foreign), chromedp.WaitVisible(chromedp.CSS("section.errorpage")),
		into(chromedp.Text(chromedp.CSS("#err-h .code")), &code))
	if code != "404" {
		t.Fatalf("another tenant's record: %s, want 404", code)
	}
	// Operator pages are not a reader's.
	do(t, ctx, chromedp.Navigate(base+"/ui/dispatch"), chromedp.WaitVisible(chromedp.CSS("section.errorpage")),
		into(chromedp.Text(chromedp.CSS("#err-h .code")), &code))
	if code != "403" {
		t.Fatalf("a reader's /ui/dispatch: %s, want 403", code)
	}
}

// An operator pauses and resumes their tenant's dispatch from the UI, with
// the API's scope rule: another tenant's scope is refused.
func TestBrowserDispatch(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := browser(t, 1280)
	base := e.Server.URL
	login(t, ctx, base, stettest.OperatorToken)
	do(t, ctx, chromedp.Navigate(base+"/ui/dispatch"), chromedp.WaitVisible(chromedp.CSS("#reason")),
		chromedp.SendKeys(chromedp.CSS("#reason"), "provider incident"),
		chromedp.Click(chromedp.CSS(`form[action="/ui/dispatch/pause"] button`)),
		chromedp.WaitVisible(chromedp.CSS("p.flash")))
	var pauses struct {
		Pauses []struct {
			Scope    string `json:"scope"`
			PausedBy string `json:"paused_by"`
		} `json:"pauses"`
	}
	e.Do(http.MethodGet, "/v1/dispatch", stettest.OperatorToken, nil, &pauses)
	if len(pauses.Pauses) != 1 || pauses.Pauses[0].Scope != "tenant:demo" || pauses.Pauses[0].PausedBy != "token:operator" {
		t.Fatalf("pauses = %+v, want tenant:demo by token:operator", pauses)
	}
	do(t, ctx, chromedp.SetValue(chromedp.CSS("#scope"), "tenant:other"), chromedp.SendKeys(chromedp.CSS("#reason"), "x"),
		chromedp.Click(chromedp.CSS(`form[action="/ui/dispatch/pause"] button`)), chromedp.WaitVisible(chromedp.CSS("p.alert")))
	if e.Count("dispatch_pauses", "scope = 'tenant:other'") != 0 {
		t.Fatal("an operator paused another tenant")
	}
	do(t, ctx, chromedp.Navigate(base+"/ui/dispatch"), chromedp.WaitVisible(chromedp.CSS(`form[action="/ui/dispatch/resume"] button`)),
		chromedp.Click(chromedp.CSS(`form[action="/ui/dispatch/resume"] button`)), chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if n := e.Count("dispatch_pauses", ""); n != 0 {
		t.Fatalf("pauses after resume = %d, want 0", n)
	}
	for _, page := range []string{"/ui/batches", "/ui/invariants"} {
		do(t, ctx, chromedp.Navigate(base+page), chromedp.WaitVisible(chromedp.CSS(".pagehead h1")))
	}
	var code string
	do(t, ctx, chromedp.Navigate(base+"/ui/deletions/del_x"), chromedp.WaitVisible(chromedp.CSS("section.errorpage")),
		into(chromedp.Text(chromedp.CSS("#err-h .code")), &code))
	if code != "404" {
		t.Fatalf("/ui/deletions/{id} before deletion lands: %s, want 404", code)
	}
}

func jsString(s string) string { return strconv.Quote(s) }
