-- Integer keys (issue 15, storage): the per-document tables refer to each
-- other by an integer key instead of a 30-character text ID, SHA-256
-- values are stored as their 32 bytes instead of 64 hex digits, and a
-- revision names its policy version by an integer. Reports, jobs and
-- review records keep the ID the API shows, as public_id: the 16 bytes of
-- the ULID in it (stet_ulid, registered by the ledger, decodes one).
-- Revisions and artifacts have no public ID any more; the rows copied here
-- keep their old ID in legacy_id, the binding their sealed values were
-- sealed under.
--
-- Each table is rebuilt: created as *_v19, filled from the old one (a
-- row's integer key is its old rowid), the old tables dropped (children
-- first), the new ones renamed, then their indexes created.

CREATE TABLE policy_versions_v19 (
    id         INTEGER PRIMARY KEY,
    hash       TEXT NOT NULL UNIQUE,
    policy_id  TEXT NOT NULL,
    content    TEXT, -- NULL: a hash a revision recorded whose content was never stored
    first_seen INTEGER NOT NULL
);
INSERT INTO policy_versions_v19 (id, hash, policy_id, content, first_seen)
    SELECT rowid, hash, policy_id, content, first_seen FROM policy_versions;
INSERT INTO policy_versions_v19 (hash, policy_id, content, first_seen)
    SELECT policy_hash, MIN(policy_id), NULL, MIN(received_at) FROM revisions
    WHERE policy_hash NOT IN (SELECT hash FROM policy_versions) GROUP BY policy_hash;

CREATE TABLE reports_v19 (
    id              INTEGER PRIMARY KEY,
    public_id       BLOB NOT NULL UNIQUE,
    tenant_id       TEXT NOT NULL,
    source_id       TEXT NOT NULL,
    external_id     TEXT,
    identity_hash   BLOB NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    deleted_at      INTEGER,
    deletion_id     TEXT,
    outbox_sequence INTEGER NOT NULL DEFAULT 0,
    UNIQUE (tenant_id, source_id, identity_hash)
);
INSERT INTO reports_v19 (id, public_id, tenant_id, source_id, external_id, identity_hash, created_at, updated_at,
        deleted_at, deletion_id, outbox_sequence)
    SELECT rowid, stet_ulid(id), tenant_id, source_id, external_id,
        -- a deleted report's identity hash is "deleted:<deletion>", not hex
        COALESCE(unhex(identity_hash), CAST(identity_hash AS BLOB)), created_at, updated_at,
        deleted_at, deletion_id, outbox_sequence
    FROM reports;

CREATE TABLE revisions_v19 (
    id              INTEGER PRIMARY KEY,
    report_id       INTEGER NOT NULL REFERENCES reports_v19 (id),
    revision        INTEGER NOT NULL CHECK (revision > 0),
    content_sha256  BLOB, -- NULL once a deletion took the text
    text            TEXT,
    metadata        TEXT,
    policy_version  INTEGER NOT NULL REFERENCES policy_versions_v19 (id),
    profile_id      TEXT NOT NULL,
    profile_version INTEGER NOT NULL,
    received_at     INTEGER NOT NULL,
    text_purged_at  INTEGER,
    legacy_id       TEXT,
    UNIQUE (report_id, revision)
);
INSERT INTO revisions_v19 (id, report_id, revision, content_sha256, text, metadata, policy_version, profile_id,
        profile_version, received_at, text_purged_at, legacy_id)
    SELECT v.rowid, r.rowid, v.revision, NULLIF(unhex(v.content_sha256), X''), v.text, v.metadata, p.id, v.profile_id,
        v.profile_version, v.received_at, v.text_purged_at, v.id
    FROM revisions v JOIN reports r ON r.id = v.report_id JOIN policy_versions_v19 p ON p.hash = v.policy_hash;

