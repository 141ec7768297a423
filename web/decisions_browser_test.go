package web_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
)

// An operator's day at 390 px: the queue shows every record's revision
// and a colour per decision (approve and reject differ); a decided record
// shows its decisions and a Reopen button (a reviewer sees none); reopening
// puts it back to pending, audited with the session's actor; a record of a
// profile with parts names the processor beside each field.
func TestBrowserReopenBadgesProvenance(t *testing.T) {
	e := newEnv(t, envOptions{})
	harass, calm, _ := e.seed(t)
	for id, d := range map[string]string{harass: "approve", calm: "reject"} {
		if st, b := e.Do(http.MethodPost, "/v1/review/"+id+"/decision", stettest.OperatorToken, map[string]string{"decision": d}, nil); st != http.StatusOK {
			t.Fatalf("%s %s = %d %s", d, id, st, b)
		}
	}
	if _, err := e.DB.Writer().Exec(`UPDATE review_records SET provenance = $1 WHERE public_id = $2`,
		`{"category":{"part":"triage","processor":"clinical-specialist","model":"spec-1"}}`, ledger.StoredID(calm)); err != nil {
		t.Fatal(err)
	}
	base := e.Server.URL
	ctx := browser(t, 390)
	login(t, ctx, base, stettest.OperatorToken)

	do(t, ctx, chromedp.Navigate(base+"/ui/review"), chromedp.WaitVisible(chromedp.CSS("table.queue")))
	if n := get(t, ctx, chromedp.Evaluate[int](`[...document.querySelectorAll("table.queue tbody td.num")].filter(td => td.offsetWidth > 0 && td.textContent.trim() === "1").length`)); n < 3 {
		t.Errorf("visible revision cells at 390 px = %d, want one per record (3)", n)
	}
	colour := func(sel string) string {
		return get(t, ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector("`+sel+`")).backgroundColor`))
	}
	if a, r := colour("table.queue .badge.d-approve"), colour("table.queue .badge.d-reject"); a == r || a == "" {
		t.Errorf("approve and reject badges are both %q, want distinct colours", a)
	}
	if n := get(t, ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth - document.documentElement.clientWidth`)); n > 0 {
		t.Errorf("the queue page scrolls sideways by %d px at 390 px", n)
	}

	do(t, ctx, chromedp.Navigate(base+"/ui/review/"+calm), chromedp.WaitVisible(chromedp.CSS("form#reopen")))
	if got := text(t, ctx, ".pagehead p.meta"); !strings.Contains(got, "after acceptance") {
		t.Errorf("record meta = %q, want the time to record", got)
	}
	if got := text(t, ctx, "dd .prov"); !strings.Contains(got, "from clinical-specialist (spec-1) · part triage") {
		t.Errorf("provenance beside category = %q", got)
	}
	if got := text(t, ctx, "#dec-h + .tablewrap tbody"); !strings.Contains(got, "reject") || !strings.Contains(got, "token:operator") {
		t.Errorf("decisions table = %q, want the reject by token:operator", got)
	}
	do(t, ctx,
		chromedp.SendKeys(chromedp.CSS("#reopen-reason"), "wrongly rejected"),
		chromedp.Click(chromedp.CSS(`form#reopen button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS("p.flash")),
	)
	if got := text(t, ctx, "p.flash"); !strings.Contains(got, "Reopened") {
		t.Errorf("flash = %q", got)
	}
	if rec := e.apiRecord(t, calm); rec.State != "pending" || len(rec.Decisions) != 1 {
		t.Errorf("after reopen: %s with %d decisions, want pending with 1", rec.State, len(rec.Decisions))
	}
	if n := e.Count("audit_log", "action = 'review.reopen' AND actor = 'token:operator' AND object_id = $1", calm); n != 1 {
		t.Errorf("review.reopen audit rows = %d, want 1", n)
	}

	// A reviewer decides but does not reopen.
	rctx := browser(t, 1280)
	login(t, rctx, base, stettest.ReviewerToken)
	do(t, rctx, chromedp.Navigate(base+"/ui/review/"+harass), chromedp.WaitVisible(chromedp.CSS("p.decided-by")))
	if n := count(t, rctx, "form#reopen"); n != 0 {
		t.Errorf("a reviewer sees %d Reopen forms, want 0", n)
	}
}
