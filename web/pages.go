package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/ledger"
)

func (u *UI) view(s *Session, title, nav string, page any) view {
	return view{Title: title, Nav: nav, S: s, CSRF: s.csrf, Page: page}
}

// audit records a read of the UI with the session's actor through the
// API's helper (api.Server.Audit): one row per object ID, or one with no
// object when none is given. It fails closed like the API's: a read that
// cannot be audited is not shown.
func (u *UI) audit(w http.ResponseWriter, r *http.Request, s *Session, action, objectType string, objectIDs ...string) bool {
	if len(objectIDs) == 0 {
		objectIDs = []string{""}
	}
	events := make([]api.AuditEvent, len(objectIDs))
	for i, id := range objectIDs {
		events[i] = api.AuditEvent{Tenant: s.Tenant, Actor: s.Actor, Action: action, ObjectType: objectType, ObjectID: id}
	}
	if err := u.api.Audit(r, events...); err != nil {
		u.fail(w, r, s, &stet.Error{Code: stet.EUnavailable, Message: "the read could not be audited", Cause: err})
		return false
	}
	return true
}

// option is one choice of a queue filter, with its count.
type option struct {
	Value    string
	Count    int
	Selected bool
}

type filter struct {
	Name    string // the query parameter
	Label   string
	Options []option
	Value   string
}

type queueRow struct {
	Rec      *stet.ReviewRecord
	Category string
	Severity string
	Action   string
}

type queueView struct {
	Filters  []filter
	Rows     []queueRow
	Total    int
	Pending  int
	Shown    int
	Next     string // the next page's URL, or ""
	First    string // the first page's URL when not on it
	Filtered bool
}

var queueParams = []string{"state", "source", "kind", "category", "failure_class"}

