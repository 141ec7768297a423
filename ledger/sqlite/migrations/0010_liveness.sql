-- Leases tied to worker liveness (issue 16). A lease names the worker
-- process holding it (worker_heartbeats.process_id); a holder whose
-- heartbeat is older than workers.dead_after is dead, and its leases are
-- taken back at once. An attempt cut by a crash (or by a graceful
-- shutdown) is 'abandoned': its outcome is unknown, the provider may have
-- billed it, and it is not counted against max_attempts.
ALTER TABLE jobs ADD COLUMN lease_holder TEXT;
ALTER TABLE batches ADD COLUMN lease_holder TEXT;
CREATE INDEX jobs_lease_holder ON jobs (lease_holder) WHERE lease_holder IS NOT NULL;

-- attempts.status gains 'abandoned': SQLite cannot change a CHECK in
-- place, so the table is rebuilt. Nothing references attempts.
CREATE TABLE attempts_v10 (
    job_id             TEXT NOT NULL REFERENCES jobs (id),
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
    input_sha256       TEXT,
    started_at         INTEGER NOT NULL,
    finished_at        INTEGER,
    batch_id           TEXT,
    metadata_purged_at INTEGER,
    discarded_at       INTEGER,
    PRIMARY KEY (job_id, n)
);
INSERT INTO attempts_v10 (job_id, n, token, processor_id, model, request_id, status_code, status, failure_class,
        input_tokens, output_tokens, latency_ms, input_sha256, started_at, finished_at, batch_id, metadata_purged_at, discarded_at)
    SELECT job_id, n, token, processor_id, model, request_id, status_code, status, failure_class,
        input_tokens, output_tokens, latency_ms, input_sha256, started_at, finished_at, batch_id, metadata_purged_at, discarded_at
    FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_v10 RENAME TO attempts;
