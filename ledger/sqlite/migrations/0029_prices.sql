-- Processor prices as configured, one row per change (docs/design.md
-- §18): an attempt's cost_usd is its provider's token counts at the price
-- in force when it started (less the batch discount for a batch item), so
-- a later price change never rewrites what was spent.
CREATE TABLE processor_prices (
    id              INTEGER PRIMARY KEY,
    processor_id    TEXT NOT NULL,
    input_per_mtok  REAL NOT NULL,
    output_per_mtok REAL NOT NULL,
    batch_discount  REAL NOT NULL DEFAULT 0,
    from_at         INTEGER NOT NULL
);
CREATE INDEX processor_prices_from ON processor_prices (processor_id, from_at);
CREATE INDEX attempts_started ON attempts (started_at);