CREATE TABLE jobs_v19 (
    id                 INTEGER PRIMARY KEY,
    public_id          BLOB NOT NULL UNIQUE,
    revision_id        INTEGER NOT NULL REFERENCES revisions_v19 (id),
    report_id          INTEGER NOT NULL REFERENCES reports_v19 (id),
    tenant_id          TEXT NOT NULL,
    source_id          TEXT NOT NULL,
    revision           INTEGER NOT NULL,
    extraction_version TEXT NOT NULL,
    state              TEXT NOT NULL CHECK (state IN ('accepted', 'extracting', 'waiting', 'batched', 'extracted', 'committed', 'manual', 'blocked', 'cancelled')),
    attempt            INTEGER NOT NULL DEFAULT 0,
    lease_until        INTEGER,
    failure_class      TEXT,
    processor_id       TEXT,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    extracting_at      INTEGER,
    extracted_at       INTEGER,
    committed_at       INTEGER,
    mode               TEXT NOT NULL DEFAULT 'sync' CHECK (mode IN ('sync', 'batch')),
    lease_holder       TEXT,
    UNIQUE (revision_id, extraction_version)
);
INSERT INTO jobs_v19 (id, public_id, revision_id, report_id, tenant_id, source_id, revision, extraction_version, state,
        attempt, lease_until, failure_class, processor_id, created_at, updated_at, extracting_at, extracted_at,
        committed_at, mode, lease_holder)
    SELECT j.rowid, stet_ulid(j.id), v.rowid, r.rowid, j.tenant_id, j.source_id, j.revision, j.extraction_version, j.state,
        j.attempt, j.lease_until, j.failure_class, j.processor_id, j.created_at, j.updated_at, j.extracting_at,
        j.extracted_at, j.committed_at, j.mode, j.lease_holder
    FROM jobs j JOIN revisions v ON v.id = j.revision_id JOIN reports r ON r.id = j.report_id;

CREATE TABLE attempts_v19 (
    job_id             INTEGER NOT NULL REFERENCES jobs_v19 (id),
    n                  INTEGER NOT NULL,
    token              INTEGER NOT NULL,
    processor_id       TEXT NOT NULL,
    model              TEXT,
    request_id         TEXT,
    status_code        INTEGER,
    status             TEXT NOT NULL CHECK (status IN ('started', 'succeeded', 'failed', 'superseded', 'repair', 'abandoned')),
    failure_class      TEXT,
    input_tokens       INTEGER,
    output_tokens      INTEGER,
    latency_ms         INTEGER,
    input_sha256       BLOB,
    started_at         INTEGER NOT NULL,
    finished_at        INTEGER,
    batch_id           TEXT,
    metadata_purged_at INTEGER,
    discarded_at       INTEGER,
    PRIMARY KEY (job_id, n)
) WITHOUT ROWID;
INSERT INTO attempts_v19 (job_id, n, token, processor_id, model, request_id, status_code, status, failure_class,
        input_tokens, output_tokens, latency_ms, input_sha256, started_at, finished_at, batch_id, metadata_purged_at,
        discarded_at)
    SELECT j.rowid, a.n, a.token, a.processor_id, a.model, a.request_id, a.status_code, a.status, a.failure_class,
        a.input_tokens, a.output_tokens, a.latency_ms, unhex(a.input_sha256), a.started_at, a.finished_at, a.batch_id,
        a.metadata_purged_at, a.discarded_at
    FROM attempts a JOIN jobs j ON j.id = a.job_id;

-- An artifact is its job's (one at most): the job's key is its key.
CREATE TABLE artifacts_v19 (
    job_id           INTEGER PRIMARY KEY REFERENCES jobs_v19 (id),
    attempt_n        INTEGER NOT NULL,
    raw              TEXT,
    output           TEXT,
    schema_version   TEXT NOT NULL,
    processor_id     TEXT NOT NULL,
    model            TEXT,
    created_at       INTEGER NOT NULL,
    raw_purged_at    INTEGER,
    output_purged_at INTEGER,
    legacy_id        TEXT
);
INSERT INTO artifacts_v19 (job_id, attempt_n, raw, output, schema_version, processor_id, model, created_at,
        raw_purged_at, output_purged_at, legacy_id)
    SELECT j.rowid, a.attempt_n, a.raw, a.output, a.schema_version, a.processor_id, a.model, a.created_at,
        a.raw_purged_at, a.output_purged_at, a.id
    FROM artifacts a JOIN jobs j ON j.id = a.job_id;

