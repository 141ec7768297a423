-- stet_manual_from_held: its current body, the one place to read or change it. migrate
-- applies every file of this folder after the numbered migrations, when
-- the server holds another body (CREATE OR REPLACE keeps its signature).
-- The numbered migrations keep the bodies they once created, as history.
--
-- stet_manual_from_held as 0017 wrote it, on keys: the jobs and the new
-- records are public IDs, and each converted job's report comes back as
-- its public ID.
CREATE OR REPLACE FUNCTION stet_manual_from_held(p_jobs BYTEA[], p_tokens BIGINT[], p_records BYTEA[], p_now BIGINT)
RETURNS TABLE (out_job BYTEA, out_record BYTEA, out_report BYTEA, out_tenant TEXT, out_source TEXT, out_class TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    v_job      BIGINT;
    v_report   BIGINT;
    v_tenant   TEXT;
    v_source   TEXT;
    v_revision BIGINT;
    v_class    TEXT;
BEGIN
    FOR i IN 1 .. COALESCE(array_length(p_jobs, 1), 0) LOOP
        UPDATE jobs SET state = 'manual', lease_until = NULL, committed_at = p_now, updated_at = p_now
            WHERE public_id = p_jobs[i] AND attempt = p_tokens[i] AND state IN ('waiting', 'blocked')
            RETURNING id, report_id, tenant_id, source_id, revision, NULLIF(failure_class, '')
            INTO v_job, v_report, v_tenant, v_source, v_revision, v_class;
        CONTINUE WHEN NOT FOUND;
        PERFORM stet_insert_record(p_records[i], v_job, v_report, v_tenant, v_source, v_revision, 'manual',
            NULL, v_class, p_now);
        out_job := p_jobs[i];
        out_record := p_records[i];
        SELECT public_id INTO out_report FROM reports WHERE id = v_report;
        out_tenant := v_tenant;
        out_source := v_source;
        out_class := v_class;
        RETURN NEXT;
    END LOOP;
END
$$;
