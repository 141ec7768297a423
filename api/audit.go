package api

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/webhook"
)

// The audit log as the API and the review UI (package web) write it: one
// helper builds every row of a request, and the request's route, remote
// address and request ID travel in its context to the ledger calls that
// audit their own change (a decision, a pause, a deletion, a UI session).
// Rows carry IDs only: never text, never an external ID (docs/design.md §5).

// AuditEvent is what a handler knows of an audit row; the request supplies
// the rest.
type AuditEvent struct {
	Tenant     string // whose log holds the row: "*" for an admin or an unauthenticated caller
	Actor      string // token:NAME, admin:NAME, oidc:SUBJECT, anonymous
	Action     string
	ObjectType string
	ObjectID   string
	Outcome    ledger.AuditOutcome // blank: ledger.AuditOK
}

// RequestID returns the request's ID: the X-Request-Id stet answered with,
// "" for a request that did not come through the API's router.
func RequestID(r *http.Request) string { return requestID(r) }

// AuditRequestOf is what every audit row of r records about it: the route
// pattern r was routed by (never the concrete path, which may hold an
// external ID), the caller's address and the request ID.
func AuditRequestOf(r *http.Request) ledger.AuditRequest {
	return ledger.AuditRequest{Route: r.Pattern, RemoteAddr: r.RemoteAddr, RequestID: requestID(r)}
}

// WithAuditRequest returns r with AuditRequestOf(r) in its context, so the
// ledger's own audit rows of the request carry it. The API's router does it
// for every route; the UI does it again under its own route patterns.
func WithAuditRequest(r *http.Request) *http.Request {
	return r.WithContext(ledger.WithAuditRequest(r.Context(), AuditRequestOf(r)))
}

// AuditRow is the one request-aware audit helper of the API and the UI:
// the row of ev with r's route pattern, remote address and request ID, at
// now.
func AuditRow(r *http.Request, ev AuditEvent, now time.Time) ledger.AuditEntry {
	req := AuditRequestOf(r)
	return ledger.AuditEntry{Tenant: ev.Tenant, Actor: ev.Actor, Action: ev.Action, ObjectType: ev.ObjectType, ObjectID: ev.ObjectID,
		Route: req.Route, RemoteAddr: req.RemoteAddr, RequestID: req.RequestID, Outcome: ev.Outcome, Now: now}
}

// Audit appends the rows of events for r in one transaction: all or none.
// A read calls it before it answers and answers nothing if it fails.
func (s *Server) Audit(r *http.Request, events ...AuditEvent) error {
	now := s.clock.Now()
	entries := make([]ledger.AuditEntry, len(events))
	for i, ev := range events {
		entries[i] = AuditRow(r, ev, now)
	}
	return s.db.AuditAll(r.Context(), entries)
}

// AuditDenied records a refused request (401, 403, or 404 for an object
// that is missing or another tenant's) with outcome denied. A failure to
// record it is logged, not answered: the request is refused either way.
// The object is the one the path names (DeniedObject).
func (s *Server) AuditDenied(r *http.Request, tenant, actor, action string) {
	typ, id := s.DeniedObject(r)
	ev := AuditEvent{Tenant: tenant, Actor: actor, Action: action, ObjectType: typ, ObjectID: id, Outcome: ledger.AuditDenied}
	if err := s.Audit(r, ev); err != nil {
		s.log.Error("audit denied request", "route", r.Pattern, "request_id", requestID(r), "err", err)
	}
}

// DeniedObject is the object a refused request's path names, as its audit
// row records it. The caller chose the ID: it may be another tenant's ID or
// any text, so a well-formed stet ID is recorded as "sha256:<hex>" of it
// (GET /v1/audit?object=ID finds it) and anything else not at all; a source
// is named only when it is configured; an external ID never.
func (s *Server) DeniedObject(r *http.Request) (objectType, objectID string) {
	idType, idPrefix := "review_record", "rec_"
	if strings.Contains(r.Pattern, "/deletions/") {
		idType, idPrefix = "deletion", "del_"
	}
	for _, k := range []struct{ key, typ, prefix string }{{"job_id", "job", "job_"}, {"report_id", "report", "rep_"}, {"id", idType, idPrefix}} {
		if v := r.PathValue(k.key); v != "" {
			if wellFormedID(v, k.prefix) {
				return k.typ, hashedID(v)
			}
			return k.typ, ""
		}
	}
	if src := r.PathValue("source"); src != "" && s.sources[src] != nil {
		return "source", src
	}
	return "route", ""
}

