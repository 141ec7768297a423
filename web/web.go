// Package web is stet's review UI (docs/design.md §12): server-rendered pages under
// /ui/ for the reviewer working the queue and the operator on call, served
// by any api process. Templates and assets are embedded; nothing is fetched
// from elsewhere, so the UI works offline.
//
// Every page runs behind a server-side session (a ledger row holding hashes
// only), every form carries the session's CSRF token, and the pages forbid
// inline script and framing. The UI decides nothing itself: the token check,
// the review decision, the dispatch scope rule, what a tenant may see of the
// pauses, and the audit row of a request are package api's. Every page read,
// decision, pause and refusal is audited with the session's actor and the
// request's route, remote address and request ID, as the API audits the
// same; a page an operator reads shows what the API would show its token.
// It must never log document text, model output or a secret, and never
// render either unescaped.
package web

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/ledger"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Config wires a UI.
type Config struct {
	DB     *ledger.DB
	API    *api.Server // the token check, decisions and scope rules
	Clock  stet.Clock
	Logger *slog.Logger
	// IdleTimeout ends a session idle this long (default 15m); SessionMax
	// ends it this long after login (default 12h).
	IdleTimeout time.Duration
	SessionMax  time.Duration
	// Secure marks the cookies Secure even when a request did not arrive
	// over TLS here (TLS ended by a proxy in front).
	Secure bool
	// OIDC enables single sign-on; nil: token login only.
	OIDC *OIDCConfig
	// Deletions reads deletion records for /ui/deletions/{id}; nil reads
	// the ledger's.
	Deletions DeletionReader
}

// DeletionReader reads a tenant's deletion record: the seam for deletion
// (docs/design.md §7 DELETE …/reports). It returns an ENotFound error for an
// unknown or foreign ID.
type DeletionReader interface {
	Deletion(ctx context.Context, tenant, id string) (*Deletion, error)
}

// Deletion is what the deletion page shows: IDs, states and times only.
type Deletion struct {
	ID          string
	ReportID    string
	Source      string
	State       string
	RequestedAt time.Time
	DoneAt      time.Time
	Tasks       []DeletionTask
}

// DeletionTask is one copy a deletion must remove.
type DeletionTask struct {
	Copy   string
	State  string
	DueAt  time.Time
	DoneAt time.Time
	Reason string
	// ConfirmedBy and Evidence are an operator's, on a copy confirmed gone.
	ConfirmedBy, Evidence string
}

// ledgerDeletions reads deletions from the ledger: the DeletionReader of a
// UI configured without one.
type ledgerDeletions struct{ db *ledger.DB }

func (l ledgerDeletions) Deletion(ctx context.Context, tenant, id string) (*Deletion, error) {
	d, err := l.db.GetDeletion(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	out := &Deletion{ID: d.ID, ReportID: d.ReportID, Source: d.SourceID, State: string(d.State), RequestedAt: d.RequestedAt, DoneAt: d.DoneAt}
	for _, t := range d.Tasks {
		out.Tasks = append(out.Tasks, DeletionTask{Copy: t.Copy, State: string(t.State), DueAt: t.DueAt, DoneAt: t.DoneAt, Reason: t.Reason,
			ConfirmedBy: t.ConfirmedBy, Evidence: t.Evidence})
	}
	return out, nil
}

// UI serves the review UI. It is an http.Handler for the /ui/ tree.
type UI struct {
	cfg   Config
	db    *ledger.DB
	api   *api.Server
	clock stet.Clock
	log   *slog.Logger
	pages map[string]*template.Template
	mux   *http.ServeMux

	oidcMu sync.Mutex
	oidc   *oidcClient // discovered on first use
}

// New builds a UI.
func New(cfg Config) (*UI, error) {
	if cfg.DB == nil || cfg.API == nil {
		return nil, errors.New("web: DB and API are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = stet.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 15 * time.Minute
	}
	if cfg.SessionMax <= 0 {
		cfg.SessionMax = 12 * time.Hour
	}
	if cfg.Deletions == nil {
		cfg.Deletions = ledgerDeletions{cfg.DB}
	}
	u := &UI{cfg: cfg, db: cfg.DB, api: cfg.API, clock: cfg.Clock, log: cfg.Logger, mux: http.NewServeMux()}
	if err := u.parse(); err != nil {
		return nil, err
	}
	u.routes()
	return u, nil
}

func (u *UI) routes() {
	assets, _ := fs.Sub(assetFS, "assets")
	u.mux.Handle("GET /ui/assets/", http.StripPrefix("/ui/assets/", http.FileServerFS(assets)))
	u.handle("GET /ui/login", u.loginPage)
	u.handle("POST /ui/login", u.login)
	u.handle("GET /ui/oidc/start", u.oidcStart)
	u.handle("GET /ui/oidc/callback", u.oidcCallback)
	u.handle("POST /ui/logout", u.session(stet.RoleReader, u.logout))
	u.handle("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/review", http.StatusSeeOther) })
	u.handle("GET /ui/review", u.session(stet.RoleReader, u.queue))
	u.handle("GET /ui/review/{id}", u.session(stet.RoleReader, u.record))
	u.handle("GET /ui/review/{id}/audio", u.session(stet.RoleReader, u.recordAudio))
	u.handle("POST /ui/review/{id}/decision", u.session(stet.RoleReviewer, u.decide))
	u.handle("POST /ui/review/{id}/reopen", u.session(stet.RoleOperator, u.reopen))
	u.handle("GET /ui/dispatch", u.session(stet.RoleOperator, u.dispatch))
	u.handle("POST /ui/dispatch/pause", u.session(stet.RoleOperator, u.pause))
	u.handle("POST /ui/dispatch/resume", u.session(stet.RoleOperator, u.resume))
	u.handle("GET /ui/batches", u.session(stet.RoleOperator, u.batches))
	u.handle("GET /ui/invariants", u.session(stet.RoleOperator, u.invariants))
	u.handle("GET /ui/deletions/{id}", u.session(stet.RoleOperator, u.deletion))
	u.handle("/ui/", func(w http.ResponseWriter, r *http.Request) {
		u.errorPage(w, r, nil, http.StatusNotFound, "Not found", "There is no such page.")
	})
}

