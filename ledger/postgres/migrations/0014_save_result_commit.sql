-- A stage result and its COMMIT in one round trip on PostgreSQL (issue 15,
-- lever 1).
--
-- The extract stage sends BEGIN, this function and COMMIT together. The
-- COMMIT may only follow unseen when the result was committed whole (the
-- artifact, the attempt and the review record), so stet_save_result_commit
-- raises SQLSTATE ST002 on every other outcome of stet_save_result: the
-- fence lost, the record left to the caller (a configured destination) or
-- the record part rolled back. The transaction aborts, nothing it wrote is
-- kept, and the stage saves the result again in a transaction of its own,
-- where it reads that outcome and acts on it as before.
CREATE FUNCTION stet_save_result_commit(
    p_job TEXT, p_token BIGINT, p_now BIGINT, p_processor TEXT,
    p_artifact TEXT, p_attempt_n BIGINT, p_raw TEXT, p_output TEXT, p_schema_version TEXT, p_model TEXT,
    p_status TEXT, p_failure_class TEXT, p_request_id TEXT, p_status_code BIGINT,
    p_input_tokens BIGINT, p_output_tokens BIGINT, p_latency_ms BIGINT, p_finished_at BIGINT,
    p_record TEXT, p_classification TEXT)
RETURNS TEXT LANGUAGE plpgsql AS $$
DECLARE
    v_outcome TEXT;
BEGIN
    v_outcome := stet_save_result(p_job, p_token, p_now, p_processor, p_artifact, p_attempt_n, p_raw, p_output,
        p_schema_version, p_model, p_status, p_failure_class, p_request_id, p_status_code, p_input_tokens,
        p_output_tokens, p_latency_ms, p_finished_at, p_record, p_classification);
    IF v_outcome IS DISTINCT FROM 'committed' THEN
        RAISE EXCEPTION 'stet: the stage result is saved in a transaction of its own' USING ERRCODE = 'ST002';
    END IF;
    RETURN v_outcome;
END
$$;
