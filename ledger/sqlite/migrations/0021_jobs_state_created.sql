-- The periodic invariant check by index (issue 15: a million documents).
-- Invariant 1 (no review record after the SLA) now reads, per state a job
-- can be in flight in, the oldest jobs past the SLA in created_at order,
-- instead of every job and every review record. Nothing orders or filters
-- jobs by updated_at, so jobs_state's second column becomes created_at;
-- its readers by prefix (the lease checks, the counts by state) are as
-- before.
DROP INDEX jobs_state;
CREATE INDEX jobs_state ON jobs (state, created_at);
