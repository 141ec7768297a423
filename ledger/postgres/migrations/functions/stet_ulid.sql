-- stet_ulid: its current body, the one place to read or change it. migrate
-- applies every file of this folder after the numbered migrations, when
-- the server holds another body (CREATE OR REPLACE keeps its signature).
-- The numbered migrations keep the bodies they once created, as history.
--
-- Integer keys (issue 15, storage): the per-document tables refer to each
-- other by a BIGINT key instead of a 30-character text ID, SHA-256 values
-- are stored as their 32 bytes instead of 64 hex digits, and a revision
-- names its policy version by an integer. Reports, jobs and review records
-- keep the ID the API shows, as public_id: the 16 bytes of the ULID in it
-- (stet_ulid decodes one). Revisions and artifacts have no public ID any
-- more; the rows copied here keep their old ID in legacy_id, the binding
-- their sealed values were sealed under.
--
-- Each table is rebuilt: created as *_v19, filled from the old one through
-- a map of old IDs to new keys (in creation order), the old tables dropped
-- (children first), the new ones renamed with their constraints, indexes
-- and sequences, then their other indexes created. The functions that took
-- text IDs (0012, 0014, 0017) are replaced by ones that take the stored
-- forms.
CREATE OR REPLACE FUNCTION stet_ulid(p_id TEXT) RETURNS BYTEA LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    v_bits BIT VARYING := B'';
    v_hex  TEXT := '';
    v_d    INT;
BEGIN
    IF length(p_id) < 27 OR substr(p_id, length(p_id) - 26, 1) <> '_' THEN
        RETURN NULL;
    END IF;
    FOR i IN length(p_id) - 25 .. length(p_id) LOOP
        v_d := position(substr(p_id, i, 1) IN '0123456789ABCDEFGHJKMNPQRSTVWXYZ') - 1;
        IF v_d < 0 THEN
            RETURN NULL;
        END IF;
        v_bits := v_bits || v_d::bit(5);
    END LOOP;
    v_bits := substring(v_bits FROM 3 FOR 128); -- 26 digits carry 130 bits, the first two are zero
    FOR i IN 0 .. 31 LOOP
        v_hex := v_hex || to_hex(substring(v_bits FROM i * 4 + 1 FOR 4)::bit(4)::int);
    END LOOP;
    RETURN decode(v_hex, 'hex');
END
$$;
