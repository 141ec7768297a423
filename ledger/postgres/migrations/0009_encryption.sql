-- Encryption at rest (docs/design.md §5): one data key per report, stored only
-- wrapped by a master key (key_id names it). Text, metadata, raw responses,
-- normalized output, classifications and notes of the report are sealed
-- under it (boundary/envelope.go). A deletion deletes the row first
-- (crypto-shredding): every sealed copy of the report, wherever it lies,
-- then no longer opens. No foreign key: the row must be deletable alone.
CREATE TABLE report_keys (
    report_id    TEXT PRIMARY KEY,
    data_key_id  TEXT NOT NULL,
    key_id       TEXT NOT NULL,
    wrapped      TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    rewrapped_at BIGINT
);
CREATE INDEX report_keys_key ON report_keys (key_id, report_id);

-- One key check value per master key id the ledger has used: a start with
-- a different key under the same id is refused instead of producing
-- garbage, and a key id that still wraps data keys cannot be dropped from
-- the config unnoticed.
CREATE TABLE encryption_keys (
    key_id      TEXT PRIMARY KEY,
    check_value TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
