package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// What the API and the review UI (package web) share: the token check, the
// review decision and the dispatch scope rule live here once, and both
// call them.

// Refusal is a request refused before anything is stored: the HTTP status,
// the problem's slug and a caller-safe detail (never text).
type Refusal struct {
	Status int
	Slug   string
	Detail string
}

func (r *Refusal) Error() string { return r.Detail }

func refuse(status int, slug, detail string) *Refusal {
	return &Refusal{Status: status, Slug: slug, Detail: detail}
}

// Actor is the token's audit actor.
func (t *Token) Actor() string { return "token:" + t.Name }

// Authenticate returns the configured token whose value is raw, comparing
// digests in constant time.
func (s *Server) Authenticate(raw string) (*Token, bool) {
	if raw == "" {
		return nil, false
	}
	return s.tokenByDigest(sha256.Sum256([]byte(raw)))
}

// TokenByHash returns the configured token whose SHA-256 (hex) is digest:
// a UI session opened with a token lasts only while the token is configured.
func (s *Server) TokenByHash(digest string) (*Token, bool) {
	b, err := hex.DecodeString(digest)
	if err != nil || len(b) != sha256.Size {
		return nil, false
	}
	return s.tokenByDigest([32]byte(b))
}

func (s *Server) tokenByDigest(d [32]byte) (*Token, bool) {
	var found *Token
	for i := range s.tokens {
		if subtle.ConstantTimeCompare(d[:], s.tokens[i].digest[:]) == 1 {
			found = &s.tokens[i].tok
		}
	}
	return found, found != nil
}

// KnownTenant reports whether a token or a source names tenant.
func (s *Server) KnownTenant(tenant string) bool {
	for _, t := range s.tokens {
		if t.tok.Tenant == tenant {
			return true
		}
	}
	for _, src := range s.sources {
		if src.Tenant == tenant {
			return true
		}
	}
	return false
}

// Source returns the configured source id, or nil.
func (s *Server) Source(id string) *Source { return s.sources[id] }

// DecisionParams is one reviewer's decision on a review record.
type DecisionParams struct {
	Tenant         string
	Actor          string // the audit actor: "token:NAME" or "oidc:SUBJECT"
	RecordID       string
	Decision       stet.Decision
	Classification json.RawMessage // override, and a manual record's approval
	Note           string
}

const maxNote = 4096

// Decide checks a decision and records it with its audit entry: the
// decision is one of approve, override or reject; a classification is
// present exactly when the decision needs one and matches the profile
// schema. A refused decision is a *Refusal and stores nothing; a record of
// another tenant is not found.
func (s *Server) Decide(ctx context.Context, p DecisionParams) (*stet.ReviewRecord, error) {
	if !slices.Contains(stet.Decisions, p.Decision) {
		return nil, refuse(http.StatusBadRequest, "invalid-body", "decision must be approve, override or reject")
	}
	if len(p.Note) > maxNote {
		return nil, refuse(http.StatusBadRequest, "invalid-body", "note is longer than 4096 bytes")
	}
	rec, err := s.db.GetReview(ctx, p.Tenant, p.RecordID)
	if err != nil {
		return nil, err
	}
	class := bytes.TrimSpace(p.Classification)
	if bytes.Equal(class, []byte("null")) {
		class = nil
	}
	needClass := p.Decision == stet.DecisionOverride || (p.Decision == stet.DecisionApprove && rec.Kind == stet.RecordManual)
	switch {
	case needClass && len(class) == 0:
		return nil, refuse(http.StatusBadRequest, "invalid-body", "classification is required for an override, and to approve a manual record")
	case len(class) > 0 && p.Decision == stet.DecisionReject:
		return nil, refuse(http.StatusBadRequest, "invalid-body", "a rejection carries no classification")
	case len(class) > 0 && p.Decision == stet.DecisionApprove && rec.Kind == stet.RecordExtracted:
		return nil, refuse(http.StatusBadRequest, "invalid-body", "approve keeps the extracted classification; use override to change it")
	}
	if len(class) > 0 {
		src := s.sources[rec.SourceID]
		if src == nil || src.Schema == nil {
			return nil, refuse(http.StatusConflict, "unknown-profile", "the record's source is no longer configured")
		}
		if problems := src.Schema.Validate(class); len(problems) > 0 {
			return nil, refuse(http.StatusBadRequest, "invalid-classification", "classification does not match the profile schema: "+joinProblems(problems))
		}
	}
	out, err := s.db.Decide(ctx, ledger.DecideParams{
		Tenant: p.Tenant, RecordID: rec.ID, Decision: p.Decision, Classification: json.RawMessage(class),
		Note: p.Note, Actor: p.Actor, Now: s.clock.Now(),
	})
	if err == nil && len(out.Decisions) == 1 {
		// The record's first decision: the time from the revision's
		// acceptance (a failed read only loses the observation).
		if d, jerr := s.db.GetJob(ctx, p.Tenant, out.JobID); jerr == nil {
			s.cfg.Metrics.TimeToDecision.WithLabelValues(out.SourceID).Observe(s.clock.Now().Sub(d.Job.CreatedAt).Seconds())
		}
	}
	return out, err
}

