-- Destinations and alerts (docs/design.md §6, §13). A committed or decided review
-- record writes one outbox row per subscribed destination in the same
-- transaction; the delivery sweep POSTs each row until the receiver answers
-- 2xx (delivered), its max_age passes (failed: invariant 8), or it answers
-- 410 (the destination is disabled for that source). Outbox rows carry IDs
-- only: a record's body is read from its review record at delivery time.

-- One row per configured (source, destination), synced from the config at
-- start. disabled_at is the operator-visible 410 flag; retry_at and
-- failures are the destination's backoff after a failed POST.
CREATE TABLE destinations (
    source_id       TEXT NOT NULL,
    destination_id  TEXT NOT NULL,
    events          TEXT NOT NULL,
    max_age_us      INTEGER NOT NULL,
    configured      BOOLEAN NOT NULL DEFAULT TRUE,
    disabled_at     INTEGER,
    disabled_status INTEGER,
    retry_at        INTEGER,
    failures        INTEGER NOT NULL DEFAULT 0,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (source_id, destination_id)
);

-- One row per event per destination. webhook_id (evt_<record_id>_<event>)
-- is stable across retries; sequence grows per report (reports.
-- outbox_sequence). Alerts use source_id '*' and destination_id 'alerts',
-- and carry their IDs-only body in payload.
CREATE TABLE outbox (
    id              TEXT PRIMARY KEY,
    source_id       TEXT NOT NULL,
    destination_id  TEXT NOT NULL,
    webhook_id      TEXT NOT NULL,
    event           TEXT NOT NULL,
    tenant_id       TEXT NOT NULL,
    record_id       TEXT,
    job_id          TEXT,
    report_id       TEXT,
    sequence        INTEGER NOT NULL,
    payload         TEXT,
    state           TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed', 'disabled', 'cancelled')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_status     INTEGER,
    last_error      TEXT,
    next_attempt_at INTEGER NOT NULL,
    lease_until     INTEGER,
    expires_at      INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    delivered_at    INTEGER,
    updated_at      INTEGER NOT NULL,
    UNIQUE (source_id, destination_id, webhook_id)
);
CREATE INDEX outbox_due ON outbox (source_id, destination_id, next_attempt_at) WHERE state = 'pending';
CREATE INDEX outbox_record ON outbox (record_id);
CREATE INDEX outbox_job ON outbox (job_id);

ALTER TABLE reports ADD COLUMN outbox_sequence INTEGER NOT NULL DEFAULT 0;

-- Alerts raised by the invariant check and by automatic dispatch pauses.
-- An alert is open until resolved; the partial unique index keeps one open
-- alert per key, so a violation seen by many checks alerts once.
CREATE TABLE alerts (
    id          TEXT PRIMARY KEY,
    alert_key   TEXT NOT NULL,
    type        TEXT NOT NULL,
    invariant   INTEGER NOT NULL,
    name        TEXT NOT NULL,
    ids         TEXT NOT NULL,
    first_seen  INTEGER NOT NULL,
    resolved_at INTEGER
);
CREATE UNIQUE INDEX alerts_open ON alerts (alert_key) WHERE resolved_at IS NULL;
