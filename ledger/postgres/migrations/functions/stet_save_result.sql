-- stet_save_result: its current body, the one place to read or change it. migrate
-- applies every file of this folder after the numbered migrations, when
-- the server holds another body (CREATE OR REPLACE keeps its signature).
-- The numbered migrations keep the bodies they once created, as history.
--
-- stet_save_result as 0017 wrote it, on keys: p_job and p_record are
-- public IDs; the artifact takes the job's key, so it has no ID of its own.
-- The fence is a row lock (SELECT … FOR UPDATE re-reads a row another
-- transaction changed, as UPDATE does), and the job is updated once, to
-- where the result leaves it: one new row version per result where two
-- (extracted, then committed) left a dead one and its index entries behind.
CREATE OR REPLACE FUNCTION stet_save_result(
    p_job BYTEA, p_token BIGINT, p_now BIGINT, p_processor TEXT,
    p_attempt_n BIGINT, p_raw TEXT, p_output TEXT, p_schema_version TEXT, p_model TEXT,
    p_status TEXT, p_failure_class TEXT, p_request_id TEXT, p_status_code BIGINT,
    p_input_tokens BIGINT, p_output_tokens BIGINT, p_latency_ms BIGINT, p_finished_at BIGINT,
    p_record BYTEA, p_classification TEXT)
RETURNS TEXT LANGUAGE plpgsql AS $$
DECLARE
    v_job      BIGINT;
    v_report   BIGINT;
    v_tenant   TEXT;
    v_source   TEXT;
    v_revision BIGINT;
BEGIN
    SELECT id, report_id, tenant_id, source_id, revision INTO v_job, v_report, v_tenant, v_source, v_revision
        FROM jobs WHERE public_id = p_job AND attempt = p_token AND state = 'extracting' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'fence_lost';
    END IF;
    INSERT INTO artifacts (job_id, attempt_n, raw, output, schema_version, processor_id, model, created_at)
        VALUES (v_job, p_attempt_n, p_raw, p_output, p_schema_version, p_processor, p_model, p_now);
    UPDATE attempts SET status = p_status, failure_class = p_failure_class, model = p_model, request_id = p_request_id,
            status_code = p_status_code, input_tokens = p_input_tokens, output_tokens = p_output_tokens,
            latency_ms = p_latency_ms, finished_at = p_finished_at
        WHERE job_id = v_job AND n = p_attempt_n;
    IF p_record IS NOT NULL AND NOT EXISTS (SELECT 1 FROM destinations WHERE source_id = v_source AND configured) THEN
        BEGIN
            PERFORM stet_insert_record(p_record, v_job, v_report, v_tenant, v_source, v_revision, 'extracted',
                p_classification, NULL, p_now);
            UPDATE jobs SET state = 'committed', extracted_at = p_now, committed_at = p_now, updated_at = p_now,
                    lease_until = NULL, lease_holder = NULL, failure_class = NULL, processor_id = p_processor
                WHERE id = v_job;
            RETURN 'committed';
        EXCEPTION WHEN OTHERS THEN
            -- The record part rolled back alone: the job stays extracted,
            -- for the commit stage to retry from the artifact.
            UPDATE jobs SET state = 'extracted', extracted_at = p_now, updated_at = p_now,
                    lease_until = NULL, lease_holder = NULL, failure_class = NULL, processor_id = p_processor
                WHERE id = v_job;
            RETURN 'commit_failed';
        END;
    END IF;
    UPDATE jobs SET state = 'extracted', extracted_at = p_now, updated_at = p_now,
            lease_until = NULL, lease_holder = NULL, failure_class = NULL, processor_id = p_processor
        WHERE id = v_job;
    RETURN 'saved';
END
$$;