func (u *UI) queue(w http.ResponseWriter, r *http.Request, s *Session) {
	ctx := r.Context()
	q := r.URL.Query()
	f := ledger.QueueFilter{Tenant: s.Tenant, State: stet.RecordState(q.Get("state")), Source: q.Get("source"),
		Kind: stet.RecordKind(q.Get("kind")), Category: q.Get("category"), FailureClass: stet.FailureClass(q.Get("failure_class")),
		Before: q.Get("cursor"), Limit: 50}
	if f.State != "" && f.State != stet.RecordPending && f.State != stet.RecordDecided {
		u.errorPage(w, r, s, http.StatusBadRequest, "Bad filter", "state must be pending or decided.")
		return
	}
	if f.Kind != "" && f.Kind != stet.RecordExtracted && f.Kind != stet.RecordManual {
		u.errorPage(w, r, s, http.StatusBadRequest, "Bad filter", "kind must be extracted or manual.")
		return
	}
	recs, next, err := u.db.ListQueue(ctx, f)
	if err != nil {
		u.fail(w, r, s, err)
		return
	}
	counts, err := u.db.CountQueue(ctx, s.Tenant)
	if err != nil {
		u.fail(w, r, s, err)
		return
	}
	v := queueView{Total: counts.Total, Pending: counts.State[string(stet.RecordPending)], Shown: len(recs)}
	build := func(name, label string, m map[string]int, fixed ...string) filter {
		fl := filter{Name: name, Label: label, Value: q.Get(name)}
		keys := slices.Clone(fixed)
		for k := range m {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		if len(fixed) == 0 {
			sort.Strings(keys)
		}
		for _, k := range keys {
			fl.Options = append(fl.Options, option{Value: k, Count: m[k], Selected: k == fl.Value})
		}
		if fl.Value != "" {
			v.Filtered = true
		}
		return fl
	}
	v.Filters = []filter{
		build("state", "State", counts.State, "pending", "decided"),
		build("source", "Source", counts.Source),
		build("kind", "Kind", counts.Kind, "extracted", "manual"),
		build("category", "Category", counts.Category),
		build("failure_class", "Failure class", counts.FailureClass),
	}
	for _, rec := range recs {
		var c struct{ Category, Severity, Action string }
		_ = json.Unmarshal(rec.Classification, &c)
		v.Rows = append(v.Rows, queueRow{Rec: rec, Category: c.Category, Severity: c.Severity, Action: c.Action})
	}
	keep := url.Values{}
	for _, p := range queueParams {
		if x := q.Get(p); x != "" {
			keep.Set(p, x)
		}
	}
	if next != "" {
		nq := url.Values{}
		for k, vs := range keep {
			nq[k] = vs
		}
		nq.Set("cursor", next)
		v.Next = "/ui/review?" + nq.Encode()
	}
	if f.Before != "" {
		v.First = "/ui/review?" + keep.Encode()
	}
	// Every listed record is one audit row (its ID, never a count), as in
	// GET /v1/review.
	ids := make([]string, len(recs))
	for i, rec := range recs {
		ids[i] = rec.ID
	}
	if !u.audit(w, r, s, "review.list", "review_record", ids...) {
		return
	}
	u.render(w, http.StatusOK, "queue", u.view(s, "Review queue", "review", v))
}

type recordView struct {
	Rec          *stet.ReviewRecord
	Report       *ledger.ReportDetail
	Job          *ledger.JobDetail
	Text         string
	TextPurgedAt time.Time
	Fields       []fieldValue
	History      []ledger.HistoryEntry
	CanDecide    bool
	Decided      bool // just decided: the flash
	Reopened     bool // just reopened: the flash
	Problem      string
	Note         string
	SchemaKnown  bool
	// FieldProblems are a refused override's validator messages by the
	// top-level field they are about, shown beside it.
	FieldProblems map[string][]string
	// CanReopen: an operator on a decided record; Reason is the form's.
	CanReopen bool
	Reason    string
	// Cost is what the job's calls cost ("" without a price), and
	// TimeToRecord the time from acceptance to the record.
	Cost, TimeToRecord string
	// AudioHeld: the record's revision came as audio and its audio is
	// still retained, so the page plays it (docs/design.md §19).
	AudioHeld bool
}

// attemptTable is one job's processor calls on the record page: the
// record's job's own, or one part's (docs/design.md §16). Label names the
// table for a screen reader, and tells the part tables apart.
type attemptTable struct {
	Label    string
	Attempts []stet.Attempt
}

// loadRecord reads everything the record page shows. Another tenant's
// record is not found.
func (u *UI) loadRecord(r *http.Request, s *Session, id string) (*recordView, error) {
	ctx := r.Context()
	rec, err := u.db.GetReview(ctx, s.Tenant, id)
	if err != nil {
		return nil, err
	}
	v := &recordView{Rec: rec}
	if v.Job, err = u.db.GetJob(ctx, s.Tenant, rec.JobID); err != nil {
		return nil, err
	}
	if v.Report, err = u.db.GetReport(ctx, ledger.ReportLookup{Tenant: s.Tenant, ReportID: rec.ReportID}); err != nil {
		return nil, err
	}
	txt, err := u.db.JobText(ctx, s.Tenant, rec.JobID)
	if err != nil {
		return nil, err
	}
	v.Text, v.TextPurgedAt = txt.Text.Reveal(), txt.PurgedAt
	if v.History, err = u.db.ReportHistory(ctx, s.Tenant, rec.ReportID); err != nil {
		return nil, err
	}
	var fields []field
	if src := u.api.Source(rec.SourceID); src != nil && src.Schema != nil {
		if fields, err = schemaFields(src.Schema.JSON()); err != nil {
			return nil, err
		}
		v.SchemaKnown = true
	}
	v.Fields = withValues(fields, rec.Classification)
	v.CanDecide = s.Role.Allows(stet.RoleReviewer) && rec.State == stet.RecordPending && v.SchemaKnown
	v.CanReopen = s.Role.Allows(stet.RoleOperator) && rec.State == stet.RecordDecided
	if c, ok := v.Job.Cost(); ok {
		v.Cost = fmt.Sprintf("$%.6f over %d calls", c, v.Job.Calls())
	}
	if v.Job.Audio.AudioSHA256 != "" {
		held, err := u.db.AudioHeld(ctx, rec.JobID)
		if err != nil {
			return nil, err
		}
		v.AudioHeld = held
	}
	if j := v.Job.Job; !j.CommittedAt.IsZero() {
		v.TimeToRecord = j.CommittedAt.Sub(j.CreatedAt).Round(time.Millisecond).String()
	}
	return v, nil
}

// fieldProblems sorts a classification's validator messages
// ("/labels: …") by the top-level field they are about.
func fieldProblems(problems []string) map[string][]string {
	out := map[string][]string{}
	for _, p := range problems {
		loc, msg, ok := strings.Cut(p, ": ")
		if !ok || !strings.HasPrefix(loc, "/") {
			continue
		}
		field, _, _ := strings.Cut(loc[1:], "/")
		if field != "" {
			out[field] = append(out[field], msg)
		}
	}
	return out
}

func (u *UI) reopen(w http.ResponseWriter, r *http.Request, s *Session) {
	id := r.PathValue("id")
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if reason == "" || len(reason) > 1024 {
		v, err := u.loadRecord(r, s, id)
		if err != nil {
			u.fail(w, r, s, err)
			return
		}
		u.redisplay(w, r, s, v, http.StatusBadRequest, "a reopen needs a reason (at most 1024 bytes).")
		return
	}
	req := api.AuditRequestOf(r)
	_, err := u.db.Reopen(r.Context(), ledger.ReopenParams{Tenant: s.Tenant, RecordID: id, Actor: s.Actor, Reason: reason,
		Now: u.clock.Now(), Route: req.Route, RemoteAddr: req.RemoteAddr, RequestID: req.RequestID})
	if stet.ErrorCodeOf(err) == stet.EConflict {
		v, lerr := u.loadRecord(r, s, id)
		if lerr != nil {
			u.fail(w, r, s, lerr)
			return
		}
		u.redisplay(w, r, s, v, http.StatusConflict, "This record is not decided any more; the page shows it as it is.")
		return
	}
	if err != nil {
		u.fail(w, r, s, err)
		return
	}
	http.Redirect(w, r, "/ui/review/"+url.PathEscape(id)+"?reopened=1", http.StatusSeeOther)
}

func (u *UI) record(w http.ResponseWriter, r *http.Request, s *Session) {
	v, err := u.loadRecord(r, s, r.PathValue("id"))
	if err != nil {
		u.fail(w, r, s, err)
		return
	}
	v.Decided = r.URL.Query().Get("decided") == "1"
	v.Reopened = r.URL.Query().Get("reopened") == "1"
	if !u.audit(w, r, s, "review.read", "review_record", v.Rec.ID) {
		return
	}
	u.render(w, http.StatusOK, "record", u.view(s, "Record "+v.Rec.ID, "review", v))
}

// recordAudio serves the audio of a record's revision while it is
// retained, to the page's player; reading it is audited as reading the
// record is.
func (u *UI) recordAudio(w http.ResponseWriter, r *http.Request, s *Session) {
	rec, err := u.db.GetReview(r.Context(), s.Tenant, r.PathValue("id"))
	if err != nil {
		u.fail(w, r, s, err)
		return
	}
	a, err := u.db.LoadAudio(r.Context(), u.db.Reader(), rec.JobID)
	if errors.Is(err, ledger.ErrAudioGone) {
		u.fail(w, r, s, stet.ErrNotFound)
		return
	}
	if err != nil {
		u.fail(w, r, s, err)
		return
	}
	if !u.audit(w, r, s, "review.audio", "review_record", rec.ID) {
		return
	}
	w.Header().Set("Content-Type", a.ContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(a.Data)))
	_, _ = w.Write(a.Data)
}

