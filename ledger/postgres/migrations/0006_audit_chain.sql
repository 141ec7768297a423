-- The audit log becomes tamper-evident: every row stores the hash of the
-- row before it and its own SHA-256 over its content (ledger/audit.go), and
-- audit_chain holds the head (the last row's id and hash). Appends lock the
-- head row (SELECT … FOR UPDATE), so concurrent writers in any number of
-- processes extend one chain. Rows written before this migration keep a
-- NULL hash and are reported as not covered.
ALTER TABLE audit_log ADD COLUMN route TEXT NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN remote_addr TEXT NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN request_id TEXT NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN prev_hash TEXT;
ALTER TABLE audit_log ADD COLUMN hash TEXT;
CREATE TABLE audit_chain (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    last_id   BIGINT NOT NULL,
    last_hash TEXT NOT NULL
);
INSERT INTO audit_chain (id, last_id, last_hash) SELECT 1, COALESCE(MAX(id), 0), '' FROM audit_log;
CREATE TRIGGER audit_chain_no_delete BEFORE DELETE OR TRUNCATE ON audit_chain FOR EACH STATEMENT EXECUTE FUNCTION stet_audit_log_append_only();
