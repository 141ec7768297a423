-- What a provider reports a call cost, when it does (Infrai's
-- metadata.cost_usd, docs/design.md §18): an attempt's cost_usd is this
-- when present, else its tokens at the price in force when it started.
ALTER TABLE attempts ADD COLUMN reported_cost_usd DOUBLE PRECISION;
