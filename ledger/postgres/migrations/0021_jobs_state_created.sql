-- The periodic invariant check by index (issue 15: a million documents).
--
-- Invariant 1 (no review record after the SLA) read every job and every
-- review record on each check, once a minute: the whole check took
-- 15-35 ms at 20,000-100,000 documents, growing with the ledger. It now reads, per state a job can be
-- in flight in, the oldest jobs past the SLA, in created_at order, so it
-- needs created_at after state. Nothing orders or filters jobs by
-- updated_at, so the index's second column changes from updated_at to
-- created_at; every reader of jobs_state by its prefix (the extracting
-- jobs of the lease checks, the counts by state) reads it as before. A job
-- update that only moves updated_at no longer changes an indexed column.
DROP INDEX jobs_state;
CREATE INDEX jobs_state ON jobs (state, created_at);
