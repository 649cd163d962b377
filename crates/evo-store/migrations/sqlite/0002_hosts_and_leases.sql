-- evo population database, schema version 2: several hosts share one run.
-- Same columns as migrations/postgres/0002_hosts_and_leases.sql.

-- Run-wide settings every host obeys (JSON): allow_mixed_devices, lease_ms,
-- max_generations, patience.
ALTER TABLE runs ADD COLUMN settings TEXT;

-- A pending candidate is claimed by one host until lease_until (ms since the Unix epoch);
-- an expired lease puts it back in the queue. evaluated_by names the host that
-- recorded its result; claims counts how often it was claimed.
ALTER TABLE candidates ADD COLUMN lease_owner TEXT;
ALTER TABLE candidates ADD COLUMN lease_until INTEGER;
ALTER TABLE candidates ADD COLUMN evaluated_by TEXT;
ALTER TABLE candidates ADD COLUMN claims INTEGER NOT NULL DEFAULT 0;
CREATE INDEX candidates_lease ON candidates (lease_owner);

-- One `evo search` / `evo join` process working on a run.
CREATE TABLE hosts (
    id           TEXT PRIMARY KEY NOT NULL, -- hostname:pid:random, the lease owner
    run_id       INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    hostname     TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    device       TEXT,                      -- GPU name; NULL on the replay evaluator
    gpus         INTEGER NOT NULL,
    evaluator    TEXT NOT NULL,
    started_at   TEXT NOT NULL,
    heartbeat_ms INTEGER NOT NULL,          -- ms since the Unix epoch
    finished_at  TEXT,
    evaluated    INTEGER NOT NULL DEFAULT 0,
    db_ms        REAL NOT NULL DEFAULT 0,   -- time spent in database calls
    stats        TEXT                       -- JSON: wall time, per-GPU busy fractions
);
CREATE INDEX hosts_run ON hosts (run_id);
