// Package api is stet's HTTP API (DESIGN §7): signed intake, the read,
// review and operate endpoints, health and metrics. Errors are
// application/problem+json with a stable type.
//
// The API never echoes document text: not in a problem body, not in a log
// line. Logged request paths are route patterns, never the concrete path,
// which may hold an external ID.
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/metrics"
	"github.com/stetlabs/stet/schema"
)

// Acceptor records deliveries durably: the pipeline's group-committing intake.
type Acceptor interface {
	Accept(ctx context.Context, p ledger.AcceptParams) (ledger.AcceptResult, error)
}

// Source is a configured webhook source, ready to serve.
type Source struct {
	ID             string
	Tenant         string
	Identity       stet.IdentityMode
	Revisions      stet.RevisionMode
	Verifier       *Verifier
	PolicyID       string
	PolicyHash     string
	ProfileID      string
	ProfileVersion int
	Mode           stet.DispatchMode // sync | batch
	// Schema validates a reviewer's override classification.
	Schema *schema.Schema
}

// Token is a bearer token scoped to a tenant and a role.
type Token struct {
	Name   string
	Tenant string
	Role   stet.Role
	Value  string
}

// Config wires a Server.
type Config struct {
	DB        *ledger.DB
	Acceptor  Acceptor
	Sources   []*Source
	Tokens    []Token
	Logger    *slog.Logger
	Metrics   *metrics.Metrics
	Clock     stet.Clock
	BodyLimit int64 // intake body limit in bytes; default 1 MiB
	SLA       time.Duration
	// Deleter records deletions (the pipeline); nil answers 503.
	Deleter Deleter
	// Discovery is the discovery document of every tenant, built from the
	// config; each caller sees its own tenant's sources.
	Discovery *Discovery
	// HealthOnly serves only /healthz, /readyz and /metrics: a worker
	// process takes no deliveries and answers no reads.
	HealthOnly bool
}

// Server serves the API.
type Server struct {
	cfg     Config
	db      *ledger.DB
	log     *slog.Logger
	clock   stet.Clock
	sources map[string]*Source
	tokens  []tokenDigest
	mux     *http.ServeMux
}

type tokenDigest struct {
	digest [32]byte
	tok    Token
}

// New builds a Server.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = stet.SystemClock{}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(nil, nil)
	}
	if cfg.BodyLimit <= 0 {
		cfg.BodyLimit = 1 << 20
	}
	if cfg.SLA <= 0 {
		cfg.SLA = time.Hour
	}
	s := &Server{cfg: cfg, db: cfg.DB, log: cfg.Logger, clock: cfg.Clock, sources: map[string]*Source{}, mux: http.NewServeMux()}
	for _, src := range cfg.Sources {
		s.sources[src.ID] = src
	}
	for _, t := range cfg.Tokens {
		s.tokens = append(s.tokens, tokenDigest{digest: sha256.Sum256([]byte(t.Value)), tok: t})
	}
	s.routes()
	return s
}

func (s *Server) routes() {
	s.handle("GET /healthz", s.healthz)
	s.handle("GET /readyz", s.readyz)
	s.mux.Handle("GET /metrics", s.cfg.Metrics.Handler())
	s.handle("/", func(w http.ResponseWriter, r *http.Request) {
		s.problem(w, r, http.StatusNotFound, "not-found", "no such endpoint")
	})
	if s.cfg.HealthOnly {
		return
	}
	s.handle("POST /v1/sources/{source}/reports", s.intake)
	s.handle("GET /v1/jobs/{job_id}", s.auth(stet.RoleReader, s.getJob))
	s.handle("GET /v1/sources/{source}/reports/{external_id}", s.auth(stet.RoleReader, s.getReportByExternalID))
	s.handle("GET /v1/reports/{report_id}", s.auth(stet.RoleReader, s.getReport))
	s.handle("GET /v1/review", s.auth(stet.RoleReader, s.listReview))
	s.handle("GET /v1/review/{id}", s.auth(stet.RoleReader, s.getReview))
	s.handle("POST /v1/review/{id}/decision", s.auth(stet.RoleReviewer, s.decide))
	s.handle("DELETE /v1/sources/{source}/reports/{external_id}", s.auth(stet.RoleOperator, s.deleteReportByExternalID))
	s.handle("DELETE /v1/reports/{report_id}", s.auth(stet.RoleOperator, s.deleteReportByID))
	s.handle("GET /v1/deletions/{id}", s.auth(stet.RoleReader, s.getDeletion))
	s.handle("GET /v1/discovery", s.auth(stet.RoleReader, s.discovery))
	s.handle("GET /v1/invariants", s.auth(stet.RoleOperator, s.invariants))
	s.handle("GET /v1/dispatch", s.auth(stet.RoleOperator, s.listDispatch))
	s.handle("POST /v1/dispatch/pause", s.auth(stet.RoleOperator, s.pauseDispatch))
	s.handle("POST /v1/dispatch/resume", s.auth(stet.RoleOperator, s.resumeDispatch))
}