// handle registers h under pattern. Every audit row of the request —
// written here or by the ledger (a decision, a pause, a session) — carries
// this route pattern (not the API router's "/ui/"), the remote address and
// the request ID (api.WithAuditRequest).
func (u *UI) handle(pattern string, h http.HandlerFunc) {
	u.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) { h(w, api.WithAuditRequest(r)) })
}

// ServeHTTP implements http.Handler: every answer carries the security
// headers, and none is cached (pages show text).
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if u.secure(r) {
		h.Set("Strict-Transport-Security", "max-age=63072000")
	}
	u.mux.ServeHTTP(w, r)
}

func (u *UI) secure(r *http.Request) bool { return u.cfg.Secure || r.TLS != nil }

// view is what every page template gets.
type view struct {
	Title string
	Nav   string // the active nav entry
	S     *Session
	CSRF  string
	Flash string
	Error string
	Page  any
}

func (u *UI) parse() error {
	funcs := template.FuncMap{
		"ts": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		// usd prints a call's cost, or "—" when its processor has no price.
		"usd": func(c *float64) string {
			if c == nil {
				return "—"
			}
			return fmt.Sprintf("$%.6f", *c)
		},
		"short": func(id string) string {
			if i := strings.IndexByte(id, '_'); i >= 0 && len(id) > i+9 {
				return id[:i+1] + "…" + id[len(id)-8:]
			}
			return id
		},
		"allows":       func(s *Session, role string) bool { return s != nil && s.Role.Allows(stet.Role(role)) },
		"attemptTable": func(label string, as []stet.Attempt) attemptTable { return attemptTable{Label: label, Attempts: as} },
	}
	u.pages = map[string]*template.Template{}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return err
	}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return err
		}
		u.pages[base] = t
	}
	return nil
}

// render writes a page. Template errors go to the log, never to the page.
func (u *UI) render(w http.ResponseWriter, status int, page string, v view) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := u.pages[page].Execute(w, v); err != nil {
		u.log.Error("render page", "page", page, "err", err)
	}
}

type errorView struct {
	Status  int
	Heading string
	Message string
}

func (u *UI) errorPage(w http.ResponseWriter, _ *http.Request, s *Session, status int, heading, msg string) {
	v := view{Title: heading, S: s, Page: errorView{Status: status, Heading: heading, Message: msg}}
	if s != nil {
		v.CSRF = s.csrf
	}
	u.render(w, status, "error", v)
}

// fail answers an error from the ledger or the API as a page: its
// caller-safe message, with an internal cause in the log.
func (u *UI) fail(w http.ResponseWriter, r *http.Request, s *Session, err error) {
	switch stet.ErrorCodeOf(err) {
	case stet.ENotFound:
		if s != nil {
			// Another tenant's object answers 404 like a missing one; both
			// are audited as denied, as the API does, so probing shows.
			u.api.AuditDenied(r, s.Tenant, s.Actor, "denied.not_found")
		}
		u.errorPage(w, r, s, http.StatusNotFound, "Not found", "There is no such record, or it belongs to another tenant.")
	case stet.EGone:
		u.errorPage(w, r, s, http.StatusGone, "Deleted", "This report was deleted; its text, extraction and records are gone.")
	case stet.EConflict:
		u.errorPage(w, r, s, http.StatusConflict, "Conflict", stet.ErrorMessageOf(err))
	case stet.EUnavailable:
		u.errorPage(w, r, s, http.StatusServiceUnavailable, "Unavailable", "The ledger is busy or unreachable; try again shortly.")
	default:
		u.log.Error("ui request failed", "route", r.Pattern, "err", err)
		u.errorPage(w, r, s, http.StatusInternalServerError, "Something went wrong", "The request failed; the log has the cause.")
	}
}
