-- Every audit row says how its request ended (outcome: ok or denied); rows
-- written before keep '' and their hash (ledger/audit.go: the hash of a row
-- with an outcome covers it). GET /v1/audit and stet audit list read the log
-- by tenant, by object and from a time, each through its index.
--
-- audit_counts holds the count of a rolled-up row (a flood of badly signed
-- deliveries is one row per source, reason and minute): the row is chained
-- once, its count only grows, and nothing is ever deleted.
ALTER TABLE audit_log ADD COLUMN outcome TEXT NOT NULL DEFAULT '';
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, id);
CREATE INDEX audit_log_object ON audit_log (object_id, id);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE TABLE audit_counts (
    audit_id   INTEGER PRIMARY KEY REFERENCES audit_log (id),
    rollup_key TEXT NOT NULL UNIQUE,
    hits       INTEGER NOT NULL CHECK (hits >= 1)
);
CREATE TRIGGER audit_counts_only_grow BEFORE UPDATE ON audit_counts
    WHEN NEW.audit_id IS NOT OLD.audit_id OR NEW.rollup_key IS NOT OLD.rollup_key OR NEW.hits < OLD.hits
    BEGIN SELECT RAISE(ABORT, 'audit_counts only grow'); END;
CREATE TRIGGER audit_counts_no_delete BEFORE DELETE ON audit_counts BEGIN SELECT RAISE(ABORT, 'audit_counts only grow'); END;