func (u *UI) decide(w http.ResponseWriter, r *http.Request, s *Session) {
	id := r.PathValue("id")
	v, err := u.loadRecord(r, s, id)
	if err != nil {
		u.fail(w, r, s, err)
		return
	}
	form := r.PostForm
	d := stet.Decision(form.Get("decision"))
	p := api.DecisionParams{Tenant: s.Tenant, Actor: s.Actor, RecordID: id, Decision: d, Note: form.Get("note")}
	if d == stet.DecisionOverride || (d == stet.DecisionApprove && v.Rec.Kind == stet.RecordManual) {
		fields := make([]field, len(v.Fields))
		for i, f := range v.Fields {
			fields[i] = f.field
		}
		class, problem := classificationFrom(fields, form)
		if problem != "" {
			u.redisplay(w, r, s, v, http.StatusBadRequest, problem)
			return
		}
		p.Classification = class
	}
	_, err = u.api.Decide(r.Context(), p)
	var ref *api.Refusal
	if errors.As(err, &ref) {
		if ref.Slug == "invalid-classification" {
			if src := u.api.Source(v.Rec.SourceID); src != nil && src.Schema != nil {
				v.FieldProblems = fieldProblems(src.Schema.Validate(p.Classification))
			}
		}
		u.redisplay(w, r, s, v, ref.Status, ref.Detail)
		return
	}
	if stet.ErrorCodeOf(err) == stet.EConflict {
		u.redisplay(w, r, s, v, http.StatusConflict, "This record was decided meanwhile; the page shows the decision.")
		return
	}
	if err != nil {
		u.fail(w, r, s, err)
		return
	}
	http.Redirect(w, r, "/ui/review/"+url.PathEscape(id)+"?decided=1", http.StatusSeeOther)
}

