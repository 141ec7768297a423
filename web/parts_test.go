package web_test

import (
	"encoding/json"
	"html"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/lab/stettest"
	"github.com/stetlabs/stet/ledger"
)

// partsSeed is what a profile with parts (docs/design.md §16) leaves in the
// ledger: an extracted record whose job has two parts and whose every field
// names its part, and a manual record whose triage part failed for good.
type partsSeed struct {
	extracted, manual   string // record IDs
	triageJob, notesJob string
	model               string // the fake's model, as its attempts record it
}

// seedParts writes a profile with parts' columns directly: stettest
// configures no such profile, and the page reads only what the ledger
// holds. The parts' jobs are the jobs of two other reports, moved under
// the extracted record's job, so that they carry real attempts.
func (e *uiEnv) seedParts(t *testing.T) partsSeed {
	t.Helper()
	harass, calm, manual := e.seed(t)
	spam := e.record(t, stettest.SourceReports, "report-spam", "Visit www.cheap-meds.example for 90% off, limited time!!!")
	s := partsSeed{extracted: calm, manual: manual}
	var triage api.JobView
	if st, b := e.Do(http.MethodGet, "/v1/jobs/"+e.apiRecord(t, harass).JobID, stettest.OperatorToken, nil, &triage); st != http.StatusOK || len(triage.Attempts) == 0 {
		t.Fatalf("GET the triage job = %d %s, want it with its attempts", st, b)
	}
	s.triageJob, s.notesJob, s.model = triage.JobID, e.apiRecord(t, spam).JobID, triage.Attempts[0].Model
	parent := e.apiRecord(t, calm).JobID
	for part, job := range map[string]string{"triage": s.triageJob, "notes": s.notesJob} {
		if _, err := e.DB.Writer().Exec(`UPDATE jobs SET parent_job_id = (SELECT id FROM jobs WHERE public_id = $1), part_id = $2
			WHERE public_id = $3`, ledger.StoredID(parent), part, ledger.StoredID(job)); err != nil {
			t.Fatal(err)
		}
	}
	from := func(part string) stet.FieldSource {
		return stet.FieldSource{Part: part, Processor: "openai-fake", Model: s.model}
	}
	for _, r := range []struct {
		id, failed string
		prov       map[string]stet.FieldSource
	}{
		{calm, "", map[string]stet.FieldSource{"category": from("triage"), "severity": from("triage"), "action": from("triage"),
			"labels": from("notes"), "rationale": from("notes")}},
		{manual, "triage", map[string]stet.FieldSource{"labels": from("notes"), "rationale": from("notes")}},
	} {
		prov, err := json.Marshal(r.prov)
		if err != nil {
			t.Fatal(err)
		}
		var failed *string
		if r.failed != "" {
			failed = &r.failed
		}
		if _, err := e.DB.Writer().Exec(`UPDATE review_records SET provenance = $1, failed_part = $2 WHERE public_id = $3`,
			string(prov), failed, ledger.StoredID(r.id)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// The record page of a profile with parts names, beside each field, the
// processor, model and part it came from, in the decision form and in the
// read-only view; lists each part's job with its own attempts; and, on a
// manual record, says which part failed for good. The API answers the
// same job with its parts (and every answer is checked against the
// OpenAPI document).
func TestUIRecordShowsParts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.seedParts(t)
	if rec := e.apiRecord(t, s.manual); rec.FailedPart != "triage" || rec.Provenance["rationale"].Part != "notes" {
		t.Fatalf("GET /v1/review/%s: failed_part %q, provenance %v; want triage, rationale from notes", s.manual, rec.FailedPart, rec.Provenance)
	}
	var job api.JobView
	if st, b := e.Do(http.MethodGet, "/v1/jobs/"+e.apiRecord(t, s.extracted).JobID, stettest.OperatorToken, nil, &job); st != http.StatusOK ||
		len(job.Parts) != 2 || job.Parts[0].JobID != s.triageJob || job.Parts[0].ID != "triage" || len(job.Parts[0].Attempts) == 0 {
		t.Fatalf("GET the parts job = %d %s, want its two parts, triage first, with attempts", st, b)
	}

	caption := func(part string) string {
		return "from openai-fake (" + s.model + ") · part " + part
	}
	for _, token := range []string{stettest.ReviewerToken, stettest.ReaderToken} {
		c, _ := uiSession(t, e, token)
		page := c.get("/ui/review/" + s.extracted)
		if page.Status != http.StatusOK {
			t.Fatalf("GET /ui/review/%s as %s = %d", s.extracted, token, page.Status)
		}
		body := html.UnescapeString(page.Body)
		if token == stettest.ReviewerToken && !strings.Contains(body, `id="decision"`) {
			t.Errorf("a reviewer sees no decision form on the pending record")
		}
		if n := strings.Count(body, caption("triage")); n != 3 {
			t.Errorf("as %s: %q appears %d times, want once beside each of category, severity, action", token, caption("triage"), n)
		}
		if n := strings.Count(body, caption("notes")); n != 2 {
			t.Errorf("as %s: %q appears %d times, want once beside each of labels, rationale", token, caption("notes"), n)
		}
		for _, want := range []string{
			"<h3>Part triage", "job <span class=\"mono\">" + s.triageJob + "</span>", `aria-label="Attempts of part triage, oldest first"`,
			"<h3>Part notes", "job <span class=\"mono\">" + s.notesJob + "</span>", `aria-label="Attempts of part notes, oldest first"`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("as %s: the record page lacks %q", token, want)
			}
		}
		if strings.Contains(body, "failed for good") {
			t.Errorf("as %s: an extracted record says a part failed", token)
		}
	}

	c, _ := uiSession(t, e, stettest.ReviewerToken)
	page := c.get("/ui/review/" + s.manual)
	body := html.UnescapeString(page.Body)
	if page.Status != http.StatusOK || !strings.Contains(body, `<span class="badge manual">part triage failed</span>`) ||
		!strings.Contains(body, "Part <strong>triage</strong> failed for good") {
		t.Errorf("GET /ui/review/%s = %d, want the failed triage part named in a badge and above the fields", s.manual, page.Status)
	}
	if n := strings.Count(body, caption("notes")); n != 2 {
		t.Errorf("manual record: %q appears %d times, want beside labels and rationale", caption("notes"), n)
	}
	if n := strings.Count(body, caption("triage")); n != 0 {
		t.Errorf("manual record: %q appears %d times, want none (the part failed)", caption("triage"), n)
	}
}

// The parts records at 390 px, light and dark: each field's source is
// visible, the extracted record lists its two parts, the manual one names
// its failed part, nothing scrolls sideways, and axe-core finds no serious
// or critical violation.
func TestBrowserPartsRecord(t *testing.T) {
	src := axeSource(t)
	chromium(t)
	e := newEnv(t, envOptions{})
	s := e.seedParts(t)
	base := e.Server.URL
	ctx := browser(t, 390)
	login(t, ctx, base, stettest.ReviewerToken)
	for _, dark := range []bool{false, true} {
		mode := map[bool]string{false: "light", true: "dark"}[dark]
		do(t, ctx, colorScheme(dark))
		for _, p := range []struct{ name, id string }{{"extracted", s.extracted}, {"manual", s.manual}} {
			do(t, ctx, chromedp.Navigate(base+"/ui/review/"+p.id), chromedp.WaitVisible(chromedp.CSS("form#decision")))
			want := 5
			if p.name == "manual" {
				want = 2
				if got := text(t, ctx, "#failed-part"); !strings.Contains(got, "Part triage failed for good") {
					t.Errorf("%s %s: #failed-part = %q", p.name, mode, got)
				}
			}
			visible := get(t, ctx, chromedp.Evaluate[int](`[...document.querySelectorAll("form#decision .prov")].filter(p => p.offsetWidth > 0 && p.textContent.includes("from openai-fake")).length`))
			if visible != want {
				t.Errorf("%s %s: visible provenance captions = %d, want %d", p.name, mode, visible, want)
			}
			if n := count(t, ctx, `section[aria-labelledby="att-h"] h3`); p.name == "extracted" && n != 2 {
				t.Errorf("%s %s: part headings = %d, want 2", p.name, mode, n)
			}
			if n := get(t, ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth - document.documentElement.clientWidth`)); n > 0 {
				t.Errorf("%s %s: the record page scrolls sideways by %d px at 390 px", p.name, mode, n)
			}
			for _, v := range axe(t, ctx, src) {
				if v.Impact == "serious" || v.Impact == "critical" {
					t.Errorf("%s %s: %s %s: %s (%s nodes)", p.name, mode, v.Impact, v.ID, v.Help, strconv.Itoa(len(v.Nodes)))
				}
			}
		}
	}
}