func hashedID(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// auditDeniedIntake records a delivery refused for its signature (401) as
// one row per source, reason and minute, counting the refusals: a flood of
// bad signatures is one row a minute, not one a request. The row is the
// first refusal's (its remote address and request ID), in the source's
// tenant's log, with actor anonymous: the sender proved no identity.
func (s *Server) auditDeniedIntake(r *http.Request, src *Source, verr error) {
	reason := "bad_signature"
	switch {
	case errors.Is(verr, webhook.ErrMissingHeaders):
		reason = "missing_headers"
	case errors.Is(verr, webhook.ErrBadTimestamp):
		reason = "bad_timestamp"
	case errors.Is(verr, webhook.ErrStaleTimestamp):
		reason = "stale_timestamp"
	}
	now := s.clock.Now()
	key := "intake|" + src.ID + "|" + reason + "|" + now.UTC().Truncate(time.Minute).Format(time.RFC3339)
	e := AuditRow(r, AuditEvent{Tenant: src.Tenant, Actor: "anonymous", Action: "denied.intake." + reason,
		ObjectType: "source", ObjectID: src.ID, Outcome: ledger.AuditDenied}, now)
	if err := s.db.AuditRollup(r.Context(), key, e); err != nil {
		s.log.Error("audit denied delivery", "source", src.ID, "request_id", requestID(r), "err", err)
	}
}

// AuditRowView is one row of GET /v1/audit and stet audit list.
type AuditRowView struct {
	At         string `json:"at"`
	Tenant     string `json:"tenant"`
	Actor      string `json:"actor"`
	Action     string `json:"action"`
	ObjectType string `json:"object_type"`
	ObjectID   string `json:"object_id"`
	Route      string `json:"route"`
	RemoteAddr string `json:"remote_addr"`
	RequestID  string `json:"request_id"`
	Outcome    string `json:"outcome"`
	// Count is how many requests a rolled-up row stands for (denied
	// intake: one row per source, reason and minute); absent on every
	// other row.
	Count int64 `json:"count,omitempty"`
}

// NewAuditRowView shapes an audit row for the API and the CLI.
func NewAuditRowView(e ledger.AuditEntry) AuditRowView {
	return AuditRowView{At: ts(e.Now), Tenant: e.Tenant, Actor: e.Actor, Action: e.Action, ObjectType: e.ObjectType, ObjectID: e.ObjectID,
		Route: e.Route, RemoteAddr: e.RemoteAddr, RequestID: e.RequestID, Outcome: string(e.Outcome), Count: e.Count}
}

// AuditPage is GET /v1/audit.
type AuditPage struct {
	Rows       []AuditRowView `json:"rows"`
	NextCursor *string        `json:"next_cursor"`
}

// ParseAuditQuery reads the parameters of GET /v1/audit (object, since in
// RFC 3339, limit 1..1000, cursor) into f. It refuses an unknown or
// repeated parameter, so a misspelt filter never reads as no filter. The
// error's message is caller-safe.
func ParseAuditQuery(q map[string][]string, f *ledger.AuditFilter) error {
	for k, vs := range q {
		switch k {
		case "object", "since", "limit", "cursor":
		default:
			return errors.New("unknown parameter; allowed: object, since, limit, cursor")
		}
		if len(vs) != 1 {
			return errors.New(k + " is given more than once")
		}
	}
	get := func(k string) string {
		if vs := q[k]; len(vs) == 1 {
			return vs[0]
		}
		return ""
	}
	if o := get("object"); o != "" {
		if len(o) > 256 || strings.ContainsFunc(o, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
			return errors.New("object must be at most 256 bytes without control characters")
		}
		f.Object = o
	}
	if v := get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return errors.New("since must be an RFC 3339 time, such as 2026-01-02T15:04:05Z")
		}
		f.Since = t
	}
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > ledger.MaxAuditPage {
			return errors.New("limit must be between 1 and " + strconv.Itoa(ledger.MaxAuditPage))
		}
		f.Limit = n
	}
	if v := get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return errors.New("cursor must be a next_cursor of an earlier page")
		}
		f.After = n
	}
	return nil
}

// AuditedObject is how a read of the audit log names the object it was
// filtered by in its own audit row: a job, report, record or deletion ID
// or a dispatch scope as given, anything else (it may be an external ID) as
// "sha256:<hex>".
func AuditedObject(object string) string {
	if object == "" || ledger.ValidScope(object) {
		return object
	}
	for _, prefix := range []string{"job_", "rep_", "rec_", "del_"} {
		if wellFormedID(object, prefix) {
			return object
		}
	}
	return hashedID(object)
}

// auditedObject is AuditedObject, keeping a configured source's ID too.
func (s *Server) auditedObject(object string) string {
	if s.sources[object] != nil {
		return object
	}
	return AuditedObject(object)
}

// listAudit is GET /v1/audit: an operator reads its tenant's rows, an
// admin every tenant's, in chain order, a page at a time. The read is
// itself audited (audit.read) before it is answered.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) {
	tok := tokenOf(r)
	f := ledger.AuditFilter{Tenant: tok.Tenant, Limit: 100}
	if tok.Admin {
		f.Tenant = ledger.AnyTenant
	}
	if err := ParseAuditQuery(r.URL.Query(), &f); err != nil {
		s.problem(w, r, http.StatusBadRequest, "invalid-query", err.Error())
		return
	}
	rows, next, err := s.db.AuditRows(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := AuditPage{Rows: make([]AuditRowView, 0, len(rows))}
	for _, e := range rows {
		out.Rows = append(out.Rows, NewAuditRowView(e))
	}
	if next > 0 {
		c := strconv.FormatInt(next, 10)
		out.NextCursor = &c
	}
	if !s.audit(w, r, "audit.read", "audit_log", s.auditedObject(f.Object)) {
		return
	}
	writeJSON(w, http.StatusOK, out)
}