// CheckDispatchScope checks a pause or resume by tok: scope is all,
// processor:ID or tenant:ID; a pause has a reason; a token may name "all",
// any processor, or its own tenant (another tenant's is not found, as every
// other tenant's object is). It returns a *Refusal or nil.
func (s *Server) CheckDispatchScope(ctx context.Context, tok *Token, scope, reason string, needReason, resume bool) error {
	if !ledger.ValidScope(scope) {
		return refuse(http.StatusBadRequest, "invalid-body", "scope must be all, processor:ID or tenant:ID")
	}
	if needReason && strings.TrimSpace(reason) == "" {
		return refuse(http.StatusBadRequest, "invalid-body", "reason is required")
	}
	if len(reason) > 1024 {
		return refuse(http.StatusBadRequest, "invalid-body", "reason is longer than 1024 bytes")
	}
	if tok.Admin {
		return nil
	}
	if scope != "tenant:"+tok.Tenant {
		return refuse(http.StatusForbidden, "forbidden", "a tenant's operator may pause and resume only tenant:"+tok.Tenant+"; other scopes need an admin token")
	}
	if resume {
		// A pause stet set itself (after an auth or quota failure) waits
		// for an admin, whatever its scope.
		pauses, err := s.db.Pauses(ctx)
		if err != nil {
			return err
		}
		for _, p := range pauses {
			if p.Scope == scope && p.PausedBy == "stet" {
				return refuse(http.StatusForbidden, "forbidden", "stet paused this scope after a processor failure; only an admin may resume it")
			}
		}
	}
	return nil
}

// Violations runs the invariant checks tok may see: an admin every
// tenant's, a tenant's token its own — the batches holding its jobs, with
// its items counted, among them — and the global pauses (filtered in SQL,
// so a noisy tenant cannot hide a quiet one's).
func (s *Server) Violations(ctx context.Context, tok *Token) ([]ledger.Violation, error) {
	p := ledger.CheckParams{Now: s.clock.Now(), SLA: s.cfg.SLA, LeaseGrace: time.Minute, PauseLimit: time.Hour}
	var vs []ledger.Violation
	var err error
	if tok.Admin {
		vs, err = s.db.CheckInvariants(ctx, p)
	} else {
		vs, err = s.db.CheckTenantInvariants(ctx, tok.Tenant, p)
	}
	if vs == nil {
		vs = []ledger.Violation{}
	}
	return vs, err
}

// MountUI serves the review UI h under /ui/ and redirects GET / to the
// queue. Call it before serving.
func (s *Server) MountUI(h http.Handler) {
	s.handle("/ui/", h.ServeHTTP)
	s.handle("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/review", http.StatusSeeOther)
	})
}
