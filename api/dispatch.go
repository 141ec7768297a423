package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/stetlabs/stet/ledger"
)

type dispatchBody struct {
	Scope  string `json:"scope"`
	Reason string `json:"reason"`
}

// dispatchScope decodes a pause or resume body and checks its scope: a
// token may name "all", any processor, or its own tenant (another tenant's
// is not found, as every other tenant's object is).
func (s *Server) dispatchScope(w http.ResponseWriter, r *http.Request, needReason bool) (dispatchBody, bool) {
	var in dispatchBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		s.problem(w, r, http.StatusBadRequest, "invalid-body", jsonProblem(err))
		return in, false
	}
	var ref *Refusal
	if errors.As(s.CheckDispatchScope(tokenOf(r), in.Scope, in.Reason, needReason), &ref) {
		s.problem(w, r, ref.Status, ref.Slug, ref.Detail)
		return in, false
	}
	return in, true
}

func (s *Server) pauseDispatch(w http.ResponseWriter, r *http.Request) {
	in, ok := s.dispatchScope(w, r, true)
	if !ok {
		return
	}
	tok := tokenOf(r)
	p := ledger.Pause{Scope: in.Scope, Reason: in.Reason, PausedBy: "token:" + tok.Name, PausedAt: s.clock.Now()}
	if err := s.db.SetPause(r.Context(), p, tok.Tenant); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Warn("dispatch paused", "scope", p.Scope, "by", p.PausedBy)
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) resumeDispatch(w http.ResponseWriter, r *http.Request) {
	in, ok := s.dispatchScope(w, r, false)
	if !ok {
		return
	}
	tok := tokenOf(r)
	if err := s.db.ClearPause(r.Context(), in.Scope, "token:"+tok.Name, tok.Tenant, s.clock.Now()); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Warn("dispatch resumed", "scope", in.Scope, "by", "token:"+tok.Name)
	writeJSON(w, http.StatusOK, map[string]any{"scope": in.Scope, "resumed": true})
}

func (s *Server) listDispatch(w http.ResponseWriter, r *http.Request) {
	all, err := s.db.Pauses(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	tenant := tokenOf(r).Tenant
	out := []ledger.Pause{}
	for _, p := range all {
		if t, ok := strings.CutPrefix(p.Scope, "tenant:"); ok && t != tenant {
			continue
		}
		out = append(out, p)
	}
	writeJSON(w, http.StatusOK, map[string]any{"pauses": out})
}
