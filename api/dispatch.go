package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/stetlabs/stet/ledger"
)

type dispatchBody struct {
	Scope  string `json:"scope"`
	Reason string `json:"reason"`
}

// dispatchScope decodes a pause or resume body and checks its scope. An
// admin may name any scope. A tenant's operator may name only its own
// tenant: "all" and "processor:ID" stop every tenant, and another tenant's
// scope is not its to touch, so each is 403, audited.
func (s *Server) dispatchScope(w http.ResponseWriter, r *http.Request, needReason bool) (dispatchBody, bool) {
	var in dispatchBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		s.problem(w, r, http.StatusBadRequest, "invalid-body", jsonProblem(err))
		return in, false
	}
	err := s.CheckDispatchScope(r.Context(), tokenOf(r), in.Scope, in.Reason, needReason, !needReason)
	var ref *Refusal
	switch {
	case err == nil:
	case errors.As(err, &ref) && ref.Status == http.StatusForbidden:
		s.denyScope(w, r, in.Scope, ref.Detail)
		return in, false
	case errors.As(err, &ref):
		s.problem(w, r, ref.Status, ref.Slug, ref.Detail)
		return in, false
	default:
		s.fail(w, r, err)
		return in, false
	}
	return in, true
}

func (s *Server) denyScope(w http.ResponseWriter, r *http.Request, scope, detail string) {
	tok := tokenOf(r)
	ev := AuditEvent{Tenant: tenantOf(tok), Actor: actorOf(tok), Action: "denied.forbidden", ObjectType: "dispatch", ObjectID: scope,
		Outcome: ledger.AuditDenied}
	if err := s.Audit(r, ev); err != nil {
		s.log.Error("audit denied request", "route", r.Pattern, "request_id", requestID(r), "err", err)
	}
	s.problem(w, r, http.StatusForbidden, "forbidden", detail)
}

func (s *Server) pauseDispatch(w http.ResponseWriter, r *http.Request) {
	in, ok := s.dispatchScope(w, r, true)
	if !ok {
		return
	}
	tok := tokenOf(r)
	p := ledger.Pause{Scope: in.Scope, Reason: in.Reason, PausedBy: actorOf(tok), PausedAt: s.clock.Now()}
	if err := s.db.SetPause(r.Context(), p, tenantOf(tok)); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Warn("dispatch paused", "scope", p.Scope, "by", p.PausedBy, "request_id", requestID(r))
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) resumeDispatch(w http.ResponseWriter, r *http.Request) {
	in, ok := s.dispatchScope(w, r, false)
	if !ok {
		return
	}
	tok := tokenOf(r)
	if err := s.db.ClearPause(r.Context(), in.Scope, actorOf(tok), tenantOf(tok), s.clock.Now()); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Warn("dispatch resumed", "scope", in.Scope, "by", actorOf(tok), "request_id", requestID(r))
	writeJSON(w, http.StatusOK, map[string]any{"scope": in.Scope, "resumed": true})
}

// pauseView is a pause as GET /v1/dispatch shows it: a tenant sees the
// reason and actor of its own pauses only.
type pauseView struct {
	Scope    string    `json:"scope"`
	Reason   string    `json:"reason,omitempty"`
	PausedBy string    `json:"paused_by,omitempty"`
	PausedAt time.Time `json:"paused_at"`
}

// VisiblePauses is what tok may see of the pauses in force, the one rule
// GET /v1/dispatch and the UI's dispatch page share: an admin every pause;
// a tenant its own, and the global ones ("all", "processor:ID") without
// their reasons or actors, and never another tenant's.
func VisiblePauses(tok *Token, all []ledger.Pause) []ledger.Pause {
	out := []ledger.Pause{}
	for _, p := range all {
		if !tok.Admin {
			if t, ok := strings.CutPrefix(p.Scope, "tenant:"); ok && t != tok.Tenant {
				continue
			} else if !ok {
				p.Reason, p.PausedBy = "", ""
			}
		}
		out = append(out, p)
	}
	return out
}

// listDispatch answers the pauses tok may see (VisiblePauses).
func (s *Server) listDispatch(w http.ResponseWriter, r *http.Request) {
	all, err := s.db.Pauses(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := []pauseView{}
	for _, p := range VisiblePauses(tokenOf(r), all) {
		out = append(out, pauseView{Scope: p.Scope, Reason: p.Reason, PausedBy: p.PausedBy, PausedAt: p.PausedAt})
	}
	if !s.audit(w, r, "dispatch.read", "dispatch", "") {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"pauses": out})
}