CREATE TABLE review_records_v19 (
    id                       INTEGER PRIMARY KEY,
    public_id                BLOB NOT NULL UNIQUE,
    job_id                   INTEGER NOT NULL UNIQUE REFERENCES jobs_v19 (id),
    report_id                INTEGER NOT NULL REFERENCES reports_v19 (id),
    tenant_id                TEXT NOT NULL,
    source_id                TEXT NOT NULL,
    revision                 INTEGER NOT NULL,
    kind                     TEXT NOT NULL CHECK (kind IN ('extracted', 'manual')),
    state                    TEXT NOT NULL CHECK (state IN ('pending', 'decided')),
    authoritative            BOOLEAN NOT NULL DEFAULT FALSE,
    classification           TEXT,
    failure_class            TEXT,
    decision                 TEXT,
    decided_by               TEXT,
    decided_at               INTEGER,
    note                     TEXT,
    created_at               INTEGER NOT NULL,
    classification_purged_at INTEGER,
    note_purged_at           INTEGER
);
INSERT INTO review_records_v19 (id, public_id, job_id, report_id, tenant_id, source_id, revision, kind, state,
        authoritative, classification, failure_class, decision, decided_by, decided_at, note, created_at,
        classification_purged_at, note_purged_at)
    SELECT rr.rowid, stet_ulid(rr.id), j.rowid, r.rowid, rr.tenant_id, rr.source_id, rr.revision, rr.kind, rr.state,
        rr.authoritative, rr.classification, rr.failure_class, rr.decision, rr.decided_by, rr.decided_at, rr.note,
        rr.created_at, rr.classification_purged_at, rr.note_purged_at
    FROM review_records rr JOIN jobs j ON j.id = rr.job_id JOIN reports r ON r.id = rr.report_id;

CREATE TABLE deliveries_v19 (
    source_id    TEXT NOT NULL,
    delivery_key TEXT NOT NULL,
    body_sha256  BLOB NOT NULL,
    job_id       INTEGER NOT NULL,
    report_id    INTEGER NOT NULL,
    revision     INTEGER NOT NULL,
    received_at  INTEGER NOT NULL,
    PRIMARY KEY (source_id, delivery_key)
);
INSERT INTO deliveries_v19 (source_id, delivery_key, body_sha256, job_id, report_id, revision, received_at)
    SELECT d.source_id, d.delivery_key, unhex(d.body_sha256), j.rowid, r.rowid, d.revision, d.received_at
    FROM deliveries d JOIN jobs j ON j.id = d.job_id JOIN reports r ON r.id = d.report_id;

CREATE TABLE batch_items_v19 (
    batch_id      TEXT NOT NULL REFERENCES batches (id),
    job_id        INTEGER NOT NULL REFERENCES jobs_v19 (id),
    token         INTEGER NOT NULL,
    attempt_n     INTEGER,
    outcome       TEXT CHECK (outcome IN ('succeeded', 'failed', 'superseded')),
    failure_class TEXT,
    applied_at    INTEGER,
    PRIMARY KEY (batch_id, job_id)
);
INSERT INTO batch_items_v19 (batch_id, job_id, token, attempt_n, outcome, failure_class, applied_at)
    SELECT i.batch_id, j.rowid, i.token, i.attempt_n, i.outcome, i.failure_class, i.applied_at
    FROM batch_items i JOIN jobs j ON j.id = i.job_id;

CREATE TABLE report_keys_v19 (
    report_id    INTEGER PRIMARY KEY, -- no foreign key: a deletion removes it alone
    data_key_id  TEXT NOT NULL,
    key_id       TEXT NOT NULL,
    wrapped      TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    rewrapped_at INTEGER
);
INSERT INTO report_keys_v19 (report_id, data_key_id, key_id, wrapped, created_at, rewrapped_at)
    SELECT r.rowid, k.data_key_id, k.key_id, k.wrapped, k.created_at, k.rewrapped_at
    FROM report_keys k JOIN reports r ON r.id = k.report_id;

