-- stet manual converts a page of held jobs in one round trip on PostgreSQL
-- (issue 15: a million held jobs). Item by item, a conversion is about ten
-- statements (the fenced job update, the report's row lock, the
-- authoritative record's read, its move, the record), each a round trip.

-- stet_insert_record writes a review record in the caller's transaction
-- under the report's authoritative pointer, as ledger.insertRecord does:
-- the report's row first (so two records for one report serialize), then
-- the pointer moves to the new record unless a later revision holds it.
-- The rule is written once in SQL: stet_save_result (replaced below, its
-- behaviour unchanged) and stet_manual_from_held call it.
CREATE FUNCTION stet_insert_record(p_record TEXT, p_job TEXT, p_report TEXT, p_tenant TEXT, p_source TEXT,
    p_revision BIGINT, p_kind TEXT, p_classification TEXT, p_failure_class TEXT, p_now BIGINT)
RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    v_current TEXT;
    v_cur_rev BIGINT;
    v_auth    BOOLEAN := TRUE;
BEGIN
    UPDATE reports SET updated_at = p_now WHERE id = p_report;
    SELECT id, revision INTO v_current, v_cur_rev FROM review_records WHERE report_id = p_report AND authoritative;
    IF FOUND THEN
        IF v_cur_rev > p_revision THEN
            v_auth := FALSE; -- an older revision arrived late: the pointer only moves forward
        ELSE
            UPDATE review_records SET authoritative = FALSE WHERE id = v_current;
        END IF;
    END IF;
    INSERT INTO review_records (id, job_id, report_id, tenant_id, source_id, revision, kind, state,
            authoritative, classification, failure_class, created_at)
        VALUES (p_record, p_job, p_report, p_tenant, p_source, p_revision, p_kind, 'pending',
            v_auth, p_classification, p_failure_class, p_now);
END
$$;

-- stet_save_result as migration 0012 wrote it, its record part now
-- stet_insert_record.
CREATE OR REPLACE FUNCTION stet_save_result(
    p_job TEXT, p_token BIGINT, p_now BIGINT, p_processor TEXT,
    p_artifact TEXT, p_attempt_n BIGINT, p_raw TEXT, p_output TEXT, p_schema_version TEXT, p_model TEXT,
    p_status TEXT, p_failure_class TEXT, p_request_id TEXT, p_status_code BIGINT,
    p_input_tokens BIGINT, p_output_tokens BIGINT, p_latency_ms BIGINT, p_finished_at BIGINT,
    p_record TEXT, p_classification TEXT)
RETURNS TEXT LANGUAGE plpgsql AS $$
DECLARE
    v_report   TEXT;
    v_tenant   TEXT;
    v_source   TEXT;
    v_revision BIGINT;
BEGIN
    UPDATE jobs SET state = 'extracted', extracted_at = p_now, updated_at = p_now,
            lease_until = NULL, lease_holder = NULL, failure_class = NULL, processor_id = p_processor
        WHERE id = p_job AND attempt = p_token AND state = 'extracting'
        RETURNING report_id, tenant_id, source_id, revision INTO v_report, v_tenant, v_source, v_revision;
    IF NOT FOUND THEN
        RETURN 'fence_lost';
    END IF;
    INSERT INTO artifacts (id, job_id, attempt_n, raw, output, schema_version, processor_id, model, created_at)
        VALUES (p_artifact, p_job, p_attempt_n, p_raw, p_output, p_schema_version, p_processor, p_model, p_now);
    UPDATE attempts SET status = p_status, failure_class = p_failure_class, model = p_model, request_id = p_request_id,
            status_code = p_status_code, input_tokens = p_input_tokens, output_tokens = p_output_tokens,
            latency_ms = p_latency_ms, finished_at = p_finished_at
        WHERE job_id = p_job AND n = p_attempt_n;
    IF p_record IS NULL OR EXISTS (SELECT 1 FROM destinations WHERE source_id = v_source AND configured) THEN
        RETURN 'saved';
    END IF;
    BEGIN
        PERFORM stet_insert_record(p_record, p_job, v_report, v_tenant, v_source, v_revision, 'extracted',
            p_classification, NULL, p_now);
        UPDATE jobs SET state = 'committed', committed_at = p_now, updated_at = p_now WHERE id = p_job;
        RETURN 'committed';
    EXCEPTION WHEN OTHERS THEN
        RETURN 'commit_failed';
    END;
END
$$;

-- stet_manual_from_held takes the page's jobs, their attempt tokens and
-- the new records' IDs, and for each job in order does what the item path
-- does, in the caller's transaction: the job becomes manual only if it is
-- still waiting or blocked with that token (otherwise it is skipped, as a
-- lost fence is), then its manual record is written by stet_insert_record,
-- carrying the job's failure class. It returns one row per converted job.
-- The outbox events, River's cancellations and the audit entries stay with
-- the caller, in the same transaction.
CREATE FUNCTION stet_manual_from_held(p_jobs TEXT[], p_tokens BIGINT[], p_records TEXT[], p_now BIGINT)
RETURNS TABLE (out_job TEXT, out_record TEXT, out_report TEXT, out_tenant TEXT, out_source TEXT, out_class TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    v_report   TEXT;
    v_tenant   TEXT;
    v_source   TEXT;
    v_revision BIGINT;
    v_class    TEXT;
BEGIN
    FOR i IN 1 .. COALESCE(array_length(p_jobs, 1), 0) LOOP
        UPDATE jobs SET state = 'manual', lease_until = NULL, committed_at = p_now, updated_at = p_now
            WHERE id = p_jobs[i] AND attempt = p_tokens[i] AND state IN ('waiting', 'blocked')
            RETURNING report_id, tenant_id, source_id, revision, NULLIF(failure_class, '')
            INTO v_report, v_tenant, v_source, v_revision, v_class;
        CONTINUE WHEN NOT FOUND;
        PERFORM stet_insert_record(p_records[i], p_jobs[i], v_report, v_tenant, v_source, v_revision, 'manual',
            NULL, v_class, p_now);
        out_job := p_jobs[i];
        out_record := p_records[i];
        out_report := v_report;
        out_tenant := v_tenant;
        out_source := v_source;
        out_class := v_class;
        RETURN NEXT;
    END LOOP;
END
$$;