// redisplay shows the record again with the refusal, keeping the form's
// values.
func (u *UI) redisplay(w http.ResponseWriter, r *http.Request, s *Session, v *recordView, status int, problem string) {
	if fresh, err := u.loadRecord(r, s, v.Rec.ID); err == nil {
		fresh.FieldProblems = v.FieldProblems
		v = fresh
	}
	v.Problem, v.Note, v.Reason = problem, r.PostForm.Get("note"), r.PostForm.Get("reason")
	for i := range v.Fields {
		f := &v.Fields[i]
		if vals, ok := r.PostForm[f.Input()]; ok && v.CanDecide {
			f.Value = strings.Join(vals, ", ")
			f.Selected = map[string]bool{}
			for _, x := range vals {
				f.Selected[x] = true
			}
		}
	}
	if !u.audit(w, r, s, "review.read", "review_record", v.Rec.ID) {
		return
	}
	u.render(w, status, "record", u.view(s, "Record "+v.Rec.ID, "review", v))
}

type dispatchView struct {
	Pauses []ledger.Pause
	Own    string // tenant:<own>
	Scope  string
	Reason string
	Flash  string
}

func (u *UI) dispatch(w http.ResponseWriter, r *http.Request, s *Session) {
	u.renderDispatch(w, r, s, http.StatusOK, "", r.URL.Query().Get("done"))
}

func (u *UI) renderDispatch(w http.ResponseWriter, r *http.Request, s *Session, status int, problem, done string) {
	all, err := u.db.Pauses(r.Context())
	if err != nil {
		u.fail(w, r, s, err)
		return
	}
	// What GET /v1/dispatch shows the same token: never another tenant's
	// pause, and a global one without its reason and actor.
	v := dispatchView{Own: "tenant:" + s.Tenant, Pauses: api.VisiblePauses(s.token(), all)}
	switch done {
	case "paused":
		v.Flash = "Dispatch paused."
	case "resumed":
		v.Flash = "Dispatch resumed."
	}
	if r.Method == http.MethodPost {
		v.Scope, v.Reason = r.PostForm.Get("scope"), r.PostForm.Get("reason")
	}
	if !u.audit(w, r, s, "dispatch.read", "dispatch") {
		return
	}
	pv := u.view(s, "Dispatch", "dispatch", v)
	pv.Error = problem
	u.render(w, status, "dispatch", pv)
}

