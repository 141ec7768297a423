package web

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/ledger"
)

// CookieName is the session cookie.
const CookieName = "stet_session"

const loginCookie = "stet_login" // the login form's CSRF token (before a session exists)

// Session is the signed-in person a page is served to.
type Session struct {
	Tenant string
	Role   stet.Role
	Actor  string // the audit actor: token:NAME or oidc:SUBJECT
	row    *ledger.WebSession
	csrf   string
}

// token is the session as the API's rules see a caller: its tenant and
// role, never an admin (an admin token cannot sign in).
func (s *Session) token() *api.Token {
	return &api.Token{Name: s.Actor, Tenant: s.Tenant, Role: s.Role}
}

// Who is the actor as the header shows it.
func (s *Session) Who() string { return s.Actor }

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func hashHex(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

// csrfFor derives a session's CSRF token from its cookie: the server can
// render it on every page while the ledger holds only its hash.
func csrfFor(cookie string) string {
	d := sha256.Sum256([]byte("stet-csrf\x00" + cookie))
	return base64.RawURLEncoding.EncodeToString(d[:])
}

// startSession stores a new session and sets its cookie.
func (u *UI) startSession(w http.ResponseWriter, r *http.Request, s ledger.WebSession) error {
	cookie := randomToken()
	now := u.clock.Now()
	s.IDHash, s.CSRFHash = hashHex(cookie), hashHex(csrfFor(cookie))
	s.CreatedAt, s.LastSeenAt = now, now
	s.IdleUntil, s.ExpiresAt = now.Add(u.cfg.IdleTimeout), now.Add(u.cfg.SessionMax)
	if err := u.db.CreateWebSession(r.Context(), s); err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: cookie, Path: "/ui/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: u.secure(r)})
	return nil
}

func (u *UI) clearCookie(w http.ResponseWriter, r *http.Request, name, path string) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: path, MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: u.secure(r)})
}

// toLogin sends the browser to the login page, remembering where it was
// going (a GET) and why.
func (u *UI) toLogin(w http.ResponseWriter, r *http.Request, why string) {
	q := url.Values{}
	if r.Method == http.MethodGet {
		q.Set("next", r.URL.RequestURI())
	}
	if why != "" {
		q.Set("why", why)
	}
	http.Redirect(w, r, "/ui/login?"+q.Encode(), http.StatusSeeOther)
}

// session wraps h: a live session whose role allows need, touched on each
// request; for a POST, the session's CSRF token as the form's csrf field.
func (u *UI) session(need stet.Role, h func(http.ResponseWriter, *http.Request, *Session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(CookieName)
		if err != nil || c.Value == "" {
			u.toLogin(w, r, "")
			return
		}
		ctx := r.Context()
		row, err := u.db.WebSession(ctx, hashHex(c.Value))
		if stet.ErrorCodeOf(err) == stet.ENotFound {
			u.clearCookie(w, r, CookieName, "/ui/")
			u.toLogin(w, r, "ended")
			return
		}
		if err != nil {
			u.fail(w, r, nil, err)
			return
		}
		now := u.clock.Now()
		if !row.Live(now) {
			action := "web.idle_logoff"
			if !now.Before(row.ExpiresAt) {
				action = "web.session_expired"
			}
			if err := u.db.EndWebSession(ctx, row, action, now); err != nil {
				u.fail(w, r, nil, err)
				return
			}
			u.clearCookie(w, r, CookieName, "/ui/")
			u.toLogin(w, r, "idle")
			return
		}
		s := &Session{Tenant: row.Tenant, Role: row.Role, Actor: row.Actor, row: row, csrf: csrfFor(c.Value)}
		if row.TokenHash != "" {
			// A token session lasts only while its token is configured, and
			// takes the token's role as configured now.
			tok, ok := u.api.TokenByHash(row.TokenHash)
			if !ok || tok.Tenant != row.Tenant {
				_ = u.db.EndWebSession(ctx, row, "web.token_revoked", now)
				u.clearCookie(w, r, CookieName, "/ui/")
				u.toLogin(w, r, "ended")
				return
			}
			s.Role = tok.Role
		}
		if err := u.db.TouchWebSession(ctx, row.IDHash, now, now.Add(u.cfg.IdleTimeout)); err != nil {
			u.fail(w, r, nil, err)
			return
		}
		if r.Method == http.MethodPost {
			if err := r.ParseForm(); err != nil {
				u.errorPage(w, r, s, http.StatusBadRequest, "Bad request", "The form could not be read.")
				return
			}
			got := hashHex(r.PostForm.Get("csrf"))
			if r.PostForm.Get("csrf") == "" || subtle.ConstantTimeCompare([]byte(got), []byte(row.CSRFHash)) != 1 {
				u.deny(w, r, s, "The form's security token is missing or does not belong to this session. Reload the page and try again.")
				return
			}
		}
		if !s.Role.Allows(need) {
			u.deny(w, r, s, "Your role ("+string(s.Role)+") may not do this.")
			return
		}
		h(w, r, s)
	}
}

