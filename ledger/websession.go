package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stetlabs/stet"
)

// WebSession is one review-UI session (docs/design.md §12). It holds hashes only:
// the cookie, its CSRF token and the bearer token it was opened with are
// never stored.
type WebSession struct {
	IDHash      string // SHA-256 (hex) of the session cookie's value
	Tenant      string
	Role        stet.Role
	Actor       string // the audit actor: "token:NAME" or "oidc:SUBJECT"
	TokenHash   string // SHA-256 (hex) of the bearer token; "" for OIDC
	OIDCSubject string // "" for a token session
	CSRFHash    string // SHA-256 (hex) of the session's CSRF token
	CreatedAt   time.Time
	LastSeenAt  time.Time
	IdleUntil   time.Time // the automatic logoff, pushed forward by each request
	ExpiresAt   time.Time // the hard end: session_max after login
}

// Live reports whether the session may still be used at now.
func (s *WebSession) Live(now time.Time) bool {
	return now.Before(s.IdleUntil) && now.Before(s.ExpiresAt)
}

// CreateWebSession stores a new session with its audit entry (web.login),
// in one transaction.
func (db *DB) CreateWebSession(ctx context.Context, s WebSession) error {
	return db.InTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO web_sessions (id_hash, tenant_id, role, actor, token_hash, oidc_subject,
				csrf_hash, created_at, last_seen_at, idle_until, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
			s.IDHash, s.Tenant, string(s.Role), s.Actor, nullString(s.TokenHash), nullString(s.OIDCSubject), s.CSRFHash,
			micros(s.CreatedAt), micros(s.LastSeenAt), micros(s.IdleUntil), micros(s.ExpiresAt)); err != nil {
			return fmt.Errorf("create web session: %w", err)
		}
		return Audit(ctx, tx, AuditEntry{Tenant: s.Tenant, Actor: s.Actor, Action: "web.login", ObjectType: "web_session",
			ObjectID: s.IDHash[:16], Now: s.CreatedAt})
	})
}

// WebSession reads a session by its hash from the writer pool (a logout on
// another process must be seen at once). It returns ENotFound for no such
// session, ended or swept.
func (db *DB) WebSession(ctx context.Context, idHash string) (*WebSession, error) {
	var s WebSession
	var role string
	var tok, sub sql.NullString
	var created, seen, idle, expires int64
	err := db.w.QueryRowContext(ctx, `SELECT id_hash, tenant_id, role, actor, token_hash, oidc_subject, csrf_hash,
			created_at, last_seen_at, idle_until, expires_at FROM web_sessions WHERE id_hash = $1`, idHash).
		Scan(&s.IDHash, &s.Tenant, &role, &s.Actor, &tok, &sub, &s.CSRFHash, &created, &seen, &idle, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("web session")
	}
	if err != nil {
		return nil, fmt.Errorf("read web session: %w", err)
	}
	s.Role, s.TokenHash, s.OIDCSubject = stet.Role(role), tok.String, sub.String
	s.CreatedAt, s.LastSeenAt = time.UnixMicro(created).UTC(), time.UnixMicro(seen).UTC()
	s.IdleUntil, s.ExpiresAt = time.UnixMicro(idle).UTC(), time.UnixMicro(expires).UTC()
	return &s, nil
}

// TouchWebSession records a request on a live session: last seen now, idle
// logoff pushed to idleUntil. A session that has expired meanwhile is not
// touched (ENotFound).
func (db *DB) TouchWebSession(ctx context.Context, idHash string, now, idleUntil time.Time) error {
	res, err := db.w.ExecContext(ctx, `UPDATE web_sessions SET last_seen_at = $1, idle_until = $2
		WHERE id_hash = $3 AND idle_until > $1 AND expires_at > $1`, micros(now), micros(idleUntil), idHash)
	if err != nil {
		return fmt.Errorf("touch web session: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return notFound("web session")
	}
	return nil
}

// EndWebSession deletes a session with its audit entry (action, such as
// web.logout or web.idle_logoff). Ending a session that is gone is not an
// error.
func (db *DB) EndWebSession(ctx context.Context, s *WebSession, action string, now time.Time) error {
	return db.InTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM web_sessions WHERE id_hash = $1`, s.IDHash)
		if err != nil {
			return fmt.Errorf("end web session: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil
		}
		return Audit(ctx, tx, AuditEntry{Tenant: s.Tenant, Actor: s.Actor, Action: action, ObjectType: "web_session",
			ObjectID: s.IDHash[:16], Now: now})
	})
}

// WebSessionSweepGrace is how long a session past its idle logoff or
// maximum age is kept before SweepWebSessions deletes it. A lookup refuses
// it meanwhile; keeping the row lets the reviewer's next request end it
// itself, with the reason on the login page ("signed out after a period of
// inactivity") and its audit entry, instead of "your session has ended".
const WebSessionSweepGrace = time.Hour

// SweepWebSessions deletes, in q, every session idle or past its maximum
// age for longer than WebSessionSweepGrace at now, each with its audit entry
// (web.idle_logoff or web.session_expired, detail "sweep"), and returns how
// many.
func SweepWebSessions(ctx context.Context, q Querier, now time.Time) (int, error) {
	cut := micros(now.Add(-WebSessionSweepGrace))
	rows, err := q.QueryContext(ctx, `DELETE FROM web_sessions WHERE idle_until <= $1 OR expires_at <= $1
		RETURNING id_hash, tenant_id, actor, expires_at`, cut)
	if err != nil {
		return 0, fmt.Errorf("sweep web sessions: %w", err)
	}
	type ended struct {
		idHash, tenant, actor string
		expiresAt             int64
	}
	var gone []ended
	for rows.Next() {
		var e ended
		if err := rows.Scan(&e.idHash, &e.tenant, &e.actor, &e.expiresAt); err != nil {
			rows.Close()
			return 0, fmt.Errorf("sweep web sessions: %w", err)
		}
		gone = append(gone, e)
	}
	if err := rows.Close(); err != nil {
		return 0, fmt.Errorf("sweep web sessions: %w", err)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("sweep web sessions: %w", err)
	}
	for _, e := range gone {
		action := "web.idle_logoff"
		if e.expiresAt <= cut {
			action = "web.session_expired"
		}
		if err := Audit(ctx, q, AuditEntry{Tenant: e.tenant, Actor: e.actor, Action: action, ObjectType: "web_session",
			ObjectID: e.idHash[:min(16, len(e.idHash))], Detail: "sweep", Now: now}); err != nil {
			return 0, err
		}
	}
	return len(gone), nil
}

// SweepWebSessions deletes expired sessions and audits their end, in one
// transaction.
func (db *DB) SweepWebSessions(ctx context.Context, now time.Time) (int, error) {
	var n int
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = SweepWebSessions(ctx, tx, now)
		return err
	})
	return n, err
}
