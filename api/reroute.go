package api

import (
	"context"
	"net/http"

	"github.com/stetlabs/stet/ledger"
)

// Rerouter moves blocked jobs to a processor the policy in force permits,
// by an operator's boundary decision (the pipeline).
type Rerouter interface {
	Reroute(ctx context.Context, p ledger.RerouteParams) (ledger.Rerouted, error)
}

type rerouteBody struct {
	Scope  string `json:"scope"`
	To     string `json:"to"`
	Reason string `json:"reason"`
	DryRun bool   `json:"dry_run"`
}

// rerouteDispatch is POST /v1/dispatch/reroute
// {"scope":"job:ID|policy:ID|processor:ID","to","reason","dry_run"}: an
// operator moves their tenant's blocked jobs (an admin: any tenant's) to
// a processor the policy now in force permits. The answer lists the jobs
// (moved, or on a dry run those that would be); a processor the policy
// does not permit, or a job that is not blocked, is 409 with the reason.
func (s *Server) rerouteDispatch(w http.ResponseWriter, r *http.Request) {
	var in rerouteBody
	if !s.decodeBody(w, r, 16<<10, &in) {
		return
	}
	if s.cfg.Rerouter == nil {
		s.problem(w, r, http.StatusServiceUnavailable, "unavailable", "reroute is not available in this process")
		return
	}
	tok := tokenOf(r)
	tenant := ledger.AnyTenant
	if !tok.Admin {
		tenant = tok.Tenant
	}
	out, err := s.cfg.Rerouter.Reroute(r.Context(), ledger.RerouteParams{Tenant: tenant, Scope: in.Scope, To: in.To,
		Reason: in.Reason, Actor: actorOf(tok), DryRun: in.DryRun})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
