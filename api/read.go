package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// AttemptView is one processor call in a job view.
type AttemptView struct {
	N            int    `json:"n"`
	Processor    string `json:"processor"`
	Model        string `json:"model,omitempty"`
	Status       string `json:"status"`
	StatusCode   int    `json:"status_code"`
	FailureClass string `json:"failure_class"`
	RequestID    string `json:"request_id"`
	InputTokens  int    `json:"input_tokens"`
	OutputTokens int    `json:"output_tokens"`
	LatencyMS    int64  `json:"latency_ms"`
	InputSHA256  string `json:"input_sha256,omitempty"`
	BatchID      string `json:"batch_id,omitempty"` // the provider batch the call went in
	StartedAt    string `json:"started_at"`
	// CostUSD is the call's tokens at its processor's price in force then
	// (docs/design.md §18); null when the processor has no price.
	CostUSD *float64 `json:"cost_usd"`
}

// JobView is GET /v1/jobs/{job_id}.
type JobView struct {
	JobID             string        `json:"job_id"`
	ReportID          string        `json:"report_id"`
	Source            string        `json:"source"`
	Revision          int64         `json:"revision"`
	ExtractionVersion string        `json:"extraction_version"`
	State             string        `json:"state"`
	FailureClass      string        `json:"failure_class,omitempty"`
	PolicyID          string        `json:"policy_id"`
	PolicyHash        string        `json:"policy_hash"`
	Attempts          []AttemptView `json:"attempts"`
	ReviewRecordID    *string       `json:"review_record_id"`
	Stages            StageTimes    `json:"stages"`
	Artifact          *ArtifactView `json:"artifact"`
	// TextPurgedAt says the revision's text and metadata were purged
	// (retention); absent while they are kept.
	TextPurgedAt string `json:"text_purged_at,omitempty"`
	// Deliveries are the review record's outbound webhooks (docs/design.md §13).
	Deliveries []DeliveryView `json:"deliveries"`
	// BlockedReason is, while the job is blocked, the processor the
	// boundary gate refused and its reason code ("openai:processor_no_longer_permitted").
	BlockedReason *string `json:"blocked_reason"`
	// BoundaryDecisions are operators' decisions moving the job to another
	// processor (stet reroute), oldest first.
	BoundaryDecisions []BoundaryDecisionView `json:"boundary_decisions"`
	// Parts are, for a job of a profile with parts (docs/design.md §16),
	// each part's job: its processor, state and attempts. Absent for
	// other jobs.
	Parts []PartView `json:"parts,omitempty"`
	AudioFields
}

// AudioFields describe a revision delivered as audio (docs/design.md §19):
// the SHA-256 of its audio and, once transcribed, of its transcript, and
// the transcriber and model that made it. Absent for a text revision.
type AudioFields struct {
	AudioSHA256      string           `json:"audio_sha256,omitempty"`
	TranscriptSHA256 string           `json:"transcript_sha256,omitempty"`
	Transcriber      *TranscriberView `json:"transcriber,omitempty"`
}

// TranscriberView names who transcribed an audio revision.
type TranscriberView struct {
	Processor string `json:"processor"`
	Model     string `json:"model"`
}

func audioFields(a ledger.AudioInfo) AudioFields {
	f := AudioFields{AudioSHA256: a.AudioSHA256, TranscriptSHA256: a.TranscriptSHA256}
	if a.Transcriber != "" {
		f.Transcriber = &TranscriberView{Processor: a.Transcriber, Model: a.Model}
	}
	return f
}

// PartView is one part of a job of a profile with parts.
type PartView struct {
	ID        string        `json:"id"`
	JobID     string        `json:"job_id"`
	Processor string        `json:"processor"`
	State     string        `json:"state"`
	Attempts  []AttemptView `json:"attempts"`
}

// BoundaryDecisionView is one operator's boundary decision on a job.
type BoundaryDecisionView struct {
	Actor      string `json:"actor"`
	Reason     string `json:"reason"`
	From       string `json:"from"`
	To         string `json:"to"`
	PolicyID   string `json:"policy_id"`
	PolicyHash string `json:"policy_hash"`
	At         string `json:"at"`
}

