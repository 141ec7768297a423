-- The data lifecycle (docs/design.md §5): retention purges, deletions with one task
-- per copy, and tombstones. A purge nulls a column and stamps *_purged_at;
-- a deleted report keeps its row (IDs only, no external ID) with deleted_at.
ALTER TABLE reports ADD COLUMN deleted_at INTEGER;
ALTER TABLE reports ADD COLUMN deletion_id TEXT;

CREATE INDEX revisions_text_retention ON revisions (policy_hash, received_at) WHERE text_purged_at IS NULL;
CREATE INDEX revisions_report ON revisions (report_id);

-- artifacts.output becomes nullable (a retention purge nulls it): SQLite
-- cannot drop NOT NULL in place, so the table is rebuilt. Nothing
-- references artifacts.
CREATE TABLE artifacts_v5 (
    id               TEXT PRIMARY KEY,
    job_id           TEXT NOT NULL UNIQUE REFERENCES jobs (id),
    attempt_n        INTEGER NOT NULL,
    raw              TEXT,
    output           TEXT,
    schema_version   TEXT NOT NULL,
    processor_id     TEXT NOT NULL,
    model            TEXT,
    created_at       INTEGER NOT NULL,
    raw_purged_at    INTEGER,
    output_purged_at INTEGER
);
INSERT INTO artifacts_v5 (id, job_id, attempt_n, raw, output, schema_version, processor_id, model, created_at, raw_purged_at)
    SELECT id, job_id, attempt_n, raw, output, schema_version, processor_id, model, created_at, raw_purged_at FROM artifacts;
DROP TABLE artifacts;
ALTER TABLE artifacts_v5 RENAME TO artifacts;
CREATE INDEX artifacts_retention ON artifacts (created_at) WHERE output_purged_at IS NULL;

ALTER TABLE review_records ADD COLUMN classification_purged_at INTEGER;
ALTER TABLE review_records ADD COLUMN note_purged_at INTEGER;
CREATE INDEX review_records_retention ON review_records (created_at) WHERE classification_purged_at IS NULL;

-- attempts keep their counts after a deletion; the request metadata
-- (request ID, model, hash of what was sent) is purged and stamped. A
-- provider result that arrived for a cancelled job is stamped discarded_at.
ALTER TABLE attempts ADD COLUMN metadata_purged_at INTEGER;
ALTER TABLE attempts ADD COLUMN discarded_at INTEGER;

-- Delivery receipts are deleted past the replay horizon, oldest first.
CREATE INDEX deliveries_received ON deliveries (received_at);
CREATE INDEX deliveries_report ON deliveries (report_id);

CREATE TABLE deletions (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL,
    source_id    TEXT NOT NULL,
    report_id    TEXT NOT NULL UNIQUE REFERENCES reports (id),
    state        TEXT NOT NULL CHECK (state IN ('pending', 'done', 'unresolved')),
    requested_by TEXT NOT NULL,
    requested_at INTEGER NOT NULL,
    done_at      INTEGER,
    updated_at   INTEGER NOT NULL
);
CREATE INDEX deletions_tenant ON deletions (tenant_id, requested_at);

CREATE TABLE deletion_tasks (
    deletion_id TEXT NOT NULL REFERENCES deletions (id),
    copy        TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('pending', 'done', 'unresolved')),
    due_at      INTEGER NOT NULL,
    done_at     INTEGER,
    expires_at  INTEGER,
    reason      TEXT,
    tries       INTEGER NOT NULL DEFAULT 0,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (deletion_id, copy)
);
CREATE INDEX deletion_tasks_open ON deletion_tasks (due_at) WHERE state <> 'done';

-- A tombstone keeps a deleted identity until the replay horizon, by hash
-- only (tenant, source and the report's identity hash): never the
-- external ID in clear.
CREATE TABLE tombstones (
    identity_hash TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL,
    source_id     TEXT NOT NULL,
    deletion_id   TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL
);
CREATE INDEX tombstones_expiry ON tombstones (expires_at);
