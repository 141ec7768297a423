-- The data lifecycle (docs/design.md §5): retention purges, deletions with one task
-- per copy, and tombstones. A purge nulls a column and stamps *_purged_at;
-- a deleted report keeps its row (IDs only, no external ID) with deleted_at.
ALTER TABLE reports ADD COLUMN deleted_at BIGINT;
ALTER TABLE reports ADD COLUMN deletion_id TEXT;

CREATE INDEX revisions_text_retention ON revisions (policy_hash, received_at) WHERE text_purged_at IS NULL;
CREATE INDEX revisions_report ON revisions (report_id);

ALTER TABLE artifacts ALTER COLUMN output DROP NOT NULL;
ALTER TABLE artifacts ADD COLUMN output_purged_at BIGINT;
CREATE INDEX artifacts_retention ON artifacts (created_at) WHERE output_purged_at IS NULL;

ALTER TABLE review_records ADD COLUMN classification_purged_at BIGINT;
ALTER TABLE review_records ADD COLUMN note_purged_at BIGINT;
CREATE INDEX review_records_retention ON review_records (created_at) WHERE classification_purged_at IS NULL;

-- attempts keep their counts after a deletion; the request metadata
-- (request ID, model, hash of what was sent) is purged and stamped. A
-- provider result that arrived for a cancelled job is stamped discarded_at.
ALTER TABLE attempts ADD COLUMN metadata_purged_at BIGINT;
ALTER TABLE attempts ADD COLUMN discarded_at BIGINT;

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
    requested_at BIGINT NOT NULL,
    done_at      BIGINT,
    updated_at   BIGINT NOT NULL
);
CREATE INDEX deletions_tenant ON deletions (tenant_id, requested_at);

CREATE TABLE deletion_tasks (
    deletion_id TEXT NOT NULL REFERENCES deletions (id),
    copy        TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('pending', 'done', 'unresolved')),
    due_at      BIGINT NOT NULL,
    done_at     BIGINT,
    expires_at  BIGINT,
    reason      TEXT,
    tries       BIGINT NOT NULL DEFAULT 0,
    updated_at  BIGINT NOT NULL,
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
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL
);
CREATE INDEX tombstones_expiry ON tombstones (expires_at);
