package api

import (
	"context"
	"net/http"

	"github.com/stetlabs/stet/ledger"
)

// ManualConverter turns the waiting and blocked jobs of a scope into manual
// review records (the pipeline). It is idempotent: a job that already has a
// record is skipped.
type ManualConverter interface {
	Manual(ctx context.Context, p ledger.ManualParams) (int, error)
}

// manualDispatch is POST /v1/dispatch/manual: the same body and the same
// 403 rules as pause (a tenant's operator names only tenant:<own>; all and
// processor:ID need an admin token). The answer is {"scope","converted"}.
func (s *Server) manualDispatch(w http.ResponseWriter, r *http.Request) {
	in, ok := s.dispatchScope(w, r, false)
	if !ok {
		return
	}
	if s.cfg.Manual == nil {
		s.problem(w, r, http.StatusServiceUnavailable, "unavailable", "manual conversion is not available in this process")
		return
	}
	tok := tokenOf(r)
	n, err := s.cfg.Manual.Manual(r.Context(), ledger.ManualParams{
		Scope: in.Scope, Reason: in.Reason, Actor: actorOf(tok), AuditTenant: tenantOf(tok),
		Route: r.Pattern, RemoteAddr: r.RemoteAddr, RequestID: requestID(r),
	})
	if err != nil {
		// Batches already committed stay converted; running it again
		// converts the rest.
		s.log.Error("manual conversion stopped early", "scope", in.Scope, "converted", n, "request_id", requestID(r), "err", err)
		s.fail(w, r, err)
		return
	}
	s.log.Warn("jobs turned into manual review records", "scope", in.Scope, "converted", n, "by", actorOf(tok), "request_id", requestID(r))
	writeJSON(w, http.StatusOK, map[string]any{"scope": in.Scope, "converted": n})
}
