-- stet ledger, PostgreSQL dialect. Times are unix microseconds, UTC.
CREATE TABLE reports (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL,
    source_id     TEXT NOT NULL,
    external_id   TEXT,
    identity_hash TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    UNIQUE (tenant_id, source_id, identity_hash)
);
CREATE UNIQUE INDEX reports_external_id ON reports (tenant_id, source_id, external_id) WHERE external_id IS NOT NULL;

CREATE TABLE revisions (
    id              TEXT PRIMARY KEY,
    report_id       TEXT NOT NULL REFERENCES reports (id),
    revision        BIGINT NOT NULL CHECK (revision > 0),
    content_sha256  TEXT NOT NULL,
    text            TEXT,
    metadata        TEXT,
    policy_id       TEXT NOT NULL,
    policy_hash     TEXT NOT NULL,
    profile_id      TEXT NOT NULL,
    profile_version BIGINT NOT NULL,
    received_at     BIGINT NOT NULL,
    text_purged_at  BIGINT,
    UNIQUE (report_id, revision)
);

CREATE TABLE deliveries (
    source_id     TEXT NOT NULL,
    delivery_key  TEXT NOT NULL,
    body_sha256   TEXT NOT NULL,
    job_id        TEXT NOT NULL,
    report_id     TEXT NOT NULL,
    revision      BIGINT NOT NULL,
    received_at   BIGINT NOT NULL,
    PRIMARY KEY (source_id, delivery_key)
);

CREATE TABLE jobs (
    id                 TEXT PRIMARY KEY,
    revision_id        TEXT NOT NULL REFERENCES revisions (id),
    report_id          TEXT NOT NULL REFERENCES reports (id),
    tenant_id          TEXT NOT NULL,
    source_id          TEXT NOT NULL,
    revision           BIGINT NOT NULL,
    extraction_version TEXT NOT NULL,
    state              TEXT NOT NULL CHECK (state IN ('accepted', 'extracting', 'waiting', 'batched', 'extracted', 'committed', 'manual', 'blocked', 'cancelled')),
    attempt            BIGINT NOT NULL DEFAULT 0,
    lease_until        BIGINT,
    failure_class      TEXT,
    processor_id       TEXT,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    extracting_at      BIGINT,
    extracted_at       BIGINT,
    committed_at       BIGINT,
    UNIQUE (revision_id, extraction_version)
);
CREATE INDEX jobs_state ON jobs (state, updated_at);
CREATE INDEX jobs_report ON jobs (report_id);

CREATE TABLE attempts (
    job_id        TEXT NOT NULL REFERENCES jobs (id),
    n             BIGINT NOT NULL,
    token         BIGINT NOT NULL,
    processor_id  TEXT NOT NULL,
    model         TEXT,
    request_id    TEXT,
    status_code   BIGINT,
    status        TEXT NOT NULL CHECK (status IN ('started', 'succeeded', 'failed', 'superseded', 'repair')),
    failure_class TEXT,
    input_tokens  BIGINT,
    output_tokens BIGINT,
    latency_ms    BIGINT,
    input_sha256  TEXT,
    started_at    BIGINT NOT NULL,
    finished_at   BIGINT,
    PRIMARY KEY (job_id, n)
);

CREATE TABLE artifacts (
    id             TEXT PRIMARY KEY,
    job_id         TEXT NOT NULL UNIQUE REFERENCES jobs (id),
    attempt_n      BIGINT NOT NULL,
    raw            TEXT,
    output         TEXT NOT NULL,
    schema_version TEXT NOT NULL,
    processor_id   TEXT NOT NULL,
    model          TEXT,
    created_at     BIGINT NOT NULL,
    raw_purged_at  BIGINT
);

CREATE TABLE review_records (
    id             TEXT PRIMARY KEY,
    job_id         TEXT NOT NULL UNIQUE REFERENCES jobs (id),
    report_id      TEXT NOT NULL REFERENCES reports (id),
    tenant_id      TEXT NOT NULL,
    source_id      TEXT NOT NULL,
    revision       BIGINT NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('extracted', 'manual')),
    state          TEXT NOT NULL CHECK (state IN ('pending', 'decided')),
    authoritative  BOOLEAN NOT NULL DEFAULT FALSE,
    classification TEXT,
    failure_class  TEXT,
    decision       TEXT,
    decided_by     TEXT,
    decided_at     BIGINT,
    note           TEXT,
    created_at     BIGINT NOT NULL
);
CREATE UNIQUE INDEX review_records_one_authoritative ON review_records (report_id) WHERE authoritative;
CREATE INDEX review_records_queue ON review_records (tenant_id, state, id);

CREATE TABLE audit_log (
    id          BIGSERIAL PRIMARY KEY,
    at          BIGINT NOT NULL,
    tenant_id   TEXT NOT NULL,
    actor       TEXT NOT NULL,
    action      TEXT NOT NULL,
    object_type TEXT NOT NULL,
    object_id   TEXT NOT NULL,
    detail      TEXT
);
CREATE FUNCTION stet_audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only';
END;
$$;
CREATE TRIGGER audit_log_no_update BEFORE UPDATE OR DELETE ON audit_log FOR EACH ROW EXECUTE FUNCTION stet_audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log FOR EACH STATEMENT EXECUTE FUNCTION stet_audit_log_append_only();

-- The content of every policy version a revision was accepted under, keyed by
-- its hash: a job is checked against the policy it recorded, not whatever the
-- config says today.
CREATE TABLE policy_versions (
    hash       TEXT PRIMARY KEY,
    policy_id  TEXT NOT NULL,
    content    TEXT NOT NULL,
    first_seen BIGINT NOT NULL
);
