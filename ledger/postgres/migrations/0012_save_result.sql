-- A stage result in one round trip on PostgreSQL (issue 15, lever 1).
--
-- stet_save_result does, in order and in the caller's transaction, what the
-- extract stage otherwise sends as a dozen statements: the fence on the
-- attempt token (the job becomes extracted only if it still carries the
-- token), the artifact, the attempt's outcome and, when p_record is given
-- and the source has no configured destination, the review record with the
-- report's authoritative pointer and the job's committed marker. The record
-- part runs in a block with its own exception handler: a subtransaction, so
-- a failure there rolls back only that part (the artifact stays) and the
-- caller enqueues the commit stage, exactly as with the savepoint of the
-- statement-by-statement path. Values arrive sealed and packed: the
-- function never sees plaintext it would not store anyway.
--
-- It returns 'fence_lost' (nothing written), 'saved' (artifact and attempt
-- written; the record is the caller's to commit), 'committed', or
-- 'commit_failed' (artifact and attempt written; the record part rolled
-- back).
CREATE FUNCTION stet_save_result(
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
    v_current  TEXT;
    v_cur_rev  BIGINT;
    v_auth     BOOLEAN := TRUE;
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
        -- The report row first, so two commits for one report serialize.
        UPDATE reports SET updated_at = p_now WHERE id = v_report;
        SELECT id, revision INTO v_current, v_cur_rev FROM review_records WHERE report_id = v_report AND authoritative;
        IF FOUND THEN
            IF v_cur_rev > v_revision THEN
                v_auth := FALSE; -- an older revision arrived late: the pointer only moves forward
            ELSE
                UPDATE review_records SET authoritative = FALSE WHERE id = v_current;
            END IF;
        END IF;
        INSERT INTO review_records (id, job_id, report_id, tenant_id, source_id, revision, kind, state,
                authoritative, classification, failure_class, created_at)
            VALUES (p_record, p_job, v_report, v_tenant, v_source, v_revision, 'extracted', 'pending',
                v_auth, p_classification, NULL, p_now);
        UPDATE jobs SET state = 'committed', committed_at = p_now, updated_at = p_now WHERE id = p_job;
        RETURN 'committed';
    EXCEPTION WHEN OTHERS THEN
        RETURN 'commit_failed';
    END;
END
$$;
