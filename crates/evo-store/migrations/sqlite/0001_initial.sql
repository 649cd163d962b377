-- evo population database, schema version 1.
--
-- Conventions (kept so the same statements can later target PostgreSQL):
-- * timestamps are RFC 3339 text in UTC with milliseconds, e.g. 2026-11-22T00:52:01.123Z;
-- * JSON documents are TEXT holding serde_json output;
-- * status, gate and origin names are validated by evo-store, not by CHECK constraints,
--   so a new name does not need a table rebuild.

-- Key/value facts about the database itself: schema_version, created_by.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);

-- One `evo search` run.
CREATE TABLE runs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT NOT NULL UNIQUE,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    evo_version   TEXT NOT NULL,
    config_toml   TEXT NOT NULL,
    problem       TEXT NOT NULL,
    family        TEXT NOT NULL,
    seed          INTEGER NOT NULL,         -- the u64 seed's bits as a signed 64-bit integer
    strategy      TEXT NOT NULL,
    evaluator     TEXT NOT NULL,            -- "gpu" or "replay:FILE"
    device        TEXT,
    driver        TEXT,
    nvrtc_version TEXT,
    arch          TEXT,
    status        TEXT NOT NULL,            -- running | finished | interrupted
    search_state  TEXT                      -- JSON, rewritten every generation
);

-- One genome of one run. status NULL = not evaluated yet (re-evaluated after a crash).
CREATE TABLE candidates (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id       INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    genome       TEXT NOT NULL,             -- canonical text, NAME=value,... sorted by name
    hash         TEXT NOT NULL,             -- evo_core::GenomeHash of the canonical text
    generation   INTEGER NOT NULL,
    parents      TEXT NOT NULL,             -- JSON array of parent genome hashes
    origin       TEXT NOT NULL,             -- seed | random | mutation | crossover | exhaustive | baseline
    status       TEXT,                      -- evo_eval::Status name; NULL while pending
    gate         TEXT,                      -- evo_eval::Gate name of the failing gate
    detail       TEXT,
    resources    TEXT,                      -- JSON (registers, shared memory, spills, ...)
    fitness      REAL,                      -- only for evaluated / regressed candidates
    source_key   TEXT,                      -- compile cache key of the rendered source
    created_at   TEXT NOT NULL,
    evaluated_at TEXT,
    eval_ms      REAL,
    UNIQUE (run_id, hash)
);
CREATE INDEX candidates_run_status ON candidates (run_id, status);
CREATE INDEX candidates_run_fitness ON candidates (run_id, fitness);
CREATE INDEX candidates_run_generation ON candidates (run_id, generation);
CREATE INDEX candidates_source_key ON candidates (source_key);

-- Per candidate and shape: times, throughput, errors.
CREATE TABLE measurements (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    candidate_id  INTEGER NOT NULL REFERENCES candidates (id) ON DELETE CASCADE,
    shape         TEXT NOT NULL,            -- canonical text, e.g. BATCH=1,HEADS=8,SEQ=4096
    shape_json    TEXT NOT NULL,            -- the same as a JSON object
    median_us     REAL,
    p20_us        REAL,
    p80_us        REAL,
    samples       TEXT NOT NULL,            -- JSON array of sample times in microseconds
    tflops        REAL,
    peak_fraction REAL,
    max_abs_err   REAL,
    rel_l2        REAL,
    UNIQUE (candidate_id, shape)
);

-- The baseline time per run and shape that fitness is measured against.
CREATE TABLE baselines (
    run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    shape      TEXT NOT NULL,
    median_us  REAL NOT NULL,
    source     TEXT NOT NULL,               -- e.g. genome:<hash> or import:torch_sdpa.json
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, shape)
);

-- One row per finished generation of a run.
CREATE TABLE generations (
    run_id       INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    generation   INTEGER NOT NULL,
    elites       TEXT NOT NULL,             -- JSON
    insights     TEXT NOT NULL,             -- JSON
    state        TEXT NOT NULL,             -- JSON
    best_fitness REAL,
    evaluated    INTEGER NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (run_id, generation)
);

-- Profiler output for a candidate (e.g. ncu metrics).
CREATE TABLE profiles (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    candidate_id INTEGER NOT NULL REFERENCES candidates (id) ON DELETE CASCADE,
    tool         TEXT NOT NULL,
    shape        TEXT,
    metrics      TEXT NOT NULL,             -- JSON
    created_at   TEXT NOT NULL
);
CREATE INDEX profiles_candidate ON profiles (candidate_id);
