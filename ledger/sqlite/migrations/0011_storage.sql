-- Fewer bytes per document (issue 15, storage).
--
-- revisions_report (report_id) is a prefix of the unique index on
-- (report_id, revision), which serves every lookup by report.
DROP INDEX revisions_report;

-- attempts becomes a WITHOUT ROWID table: its key (job_id, n) is every
-- lookup, and it has no other index, so the rowid b-tree and the key's
-- separate index become one. The table is rebuilt with the same columns and
-- constraints. Nothing references attempts.
CREATE TABLE attempts_v11 (
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
) WITHOUT ROWID;
INSERT INTO attempts_v11 (job_id, n, token, processor_id, model, request_id, status_code, status, failure_class,
        input_tokens, output_tokens, latency_ms, input_sha256, started_at, finished_at, batch_id, metadata_purged_at, discarded_at)
    SELECT job_id, n, token, processor_id, model, request_id, status_code, status, failure_class,
        input_tokens, output_tokens, latency_ms, input_sha256, started_at, finished_at, batch_id, metadata_purged_at, discarded_at
    FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_v11 RENAME TO attempts;
