-- Leases tied to worker liveness (issue 16). A lease names the worker
-- process holding it (worker_heartbeats.process_id); a holder whose
-- heartbeat is older than workers.dead_after is dead, and its leases are
-- taken back at once. An attempt cut by a crash (or by a graceful
-- shutdown) is 'abandoned': its outcome is unknown, the provider may have
-- billed it, and it is not counted against max_attempts.
ALTER TABLE jobs ADD COLUMN lease_holder TEXT;
ALTER TABLE batches ADD COLUMN lease_holder TEXT;
CREATE INDEX jobs_lease_holder ON jobs (lease_holder) WHERE lease_holder IS NOT NULL;

ALTER TABLE attempts DROP CONSTRAINT attempts_status_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_status_check
    CHECK (status IN ('started', 'succeeded', 'failed', 'superseded', 'repair', 'abandoned'));
