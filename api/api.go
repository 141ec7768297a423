// Package api is stet's HTTP API (docs/design.md §7): signed intake, the read,
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
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/metrics"
	"github.com/stetlabs/stet/schema"
	"github.com/stetlabs/stet/webhook"
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
	Verifier       *webhook.Verifier
	PolicyID       string
	PolicyHash     string
	ProfileID      string
	ProfileVersion int
	Mode           stet.DispatchMode // sync | batch
	// Audio says the source takes audio reports (docs/design.md §19),
	// whose bodies may be up to AudioBodyLimit bytes.
	Audio          bool
	AudioBodyLimit int64
	// Schema validates a reviewer's override classification.
	Schema *schema.Schema
}

// Token is a bearer token scoped to a tenant and a role, or an admin's.
type Token struct {
	Name   string
	Tenant string
	Role   stet.Role
	Value  string
	// Admin marks a cluster-wide admin token (config admins:): it has no
	// tenant and no role, may pause and resume any scope and sees every
	// tenant's pauses and invariants, and reads no tenant's records.
	Admin bool
}

// Admin is a cluster-wide admin token (config admins:).
type Admin struct {
	Name  string
	Value string
}

// Config wires a Server.
type Config struct {
	DB       *ledger.DB
	Acceptor Acceptor
	Sources  []*Source
	Tokens   []Token
	Admins   []Admin
	// IntakeLimits are per-tenant intake quotas, by tenant id; a tenant
	// without one is not limited.
	IntakeLimits map[string]IntakeLimit
	Logger       *slog.Logger
	Metrics      *metrics.Metrics
	Clock        stet.Clock
	BodyLimit    int64 // intake body limit in bytes; default 1 MiB
	SLA          time.Duration
	// Deleter records deletions (the pipeline); nil answers 503.
	Deleter Deleter
	// Discovery is the discovery document of every tenant, built from the
	// config; each caller sees its own tenant's sources.
	Discovery *Discovery
	// HealthOnly serves only /healthz, /readyz and /metrics: a worker
	// process takes no deliveries and answers no reads.
	HealthOnly bool
	// Manual converts waiting and blocked jobs to manual review records for
	// POST /v1/dispatch/manual (the pipeline); nil answers 503.
	Manual ManualConverter
	// Rerouter moves blocked jobs by an operator's boundary decision for
	// POST /v1/dispatch/reroute (the pipeline); nil answers 503.
	Rerouter Rerouter
	// NoMetrics leaves /metrics off this server (404): config
	// metrics_listen serves it on a listener of its own.
	NoMetrics bool
	// TracerProvider makes a server span per request, named by its route
	// pattern; nil traces nothing.
	TracerProvider trace.TracerProvider
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
	quota   *intakeLimiter
	// patterns are the router's registered patterns (Routes).
	patterns []string
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
	for _, a := range cfg.Admins {
		t := Token{Name: a.Name, Value: a.Value, Admin: true}
		s.tokens = append(s.tokens, tokenDigest{digest: sha256.Sum256([]byte(t.Value)), tok: t})
	}
	s.quota = newIntakeLimiter(cfg.IntakeLimits)
	s.routes()
	return s
}

func (s *Server) routes() {
	s.handle("GET /healthz", s.healthz)
	s.handle("GET /readyz", s.readyz)
	if !s.cfg.NoMetrics {
		s.mux.Handle("GET /metrics", s.cfg.Metrics.Handler())
		s.patterns = append(s.patterns, "GET /metrics")
	}
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
	s.handle("POST /v1/review/{id}/reopen", s.auth(stet.RoleOperator, s.reopen))
	s.handle("GET /v1/costs", s.auth(stet.RoleOperator, s.costs))
	s.handle("DELETE /v1/sources/{source}/reports/{external_id}", s.auth(stet.RoleOperator, s.deleteReportByExternalID))
	s.handle("DELETE /v1/reports/{report_id}", s.auth(stet.RoleOperator, s.deleteReportByID))
	s.handle("GET /v1/deletions/{id}", s.auth(stet.RoleReader, s.getDeletion))
	s.handle("POST /v1/deletions/{id}/tasks/{copy}/confirm", s.auth(stet.RoleOperator, s.confirmTask))
	s.handle("GET /v1/discovery", s.auth(stet.RoleReader, s.discovery))
	s.handle("GET /v1/invariants", s.authAdmin(stet.RoleOperator, s.invariants))
	s.handle("GET /v1/audit", s.authAdmin(stet.RoleOperator, s.listAudit))
	s.handle("GET /v1/dispatch", s.authAdmin(stet.RoleOperator, s.listDispatch))
	s.handle("POST /v1/dispatch/pause", s.authAdmin(stet.RoleOperator, s.pauseDispatch))
	s.handle("POST /v1/dispatch/resume", s.authAdmin(stet.RoleOperator, s.resumeDispatch))
	s.handle("POST /v1/dispatch/manual", s.authAdmin(stet.RoleOperator, s.manualDispatch))
	s.handle("POST /v1/dispatch/reroute", s.authAdmin(stet.RoleOperator, s.rerouteDispatch))
	s.handle("GET /v1/openapi.json", s.openapi)
}

