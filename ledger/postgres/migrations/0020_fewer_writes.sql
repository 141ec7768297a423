-- Fewer writes per stage result (issue 15: the ledger's bytes per
-- document).
--
-- jobs_lease_holder: a claim set lease_holder, so each claim wrote an entry
-- into this index, and the entry was dead as soon as the result cleared it.
-- Its only readers, a lost worker's cleanup (liveness) and the lease
-- checks, ask for state = 'extracting' as well, which jobs_state
-- (state, updated_at) answers by its prefix: the extracting jobs, as many as
-- there are workers.
DROP INDEX jobs_lease_holder;

-- The report lock. A review record's commit locks its report's row so two
-- commits for one report serialize before one of them moves the
-- authoritative pointer. stet_insert_record took that lock with an UPDATE
-- of reports.updated_at, which nothing reads: a new version of the report
-- row and, the page being full, an entry in each of its three indexes, all
-- dead at once. A row lock in the same mode (FOR NO KEY UPDATE, the lock an
-- UPDATE of a non-key column takes) serializes the same commits, and the
-- intake of a new revision (its UPDATE of the report) against them, and
-- writes no new version. (The same rule sent from Go, on the paths a
-- document rarely takes, the commit stage and a manual record, still locks
-- with the UPDATE: the same lock mode, so the two paths serialize.)
CREATE OR REPLACE FUNCTION stet_insert_record(p_record BYTEA, p_job BIGINT, p_report BIGINT, p_tenant TEXT, p_source TEXT,
    p_revision BIGINT, p_kind TEXT, p_classification TEXT, p_failure_class TEXT, p_now BIGINT)
RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    v_current BIGINT;
    v_cur_rev BIGINT;
    v_auth    BOOLEAN := TRUE;
BEGIN
    PERFORM 1 FROM reports WHERE id = p_report FOR NO KEY UPDATE;
    SELECT id, revision INTO v_current, v_cur_rev FROM review_records WHERE report_id = p_report AND authoritative;
    IF FOUND THEN
        IF v_cur_rev > p_revision THEN
            v_auth := FALSE; -- an older revision arrived late: the pointer only moves forward
        ELSE
            UPDATE review_records SET authoritative = FALSE WHERE id = v_current;
        END IF;
    END IF;
    INSERT INTO review_records (public_id, job_id, report_id, tenant_id, source_id, revision, kind, state,
            authoritative, classification, failure_class, created_at)
        VALUES (p_record, p_job, p_report, p_tenant, p_source, p_revision, p_kind, 'pending',
            v_auth, p_classification, p_failure_class, p_now);
END
$$;
