-- jobs_lease_holder: a claim set lease_holder, so each claim wrote an entry
-- into this index, dead as soon as the result cleared it. Its only readers,
-- a lost worker's cleanup (liveness) and the lease checks, ask for
-- state = 'extracting' as well, which jobs_state (state, updated_at)
-- answers by its prefix: the extracting jobs, as many as there are workers.
-- (PostgreSQL's 0020 also takes the report lock of stet_insert_record
-- without a write; SQLite has no such function.)
DROP INDEX jobs_lease_holder;
