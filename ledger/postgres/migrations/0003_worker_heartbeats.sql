-- Live worker processes. Each stage-running process refreshes its row every
-- few seconds; the number of live rows sets each process's share of every
-- processor's configured limits, so N processes together stay within them.
CREATE TABLE worker_heartbeats (
    process_id   TEXT PRIMARY KEY,
    started_at   BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL
);
