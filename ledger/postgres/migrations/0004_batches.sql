-- Provider batches (docs/design.md §4). A job's dispatch mode is fixed at
-- acceptance; batch-mode jobs wait in 'accepted' until the assembler puts
-- them in a batch. A batch row is written in state 'intent' with its items
-- before anything is sent; its provider ID is unique once known; each item
-- carries the job's fencing token and an applied_at marker set in the same
-- transaction as the item's artifact, so a result is applied once.
ALTER TABLE jobs ADD COLUMN mode TEXT NOT NULL DEFAULT 'sync' CHECK (mode IN ('sync', 'batch'));
CREATE INDEX jobs_batch_pending ON jobs (created_at) WHERE mode = 'batch' AND state = 'accepted';

ALTER TABLE attempts ADD COLUMN batch_id TEXT;

CREATE TABLE batches (
    id                 TEXT PRIMARY KEY,
    processor_id       TEXT NOT NULL,
    state              TEXT NOT NULL CHECK (state IN ('intent', 'submitted', 'in_progress', 'completed', 'failed', 'expired', 'cancelled', 'unknown')),
    provider_state     TEXT,
    provider_batch_id  TEXT,
    input_file_id      TEXT,
    output_file_id     TEXT,
    error_file_id      TEXT,
    results_url        TEXT,
    item_count         BIGINT NOT NULL,
    applied_count      BIGINT NOT NULL DEFAULT 0,
    submit_started_at  BIGINT,
    submitted_at       BIGINT,
    ended_at           BIGINT,
    results_fetched_at BIGINT,
    results_expire_at  BIGINT,
    applied_at         BIGINT,
    next_poll_at       BIGINT,
    poll_count         BIGINT NOT NULL DEFAULT 0,
    last_polled_at     BIGINT,
    lease_until        BIGINT,
    unknown_reason     TEXT,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    UNIQUE (processor_id, provider_batch_id)
);
CREATE INDEX batches_state ON batches (state, created_at);

CREATE TABLE batch_items (
    batch_id      TEXT NOT NULL REFERENCES batches (id),
    job_id        TEXT NOT NULL REFERENCES jobs (id),
    token         BIGINT NOT NULL,
    attempt_n     BIGINT,
    outcome       TEXT CHECK (outcome IN ('succeeded', 'failed', 'superseded')),
    failure_class TEXT,
    applied_at    BIGINT,
    PRIMARY KEY (batch_id, job_id)
);
CREATE INDEX batch_items_job ON batch_items (job_id);