type requestIDKey struct{}

// requestID returns the request's ID (the X-Request-Id stet answered with).
func requestID(r *http.Request) string {
	id, _ := r.Context().Value(requestIDKey{}).(string)
	return id
}

// handle registers h with a request ID (answered as X-Request-Id, never
// taken from the client) that every audit row of the request carries with
// the route pattern and the remote address (ledger.WithAuditRequest), a log
// line per request that names the route pattern, never the concrete path,
// and a recovery that turns a panic into a 500 problem logged with the
// request ID (never the panic's value, which may hold text).
func (s *Server) handle(pattern string, h http.HandlerFunc) {
	s.patterns = append(s.patterns, pattern)
	s.mux.Handle(pattern, s.traced(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := stet.NewID("req", start)
		w.Header().Set("X-Request-Id", id)
		trace.SpanFromContext(r.Context()).SetAttributes(attribute.String("stet.request_id", id))
		ctx := context.WithValue(r.Context(), requestIDKey{}, id)
		ctx = ledger.WithAuditRequest(ctx, ledger.AuditRequest{Route: pattern, RemoteAddr: r.RemoteAddr, RequestID: id})
		r = r.WithContext(ctx)
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("handler panic", "route", pattern, "request_id", id)
				if !sw.wrote {
					s.problem(sw, r, http.StatusInternalServerError, "internal", "internal error")
				}
			}
			s.log.Info("http request", "route", pattern, "status_code", sw.status, "request_id", id, "duration_ms", time.Since(start).Milliseconds())
		}()
		h(sw, r)
	})))
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	w.status, w.wrote = code, true
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
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
	if status == http.StatusNotFound && tokenOf(r) != nil {
		// Another tenant's object answers 404 like a missing one; both are
		// audited as denied, so probing shows in the log.
		s.auditDenied(r, tokenOf(r), "denied.not_found")
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

// auth requires a tenant's bearer token whose role allows need. An admin
// token is refused (403): admins act on the cluster, never read a tenant's
// records.
func (s *Server) auth(need stet.Role, h http.HandlerFunc) http.HandlerFunc {
	return s.authorize(need, false, h)
}

// authAdmin is auth for the cluster-wide routes, which an admin token may
// also use; the handler decides what each may see or do.
func (s *Server) authAdmin(need stet.Role, h http.HandlerFunc) http.HandlerFunc {
	return s.authorize(need, true, h)
}

func (s *Server) authorize(need stet.Role, admins bool, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || raw == "" {
			s.auditDenied(r, nil, "denied.unauthorized")
			w.Header().Set("WWW-Authenticate", `Bearer realm="stet"`)
			s.problem(w, r, http.StatusUnauthorized, "unauthorized", "a bearer token is required")
			return
		}
		found, _ := s.Authenticate(raw)
		if found == nil {
			s.auditDenied(r, nil, "denied.unauthorized")
			w.Header().Set("WWW-Authenticate", `Bearer realm="stet", error="invalid_token"`)
			s.problem(w, r, http.StatusUnauthorized, "unauthorized", "the bearer token is not valid")
			return
		}
		if found.Admin && !admins {
			s.auditDenied(r, found, "denied.forbidden")
			s.problem(w, r, http.StatusForbidden, "forbidden", "an admin token acts on the cluster and reads no tenant's records")
			return
		}
		if !found.Admin && !found.Role.Allows(need) {
			s.auditDenied(r, found, "denied.forbidden")
			s.problem(w, r, http.StatusForbidden, "forbidden", "this token's role may not do this")
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, found)))
	}
}

// actorOf names a token in the audit log.
func actorOf(t *Token) string {
	switch {
	case t == nil:
		return "anonymous"
	case t.Admin:
		return "admin:" + t.Name
	default:
		return "token:" + t.Name
	}
}

// tenantOf is the audit log's tenant of a token: "*" for an admin or none.
func tenantOf(t *Token) string {
	if t == nil || t.Admin {
		return "*"
	}
	return t.Tenant
}

// auditDenied records a refused request by t (nil: no or an unknown
// token) through AuditDenied.
func (s *Server) auditDenied(r *http.Request, t *Token, action string) {
	s.AuditDenied(r, tenantOf(t), actorOf(t), action)
}

// wellFormedID reports whether v looks like a stet ID with prefix.
func wellFormedID(v, prefix string) bool {
	rest, ok := strings.CutPrefix(v, prefix)
	if !ok || len(rest) == 0 || len(rest) > 40 {
		return false
	}
	for _, c := range rest {
		if (c < '0' || c > '9') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return true
}

// auditEntry is the row of a served request by t (AuditRow).
func (s *Server) auditEntry(r *http.Request, t *Token, action, objectType, objectID string) ledger.AuditEntry {
	return AuditRow(r, AuditEvent{Tenant: tenantOf(t), Actor: actorOf(t), Action: action, ObjectType: objectType, ObjectID: objectID,
		Outcome: ledger.AuditOK}, s.clock.Now())
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