-- A deletion names its report by the public ID it answers with.
CREATE TABLE deletions_v19 (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL,
    source_id    TEXT NOT NULL,
    report_id    TEXT NOT NULL UNIQUE,
    state        TEXT NOT NULL CHECK (state IN ('pending', 'done', 'unresolved')),
    requested_by TEXT NOT NULL,
    requested_at INTEGER NOT NULL,
    done_at      INTEGER,
    updated_at   INTEGER NOT NULL
);
INSERT INTO deletions_v19 SELECT id, tenant_id, source_id, report_id, state, requested_by, requested_at, done_at, updated_at
    FROM deletions;

CREATE TABLE deletion_tasks_v19 (
    deletion_id TEXT NOT NULL REFERENCES deletions_v19 (id),
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
INSERT INTO deletion_tasks_v19 SELECT deletion_id, copy, state, due_at, done_at, expires_at, reason, tries, updated_at
    FROM deletion_tasks;

DROP TABLE deletion_tasks;
DROP TABLE deletions;
DROP TABLE report_keys;
DROP TABLE batch_items;
DROP TABLE deliveries;
DROP TABLE review_records;
DROP TABLE artifacts;
DROP TABLE attempts;
DROP TABLE jobs;
DROP TABLE revisions;
DROP TABLE reports;
DROP TABLE policy_versions;

ALTER TABLE policy_versions_v19 RENAME TO policy_versions;
ALTER TABLE reports_v19 RENAME TO reports;
ALTER TABLE revisions_v19 RENAME TO revisions;
ALTER TABLE jobs_v19 RENAME TO jobs;
ALTER TABLE attempts_v19 RENAME TO attempts;
ALTER TABLE artifacts_v19 RENAME TO artifacts;
ALTER TABLE review_records_v19 RENAME TO review_records;
ALTER TABLE deliveries_v19 RENAME TO deliveries;
ALTER TABLE batch_items_v19 RENAME TO batch_items;
ALTER TABLE report_keys_v19 RENAME TO report_keys;
ALTER TABLE deletions_v19 RENAME TO deletions;
ALTER TABLE deletion_tasks_v19 RENAME TO deletion_tasks;

CREATE INDEX revisions_text_retention ON revisions (policy_version, received_at) WHERE text_purged_at IS NULL;
CREATE INDEX jobs_state ON jobs (state, updated_at);
CREATE INDEX jobs_batch_pending ON jobs (created_at) WHERE mode = 'batch' AND state = 'accepted';
CREATE INDEX jobs_lease_holder ON jobs (lease_holder) WHERE lease_holder IS NOT NULL;
CREATE INDEX jobs_held ON jobs (id) WHERE state IN ('waiting', 'blocked');
CREATE INDEX artifacts_retention ON artifacts (created_at) WHERE output_purged_at IS NULL;
CREATE UNIQUE INDEX review_records_one_authoritative ON review_records (report_id) WHERE authoritative;
CREATE INDEX review_records_queue ON review_records (tenant_id, state, id);
CREATE INDEX review_records_retention ON review_records (created_at) WHERE classification_purged_at IS NULL;
CREATE INDEX deliveries_received ON deliveries (received_at);
CREATE INDEX deliveries_report ON deliveries (report_id);
CREATE INDEX batch_items_job ON batch_items (job_id);
CREATE INDEX report_keys_key ON report_keys (key_id, report_id);
CREATE INDEX deletions_tenant ON deletions (tenant_id, requested_at, id);
CREATE INDEX deletions_requested ON deletions (requested_at, id);
CREATE INDEX deletions_pending ON deletions (requested_at) WHERE state = 'pending';
CREATE INDEX deletion_tasks_open ON deletion_tasks (due_at) WHERE state <> 'done';
