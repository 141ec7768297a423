-- stet_save_result_commit: its current body, the one place to read or change it. migrate
-- applies every file of this folder after the numbered migrations, when
-- the server holds another body (CREATE OR REPLACE keeps its signature).
-- The numbered migrations keep the bodies they once created, as history.
--
-- stet_save_result_commit as 0014 wrote it, on stet_save_result's new
-- arguments.
CREATE OR REPLACE FUNCTION stet_save_result_commit(
    p_job BYTEA, p_token BIGINT, p_now BIGINT, p_processor TEXT,
    p_attempt_n BIGINT, p_raw TEXT, p_output TEXT, p_schema_version TEXT, p_model TEXT,
    p_status TEXT, p_failure_class TEXT, p_request_id TEXT, p_status_code BIGINT,
    p_input_tokens BIGINT, p_output_tokens BIGINT, p_latency_ms BIGINT, p_finished_at BIGINT,
    p_record BYTEA, p_classification TEXT)
RETURNS TEXT LANGUAGE plpgsql AS $$
DECLARE
    v_outcome TEXT;
BEGIN
    v_outcome := stet_save_result(p_job, p_token, p_now, p_processor, p_attempt_n, p_raw, p_output,
        p_schema_version, p_model, p_status, p_failure_class, p_request_id, p_status_code, p_input_tokens,
        p_output_tokens, p_latency_ms, p_finished_at, p_record, p_classification);
    IF v_outcome IS DISTINCT FROM 'committed' THEN
        RAISE EXCEPTION 'stet: the stage result is saved in a transaction of its own' USING ERRCODE = 'ST002';
    END IF;
    RETURN v_outcome;
END
$$;