func (u *UI) pause(w http.ResponseWriter, r *http.Request, s *Session) {
	scope, reason := strings.TrimSpace(r.PostForm.Get("scope")), strings.TrimSpace(r.PostForm.Get("reason"))
	if u.scopeRefused(w, r, s, scope, reason, true) {
		return
	}
	p := ledger.Pause{Scope: scope, Reason: reason, PausedBy: s.Actor, PausedAt: u.clock.Now()}
	if err := u.db.SetPause(r.Context(), p, s.Tenant); err != nil {
		u.fail(w, r, s, err)
		return
	}
	u.log.Warn("dispatch paused", "scope", scope, "by", s.Actor)
	http.Redirect(w, r, "/ui/dispatch?done=paused", http.StatusSeeOther)
}

func (u *UI) resume(w http.ResponseWriter, r *http.Request, s *Session) {
	scope := strings.TrimSpace(r.PostForm.Get("scope"))
	if u.scopeRefused(w, r, s, scope, "", false) {
		return
	}
	err := u.db.ClearPause(r.Context(), scope, s.Actor, s.Tenant, u.clock.Now())
	if stet.ErrorCodeOf(err) == stet.ENotFound {
		u.renderDispatch(w, r, s, http.StatusNotFound, "That scope is not paused.", "")
		return
	}
	if err != nil {
		u.fail(w, r, s, err)
		return
	}
	u.log.Warn("dispatch resumed", "scope", scope, "by", s.Actor)
	http.Redirect(w, r, "/ui/dispatch?done=resumed", http.StatusSeeOther)
}

// scopeRefused applies the API's scope rule to the session's tenant and
// role, and answers a refusal.
func (u *UI) scopeRefused(w http.ResponseWriter, r *http.Request, s *Session, scope, reason string, needReason bool) bool {
	err := u.api.CheckDispatchScope(r.Context(), s.token(), scope, reason, needReason, !needReason)
	var ref *api.Refusal
	switch {
	case err == nil:
		return false
	case errors.As(err, &ref) && ref.Status == http.StatusForbidden:
		if aerr := u.api.Audit(r, api.AuditEvent{Tenant: s.Tenant, Actor: s.Actor, Action: "denied.forbidden",
			ObjectType: "dispatch", ObjectID: scope, Outcome: ledger.AuditDenied}); aerr != nil {
			u.log.Warn("audit denied request", "route", r.Pattern, "request_id", api.RequestID(r), "err", aerr)
		}
		u.renderDispatch(w, r, s, ref.Status, ref.Detail, "")
	case errors.As(err, &ref):
		u.renderDispatch(w, r, s, ref.Status, ref.Detail, "")
	default:
		u.fail(w, r, s, err)
	}
	return true
}

func (u *UI) batches(w http.ResponseWriter, r *http.Request, s *Session) {
	bs, err := u.db.TenantBatches(r.Context(), s.Tenant, 100)
	if err != nil {
		u.fail(w, r, s, err)
		return
	}
	if !u.audit(w, r, s, "batches.read", "batch") {
		return
	}
	u.render(w, http.StatusOK, "batches", u.view(s, "Batches", "batches", bs))
}

func (u *UI) invariants(w http.ResponseWriter, r *http.Request, s *Session) {
	vs, err := u.api.Violations(r.Context(), s.token())
	if err != nil {
		u.fail(w, r, s, err)
		return
	}
	if !u.audit(w, r, s, "invariants.read", "invariants") {
		return
	}
	u.render(w, http.StatusOK, "invariants", u.view(s, "Invariants", "invariants", vs))
}

func (u *UI) deletion(w http.ResponseWriter, r *http.Request, s *Session) {
	d, err := u.cfg.Deletions.Deletion(r.Context(), s.Tenant, r.PathValue("id"))
	if err != nil {
		u.fail(w, r, s, err)
		return
	}
	if !u.audit(w, r, s, "deletion.read", "deletion", d.ID) {
		return
	}
	u.render(w, http.StatusOK, "deletion", u.view(s, "Deletion "+d.ID, "", d))
}