// deny answers 403 and audits the refusal.
func (u *UI) deny(w http.ResponseWriter, r *http.Request, s *Session, msg string) {
	if err := u.api.Audit(r, api.AuditEvent{Tenant: s.Tenant, Actor: s.Actor, Action: "web.denied",
		ObjectType: "route", ObjectID: r.Pattern, Outcome: ledger.AuditDenied}); err != nil {
		u.log.Warn("audit denied request", "route", r.Pattern, "request_id", api.RequestID(r), "err", err)
	}
	u.errorPage(w, r, s, http.StatusForbidden, "Forbidden", msg)
}

// adminRefused is the sign-in page's answer to an admin token.
const adminRefused = "An admin token acts on the whole cluster and cannot sign in to the review UI, which shows one tenant's records. " +
	"Use the API (GET /v1/dispatch, /v1/invariants, /v1/audit) or the CLI (stet pause, stet check, stet audit list) with it, " +
	"or sign in here with a tenant's reader, reviewer or operator token."

type loginView struct {
	Next  string
	Login string // the login form's CSRF token
	OIDC  bool
	Why   string
	// Idle and Max say when a session ends, in words ("15 minutes").
	Idle, Max string
}

// spell writes a duration as a person reads it: "15 minutes", "12 hours",
// "1 hour 30 minutes".
func spell(d time.Duration) string {
	unit := func(n int, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
	switch {
	case h > 0 && m > 0:
		return unit(h, "hour") + " " + unit(m, "minute")
	case h > 0:
		return unit(h, "hour")
	case m > 0:
		return unit(m, "minute")
	}
	return unit(int(d/time.Second), "second")
}

// safeNext keeps a post-login destination inside the UI.
func safeNext(next string) string {
	if strings.HasPrefix(next, "/ui/") && !strings.HasPrefix(next, "//") && !strings.Contains(next, "\\") && !strings.HasPrefix(next, "/ui/login") {
		return next
	}
	return "/ui/review"
}

func (u *UI) loginPage(w http.ResponseWriter, r *http.Request) {
	u.renderLogin(w, r, http.StatusOK, "")
}

func (u *UI) renderLogin(w http.ResponseWriter, r *http.Request, status int, errMsg string) {
	tok := randomToken()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: tok, Path: "/ui/login", MaxAge: 900, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: u.secure(r)})
	why := ""
	switch r.URL.Query().Get("why") {
	case "idle":
		why = "You were signed out after a period of inactivity."
	case "ended":
		why = "Your session has ended. Sign in again."
	case "out":
		why = "You are signed out."
	}
	next := r.URL.Query().Get("next")
	if r.Method == http.MethodPost {
		next = r.PostForm.Get("next")
	}
	u.render(w, status, "login", view{Title: "Sign in", Error: errMsg,
		Page: loginView{Next: safeNext(next), Login: tok, OIDC: u.cfg.OIDC != nil, Why: why,
			Idle: spell(u.cfg.IdleTimeout), Max: spell(u.cfg.SessionMax)}})
}

func (u *UI) login(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		u.renderLogin(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	c, err := r.Cookie(loginCookie)
	form := r.PostForm.Get("login")
	if err != nil || form == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(form)) != 1 {
		u.renderLogin(w, r, http.StatusForbidden, "The sign-in form expired. Try again.")
		return
	}
	raw := strings.TrimSpace(r.PostForm.Get("token"))
	tok, ok := u.api.Authenticate(raw)
	if !ok {
		u.api.AuditDenied(r, "*", "anonymous", "denied.unauthorized")
		u.renderLogin(w, r, http.StatusUnauthorized, "That token is not valid.")
		return
	}
	if tok.Admin {
		// Every page is a tenant's: an admin's session would be 403
		// throughout. Refused here, with where to go instead.
		u.api.AuditDenied(r, "*", "admin:"+tok.Name, "denied.forbidden")
		u.renderLogin(w, r, http.StatusForbidden, adminRefused)
		return
	}
	err = u.startSession(w, r, ledger.WebSession{Tenant: tok.Tenant, Role: tok.Role, Actor: tok.Actor(), TokenHash: hashHex(raw)})
	if err != nil {
		u.fail(w, r, nil, err)
		return
	}
	u.clearCookie(w, r, loginCookie, "/ui/login")
	http.Redirect(w, r, safeNext(r.PostForm.Get("next")), http.StatusSeeOther)
}

func (u *UI) logout(w http.ResponseWriter, r *http.Request, s *Session) {
	if err := u.db.EndWebSession(r.Context(), s.row, "web.logout", u.clock.Now()); err != nil {
		u.fail(w, r, s, err)
		return
	}
	u.clearCookie(w, r, CookieName, "/ui/")
	http.Redirect(w, r, "/ui/login?why=out", http.StatusSeeOther)
}