// DeliveryView is one outbound delivery of a job's record: one event to
// one destination.
type DeliveryView struct {
	Destination string `json:"destination"`
	Event       string `json:"event"`
	WebhookID   string `json:"webhook_id"`
	Sequence    int64  `json:"sequence"`
	State       string `json:"state"`
	Attempts    int    `json:"attempts"`
	LastStatus  int    `json:"last_status"`
	LastError   string `json:"last_error,omitempty"`
	NextAttempt string `json:"next_attempt_at,omitempty"`
	DeliveredAt string `json:"delivered_at,omitempty"`
}

// StageTimes are when a job reached each stage (RFC 3339, UTC; absent if not yet).
type StageTimes struct {
	AcceptedAt   string `json:"accepted_at"`
	ExtractingAt string `json:"extracting_at,omitempty"`
	ExtractedAt  string `json:"extracted_at,omitempty"`
	CommittedAt  string `json:"committed_at,omitempty"`
}

// ArtifactView is an artifact's metadata, never its content.
type ArtifactView struct {
	ID            string `json:"id"`
	Processor     string `json:"processor"`
	Model         string `json:"model,omitempty"`
	SchemaVersion string `json:"schema_version"`
	AttemptN      int    `json:"attempt_n"`
	CreatedAt     string `json:"created_at"`
	// RawPurgedAt and OutputPurgedAt: retention purged the raw response
	// and the normalized output.
	RawPurgedAt    string `json:"raw_purged_at,omitempty"`
	OutputPurgedAt string `json:"output_purged_at,omitempty"`
}

