-- With encryption on, no hash a guessed value could be confirmed against
-- stays in the clear: identity, content and body hashes and tombstones are
-- stored as their blind-index value (HMAC-SHA256 under the index key), and
-- the external ID is sealed under its report's data key.
--
-- index_key holds the one blind-index key, derived from the sealing master
-- key when encryption is first used and kept wrapped by a master key (so a
-- rotation leaves every stored value valid; stet rekey rewraps it).
-- converted_at is NULL while rows written before may still hold plain
-- hashes: lookups then try both forms, and stet rekey converts them.
CREATE TABLE index_key (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    key_id       TEXT NOT NULL,
    wrapped      TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    rewrapped_at INTEGER,
    converted_at INTEGER
);

-- Bit 4 of a row's sealed column: its hash is a blind-index value.
-- reports: bit 1 the external ID is sealed, bit 4 identity_hash is blind.
-- tombstone_hash is the tombstone a deletion of the report writes, kept
-- from intake (the only time the plain identity is known): NULL on a
-- report accepted without a blind-index key.
ALTER TABLE reports ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reports ADD COLUMN tombstone_hash BLOB;
ALTER TABLE deliveries ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tombstones ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;
