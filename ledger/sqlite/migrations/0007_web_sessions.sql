-- Review UI sessions (docs/design.md §12). A row holds only hashes: the SHA-256 of
-- the session cookie, of its CSRF token and of the bearer token it was
-- opened with (or the OIDC subject instead), never a secret itself. A
-- session ends at idle_until (pushed forward on each request, the
-- automatic logoff) or at expires_at (session_max after login), whichever
-- comes first; logout deletes the row and the sweeper deletes expired ones.
CREATE TABLE web_sessions (
    id_hash      TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL,
    role         TEXT NOT NULL,
    actor        TEXT NOT NULL,
    token_hash   TEXT,
    oidc_subject TEXT,
    csrf_hash    TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL,
    idle_until   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    CHECK ((token_hash IS NULL) <> (oidc_subject IS NULL))
);
CREATE INDEX web_sessions_idle ON web_sessions (idle_until);
CREATE INDEX web_sessions_expires ON web_sessions (expires_at);