func ts(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// NewJobView shapes a job for the API and the CLI.
func NewJobView(d *ledger.JobDetail) JobView {
	j := d.Job
	v := JobView{
		JobID: j.ID, ReportID: j.ReportID, Source: j.SourceID, Revision: j.Revision, ExtractionVersion: j.ExtractionVersion,
		State: string(j.State), FailureClass: string(j.FailureClass), PolicyID: j.PolicyID, PolicyHash: j.PolicyHash,
		Stages:       StageTimes{AcceptedAt: ts(j.CreatedAt), ExtractingAt: ts(j.ExtractingAt), ExtractedAt: ts(j.ExtractedAt), CommittedAt: ts(j.CommittedAt)},
		TextPurgedAt: ts(d.TextPurgedAt),
		AudioFields:  audioFields(d.Audio),
	}
	if j.ReviewRecordID != "" {
		id := j.ReviewRecordID
		v.ReviewRecordID = &id
	}
	v.Attempts = attemptViews(d.Attempts)
	for _, p := range d.Parts {
		v.Parts = append(v.Parts, PartView{ID: p.PartID, JobID: p.JobID, Processor: p.Processor, State: string(p.State),
			Attempts: attemptViews(p.Attempts)})
	}
	v.Deliveries = []DeliveryView{}
	for _, o := range d.Deliveries {
		dv := DeliveryView{Destination: o.DestinationID, Event: o.Event, WebhookID: o.WebhookID, Sequence: o.Sequence,
			State: string(o.State), Attempts: o.Attempts, LastStatus: o.LastStatus, LastError: o.LastError, DeliveredAt: ts(o.DeliveredAt)}
		if o.State == ledger.DeliveryPending {
			dv.NextAttempt = ts(o.NextAttemptAt)
		}
		v.Deliveries = append(v.Deliveries, dv)
	}
	if j.State == stet.JobBlocked && j.BlockedReason != "" {
		why := j.BlockedProcessor + ":" + j.BlockedReason
		v.BlockedReason = &why
	}
	v.BoundaryDecisions = []BoundaryDecisionView{}
	for _, b := range d.Decisions {
		v.BoundaryDecisions = append(v.BoundaryDecisions, BoundaryDecisionView{Actor: b.Actor, Reason: b.Reason, From: b.From, To: b.To,
			PolicyID: b.PolicyID, PolicyHash: b.PolicyHash, At: ts(b.At)})
	}
	if a := d.Artifact; a != nil {
		v.Artifact = &ArtifactView{ID: a.ID, Processor: a.Processor, Model: a.Model, SchemaVersion: a.SchemaVersion, AttemptN: a.AttemptN, CreatedAt: ts(a.CreatedAt),
			RawPurgedAt: ts(a.RawPurgedAt), OutputPurgedAt: ts(a.OutputPurgedAt)}
	}
	return v
}

// attemptViews shapes attempts, oldest first; never null.
func attemptViews(as []stet.Attempt) []AttemptView {
	out := make([]AttemptView, 0, len(as))
	for _, a := range as {
		out = append(out, AttemptView{
			N: a.N, Processor: a.Processor, Model: a.Model, Status: string(a.Status), StatusCode: a.StatusCode,
			FailureClass: string(a.FailureClass), RequestID: a.RequestID, InputTokens: a.InputTokens, OutputTokens: a.OutputTokens,
			LatencyMS: a.LatencyMS, InputSHA256: a.InputSHA256, BatchID: a.BatchID, StartedAt: ts(a.StartedAt), CostUSD: a.CostUSD,
		})
	}
	return out
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	tok := tokenOf(r)
	d, err := s.db.GetJob(r.Context(), tok.Tenant, r.PathValue("job_id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !s.audit(w, r, "job.read", "job", d.Job.ID) {
		return
	}
	writeJSON(w, http.StatusOK, NewJobView(d))
}

// ReportView is GET /v1/sources/{source}/reports/{external_id} and GET /v1/reports/{report_id}.
type ReportView struct {
	ReportID   string         `json:"report_id"`
	Source     string         `json:"source"`
	ExternalID *string        `json:"external_id"`
	Revisions  []RevisionView `json:"revisions"`
}

// RevisionView is one revision of a report.
type RevisionView struct {
	Revision       int64   `json:"revision"`
	JobID          string  `json:"job_id"`
	State          string  `json:"state"`
	ReviewRecordID *string `json:"review_record_id"`
	Authoritative  bool    `json:"authoritative"`
	ReceivedAt     string  `json:"received_at"`
	TextPurgedAt   string  `json:"text_purged_at,omitempty"`
	AudioFields
}

// NewReportView shapes a report for the API and the CLI.
func NewReportView(d *ledger.ReportDetail) ReportView {
	v := ReportView{ReportID: d.Report.ID, Source: d.Report.SourceID, Revisions: []RevisionView{}}
	if d.Report.ExternalID != "" {
		e := d.Report.ExternalID
		v.ExternalID = &e
	}
	for _, rv := range d.Revisions {
		x := RevisionView{Revision: rv.Revision, JobID: rv.JobID, State: string(rv.State), Authoritative: rv.Authoritative, ReceivedAt: ts(rv.ReceivedAt),
			TextPurgedAt: ts(rv.TextPurgedAt), AudioFields: audioFields(rv.Audio)}
		if rv.ReviewRecordID != "" {
			id := rv.ReviewRecordID
			x.ReviewRecordID = &id
		}
		v.Revisions = append(v.Revisions, x)
	}
	return v
}

func (s *Server) getReportByExternalID(w http.ResponseWriter, r *http.Request) {
	s.serveReport(w, r, ledger.ReportLookup{SourceID: r.PathValue("source"), ExternalID: r.PathValue("external_id")})
}

func (s *Server) getReport(w http.ResponseWriter, r *http.Request) {
	s.serveReport(w, r, ledger.ReportLookup{ReportID: r.PathValue("report_id")})
}

func (s *Server) serveReport(w http.ResponseWriter, r *http.Request, l ledger.ReportLookup) {
	l.Tenant, l.Now = tokenOf(r).Tenant, s.clock.Now()
	d, err := s.db.GetReport(r.Context(), l)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !s.audit(w, r, "report.read", "report", d.Report.ID) {
		return
	}
	writeJSON(w, http.StatusOK, NewReportView(d))
}

// RecordView is one review record.
type RecordView struct {
	ID             string          `json:"id"`
	JobID          string          `json:"job_id"`
	ReportID       string          `json:"report_id"`
	Source         string          `json:"source"`
	Revision       int64           `json:"revision"`
	Kind           string          `json:"kind"`
	State          string          `json:"state"`
	Authoritative  bool            `json:"authoritative"`
	Classification json.RawMessage `json:"classification"`
	FailureClass   *string         `json:"failure_class"`
	Decision       *string         `json:"decision,omitempty"`
	DecidedBy      string          `json:"decided_by,omitempty"`
	DecidedAt      string          `json:"decided_at,omitempty"`
	Note           string          `json:"note,omitempty"`
	CreatedAt      string          `json:"created_at"`
	// ClassificationPurgedAt and NotePurgedAt: retention purged them; the
	// classification then reads null.
	ClassificationPurgedAt string `json:"classification_purged_at,omitempty"`
	NotePurgedAt           string `json:"note_purged_at,omitempty"`
	// Provenance says, for a record of a profile with parts
	// (docs/design.md §16), which part, processor and model produced each
	// top-level field; FailedPart names the part that failed for good
	// (a manual record). Both absent for other records.
	Provenance map[string]stet.FieldSource `json:"provenance,omitempty"`
	FailedPart string                      `json:"failed_part,omitempty"`
	// Superseded says a newer revision of the report exists
	// (docs/design.md §17).
	Superseded bool `json:"superseded"`
	// Decisions are every decision on the record, oldest first: in the
	// answers about one record, absent from lists.
	Decisions []DecisionView `json:"decisions,omitzero"`
}

// DecisionView is one decision on a review record.
type DecisionView struct {
	Decision       string          `json:"decision"`
	Classification json.RawMessage `json:"classification"`
	Note           string          `json:"note,omitempty"`
	Actor          string          `json:"actor"`
	At             string          `json:"at"`
}

// NewRecordView shapes a review record.
func NewRecordView(r *stet.ReviewRecord) RecordView {
	v := RecordView{ID: r.ID, JobID: r.JobID, ReportID: r.ReportID, Source: r.SourceID, Revision: r.Revision,
		Kind: string(r.Kind), State: string(r.State), Authoritative: r.Authoritative, Classification: r.Classification,
		DecidedBy: r.DecidedBy, DecidedAt: ts(r.DecidedAt), Note: r.Note, CreatedAt: ts(r.CreatedAt),
		ClassificationPurgedAt: ts(r.ClassificationPurgedAt), NotePurgedAt: ts(r.NotePurgedAt),
		Provenance: r.Provenance, FailedPart: r.FailedPart, Superseded: r.Superseded}
	if r.Decisions != nil {
		v.Decisions = make([]DecisionView, 0, len(r.Decisions))
		for _, d := range r.Decisions {
			dv := DecisionView{Decision: string(d.Decision), Classification: d.Classification, Note: d.Note, Actor: d.Actor, At: ts(d.At)}
			if len(dv.Classification) == 0 {
				dv.Classification = json.RawMessage("null")
			}
			v.Decisions = append(v.Decisions, dv)
		}
	}
	if len(v.Classification) == 0 {
		v.Classification = json.RawMessage("null")
	}
	if r.FailureClass != "" {
		f := string(r.FailureClass)
		v.FailureClass = &f
	}
	if r.Decision != "" {
		d := string(r.Decision)
		v.Decision = &d
	}
	return v
}

func (s *Server) listReview(w http.ResponseWriter, r *http.Request) {
	tok := tokenOf(r)
	q := r.URL.Query()
	f := ledger.ReviewFilter{Tenant: tok.Tenant, Source: q.Get("source"), After: q.Get("cursor")}
	if st := q.Get("state"); st != "" {
		if st != string(stet.RecordPending) && st != string(stet.RecordDecided) {
			s.problem(w, r, http.StatusBadRequest, "invalid-query", "state must be pending or decided")
			return
		}
		f.State = stet.RecordState(st)
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 500 {
			s.problem(w, r, http.StatusBadRequest, "invalid-query", "limit must be between 1 and 500")
			return
		}
		f.Limit = n
	}
	switch q.Get("superseded") {
	case "", "false":
	case "true":
		f.Superseded = true
	default:
		s.problem(w, r, http.StatusBadRequest, "invalid-query", "superseded must be true or false")
		return
	}
	recs, next, err := s.db.ListReview(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := struct {
		Records    []RecordView `json:"records"`
		NextCursor *string      `json:"next_cursor"`
	}{Records: []RecordView{}}
	for _, rec := range recs {
		out.Records = append(out.Records, NewRecordView(rec))
	}
	if next != "" {
		out.NextCursor = &next
	}
	// Every listed record is one audit row (its ID, never a count); an
	// empty page is one row with no object.
	entries := make([]ledger.AuditEntry, 0, max(1, len(recs)))
	for _, rec := range recs {
		entries = append(entries, s.auditEntry(r, tok, "review.list", "review_record", rec.ID))
	}
	if len(entries) == 0 {
		entries = append(entries, s.auditEntry(r, tok, "review.list", "review_record", ""))
	}
	if !s.auditAll(w, r, entries) {
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getReview(w http.ResponseWriter, r *http.Request) {
	tok := tokenOf(r)
	rec, err := s.db.GetReview(r.Context(), tok.Tenant, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !s.audit(w, r, "review.read", "review_record", rec.ID) {
		return
	}
	writeJSON(w, http.StatusOK, NewRecordView(rec))
}

// decodeBody decodes r's JSON body, at most limit bytes, into v. An
// unknown field, malformed JSON or anything after the object is answered
// here with a 400 problem, and it returns false.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		s.problem(w, r, http.StatusBadRequest, "invalid-body", jsonProblem(err))
		return false
	}
	if _, err := dec.Token(); err != io.EOF {
		s.problem(w, r, http.StatusBadRequest, "invalid-body", "the body holds something after its JSON object")
		return false
	}
	return true
}

type decisionBody struct {
	Decision       stet.Decision   `json:"decision"`
	Classification json.RawMessage `json:"classification"`
	Note           string          `json:"note"`
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request) {
	tok := tokenOf(r)
	var in decisionBody
	if !s.decodeBody(w, r, 256<<10, &in) {
		return
	}
	out, err := s.Decide(r.Context(), DecisionParams{Tenant: tok.Tenant, Actor: tok.Actor(), RecordID: r.PathValue("id"),
		Decision: in.Decision, Classification: in.Classification, Note: in.Note})
	var ref *Refusal
	if errors.As(err, &ref) {
		s.problem(w, r, ref.Status, ref.Slug, ref.Detail)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewRecordView(out))
}

type reopenBody struct {
	Reason string `json:"reason"`
}

// reopen puts a decided record back to pending (docs/design.md §17).
func (s *Server) reopen(w http.ResponseWriter, r *http.Request) {
	tok := tokenOf(r)
	var in reopenBody
	if !s.decodeBody(w, r, 8<<10, &in) {
		return
	}
	if strings.TrimSpace(in.Reason) == "" || len(in.Reason) > 1024 {
		s.problem(w, r, http.StatusBadRequest, "invalid-body", "reason is required, at most 1024 bytes")
		return
	}
	req := AuditRequestOf(r)
	out, err := s.db.Reopen(r.Context(), ledger.ReopenParams{Tenant: tok.Tenant, RecordID: r.PathValue("id"), Actor: tok.Actor(),
		Reason: in.Reason, Now: s.clock.Now(), Route: req.Route, RemoteAddr: req.RemoteAddr, RequestID: req.RequestID})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewRecordView(out))
}

func joinProblems(ps []string) string {
	if len(ps) > 5 {
		ps = append(ps[:5:5], "…")
	}
	out := ""
	for i, p := range ps {
		if i > 0 {
			out += "; "
		}
		out += p
	}
	return out
}

// invariants answers an admin with every tenant's violations and a tenant
// with its own and the cluster-wide ones, filtered in SQL.
func (s *Server) invariants(w http.ResponseWriter, r *http.Request) {
	vs, err := s.Violations(r.Context(), tokenOf(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := struct {
		OK         bool               `json:"ok"`
		Violations []ledger.Violation `json:"violations"`
	}{OK: len(vs) == 0, Violations: vs}
	if out.Violations == nil {
		out.Violations = []ledger.Violation{}
	}
	if !s.audit(w, r, "invariants.read", "invariants", "") {
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// audit appends an audit entry for a read before the answer is written. It
// fails closed: a read that cannot be audited is not answered.
func (s *Server) audit(w http.ResponseWriter, r *http.Request, action, objectType, objectID string) bool {
	return s.auditAll(w, r, []ledger.AuditEntry{s.auditEntry(r, tokenOf(r), action, objectType, objectID)})
}

// auditAll appends entries in one transaction, failing closed like audit.
func (s *Server) auditAll(w http.ResponseWriter, r *http.Request, entries []ledger.AuditEntry) bool {
	if err := s.db.AuditAll(r.Context(), entries); err != nil {
		s.fail(w, r, &stet.Error{Code: stet.EUnavailable, Message: "the read could not be audited; retry later", Cause: err})
		return false
	}
	return true
}
