-- stet_audit_counts_only_grow: its current body, the one place to read or change it. migrate
-- applies every file of this folder after the numbered migrations, when
-- the server holds another body (CREATE OR REPLACE keeps its signature).
-- The numbered migrations keep the bodies they once created, as history.
CREATE OR REPLACE FUNCTION stet_audit_counts_only_grow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.audit_id = OLD.audit_id AND NEW.rollup_key = OLD.rollup_key AND NEW.hits >= OLD.hits THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'audit_counts only grow';
END;
$$;