// handle registers h with a log line per request that names the route
// pattern, never the concrete path.
func (s *Server) handle(pattern string, h http.HandlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h(sw, r)
		s.log.Info("http request", "route", pattern, "status_code", sw.status, "duration_ms", time.Since(start).Milliseconds())
	})
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Problem is an RFC 9457 problem body.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// ProblemType returns the stable type URI of a problem slug.
func ProblemType(slug string) string { return "urn:stet:problem:" + slug }

// problem writes a problem. detail must be caller-safe: never text.
func (s *Server) problem(w http.ResponseWriter, _ *http.Request, status int, slug, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Problem{Type: ProblemType(slug), Title: http.StatusText(status), Status: status, Detail: detail})
}

// statusOf maps an error code to an HTTP status.
func statusOf(code stet.ErrorCode) int {
	switch code {
	case stet.EInvalid:
		return http.StatusBadRequest
	case stet.ENotFound:
		return http.StatusNotFound
	case stet.EConflict:
		return http.StatusConflict
	case stet.EUnauthorized:
		return http.StatusUnauthorized
	case stet.EForbidden:
		return http.StatusForbidden
	case stet.EGone:
		return http.StatusGone
	case stet.ETooLarge:
		return http.StatusRequestEntityTooLarge
	case stet.EUnsupported:
		return http.StatusUnprocessableEntity
	case stet.EUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// fail writes err as a problem: its caller-safe message, with the internal
// cause in the log.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := stet.ErrorCodeOf(err)
	status := statusOf(code)
	if status >= 500 {
		s.log.Error("request failed", "route", r.Pattern, "err", err)
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	s.problem(w, r, status, strings.ReplaceAll(string(code), "_", "-"), stet.ErrorMessageOf(err))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

type ctxKey struct{}

// auth requires a bearer token whose role allows need.
func (s *Server) auth(need stet.Role, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || raw == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stet"`)
			s.problem(w, r, http.StatusUnauthorized, "unauthorized", "a bearer token is required")
			return
		}
		d := sha256.Sum256([]byte(raw))
		var found *Token
		for i := range s.tokens {
			if subtle.ConstantTimeCompare(d[:], s.tokens[i].digest[:]) == 1 {
				found = &s.tokens[i].tok
			}
		}
		if found == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stet", error="invalid_token"`)
			s.problem(w, r, http.StatusUnauthorized, "unauthorized", "the bearer token is not valid")
			return
		}
		if !found.Role.Allows(need) {
			s.problem(w, r, http.StatusForbidden, "forbidden", "this token's role may not do this")
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, found)))
	}
}

func tokenOf(r *http.Request) *Token {
	t, _ := r.Context().Value(ctxKey{}).(*Token)
	return t
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.db.Ping(ctx); err != nil {
		s.log.Warn("not ready: database", "err", err)
		s.problem(w, r, http.StatusServiceUnavailable, "not-ready", "database unreachable")
		return
	}
	ok, err := s.db.MigrationsCurrent(ctx)
	if err != nil || !ok {
		s.problem(w, r, http.StatusServiceUnavailable, "not-ready", "ledger migrations are not current")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

var errNotFound = &stet.Error{Code: stet.ENotFound, Message: "not found", Cause: stet.ErrNotFound}

func isNotFound(err error) bool { return errors.Is(err, stet.ErrNotFound) }
