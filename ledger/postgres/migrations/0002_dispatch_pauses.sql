-- Dispatch pauses: while a row matches a job's processor, tenant or "all",
-- the extract stage sends nothing and the job waits without spending an
-- attempt. Pausing never rewrites a job; deleting the row resumes them.
CREATE TABLE dispatch_pauses (
    scope     TEXT PRIMARY KEY,
    reason    TEXT NOT NULL,
    paused_by TEXT NOT NULL,
    paused_at BIGINT NOT NULL
);
