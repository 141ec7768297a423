package api

import (
	"context"
	"net/http"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// Deleter records deletions: the pipeline, which enqueues each deletion's
// worker in the transaction that records it.
type Deleter interface {
	RequestDeletion(ctx context.Context, r ledger.DeletionRequest) (ledger.DeletionRequested, error)
}

// DeletionTaskView is one copy in GET /v1/deletions/{id}. Absent times and
// reasons are null.
type DeletionTaskView struct {
	Copy      string  `json:"copy"`
	State     string  `json:"state"`
	DueAt     *string `json:"due_at"`
	DoneAt    *string `json:"done_at"`
	ExpiresAt *string `json:"expires_at"`
	Reason    *string `json:"reason"`
	// ConfirmedBy and Evidence are set on a task an operator confirmed
	// (POST /v1/deletions/{id}/tasks/{copy}/confirm).
	ConfirmedBy *string `json:"confirmed_by"`
	Evidence    *string `json:"evidence"`
}

// DeletionView is GET /v1/deletions/{id} (docs/design.md §7).
type DeletionView struct {
	DeletionID  string             `json:"deletion_id"`
	ReportID    string             `json:"report_id"`
	Source      string             `json:"source"`
	State       string             `json:"state"`
	RequestedAt string             `json:"requested_at"`
	DoneAt      *string            `json:"done_at"`
	Tasks       []DeletionTaskView `json:"tasks"`
}

func tsPtr(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := ts(t)
	return &s
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// NewDeletionView shapes a deletion for the API and the CLI.
func NewDeletionView(d *stet.Deletion) DeletionView {
	v := DeletionView{DeletionID: d.ID, ReportID: d.ReportID, Source: d.SourceID, State: string(d.State),
		RequestedAt: ts(d.RequestedAt), DoneAt: tsPtr(d.DoneAt), Tasks: []DeletionTaskView{}}
	for _, t := range d.Tasks {
		v.Tasks = append(v.Tasks, DeletionTaskView{Copy: t.Copy, State: string(t.State),
			DueAt: tsPtr(t.DueAt), DoneAt: tsPtr(t.DoneAt),
			ExpiresAt: tsPtr(t.ExpiresAt), Reason: strPtr(t.Reason), ConfirmedBy: strPtr(t.ConfirmedBy), Evidence: strPtr(t.Evidence)})
	}
	return v
}

// DeletionAccepted is the answer to a DELETE of a report.
type DeletionAccepted struct {
	DeletionID string `json:"deletion_id"`
	State      string `json:"state"`
}

func (s *Server) deleteReportByExternalID(w http.ResponseWriter, r *http.Request) {
	src := s.sources[r.PathValue("source")]
	if src == nil || src.Tenant != tokenOf(r).Tenant {
		s.fail(w, r, errNotFound)
		return
	}
	s.deleteReport(w, r, ledger.DeletionRequest{SourceID: src.ID, ExternalID: r.PathValue("external_id")})
}

func (s *Server) deleteReportByID(w http.ResponseWriter, r *http.Request) {
	s.deleteReport(w, r, ledger.DeletionRequest{ReportID: r.PathValue("report_id")})
}

// deleteReport answers 202 for a new deletion and 200 with the same
// deletion_id for a report already deleted; the state is the deletion's.
func (s *Server) deleteReport(w http.ResponseWriter, r *http.Request, req ledger.DeletionRequest) {
	if s.cfg.Deleter == nil {
		s.problem(w, r, http.StatusServiceUnavailable, "unavailable", "deletion is not available on this process")
		return
	}
	tok := tokenOf(r)
	req.Tenant, req.Actor, req.Now = tok.Tenant, "token:"+tok.Name, s.clock.Now()
	out, err := s.cfg.Deleter.RequestDeletion(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if out.Created {
		writeJSON(w, http.StatusAccepted, DeletionAccepted{DeletionID: out.DeletionID, State: string(stet.DeletionPending)})
		return
	}
	d, err := s.db.GetDeletion(r.Context(), tok.Tenant, out.DeletionID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !s.audit(w, r, "report.delete.repeat", "deletion", d.ID) {
		return
	}
	writeJSON(w, http.StatusOK, DeletionAccepted{DeletionID: d.ID, State: string(d.State)})
}

func (s *Server) getDeletion(w http.ResponseWriter, r *http.Request) {
	tok := tokenOf(r)
	d, err := s.db.GetDeletion(r.Context(), tok.Tenant, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !s.audit(w, r, "deletion.read", "deletion", d.ID) {
		return
	}
	writeJSON(w, http.StatusOK, NewDeletionView(d))
}

type confirmBody struct {
	Evidence string `json:"evidence"`
}

// confirmTask records an operator's evidence that a copy stet could not
// delete itself is gone: the unresolved task becomes done (the ledger
// audits it in the same transaction). A task still pending or already
// done is 409.
func (s *Server) confirmTask(w http.ResponseWriter, r *http.Request) {
	var in confirmBody
	if !s.decodeBody(w, r, 16<<10, &in) {
		return
	}
	tok := tokenOf(r)
	d, err := s.db.ConfirmTask(r.Context(), ledger.ConfirmParams{Tenant: tok.Tenant, DeletionID: r.PathValue("id"),
		Copy: r.PathValue("copy"), Actor: tok.Actor(), Evidence: in.Evidence, Now: s.clock.Now()})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewDeletionView(d))
}
