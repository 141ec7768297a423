-- Set-based intake in two round trips on PostgreSQL (issue 15, lever 2).
--
-- Intake sends a group's second statement (revisions, jobs, receipts and
-- River's extract jobs) in one round trip with its COMMIT. Whatever would
-- make the group run again item by item (a row the statement's snapshot
-- cannot see, a tombstone that committed meanwhile, a revision number or
-- webhook-id another delivery took) must then stop the COMMIT, which only
-- an error can do: the statement calls stet_group_retry on each of its
-- rows, and a true argument raises SQLSTATE ST001, which aborts the
-- transaction (the COMMIT that follows becomes a rollback) and tells
-- intake to run the group again with a savepoint per delivery.
CREATE FUNCTION stet_group_retry(p_retry BOOLEAN) RETURNS BOOLEAN LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF p_retry THEN
        RAISE EXCEPTION 'stet: the intake group runs again item by item' USING ERRCODE = 'ST001';
    END IF;
    RETURN false;
END
$$;
