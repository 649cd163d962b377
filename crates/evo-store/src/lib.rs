//! evo-store: the population database of evo — runs, candidates, per-shape
//! measurements, baselines, generations and profiles — so that a search can be killed at
//! any moment and resumed, and `evo runs / elites / show / lineage / stats / report /
//! export` can read what it found. Only this crate names sqlx.
//!
//! SQLite by default (`population.db`, [`DEFAULT_DB_FILE`]), bundled libsqlite3, WAL
//! journal, foreign keys on, 10 s busy timeout, `synchronous = FULL`; or PostgreSQL
//! (`postgres://...`), which many hosts share ([`DbKind`]). Runtime queries only,
//! through sqlx's `Any` driver, written with `$1` placeholders and portable SQL: the same
//! statements run on both. Migrations live in `crates/evo-store/migrations/{sqlite,postgres}`
//! (same versions, same tables and columns) and are embedded at build time;
//! [`Store::open`] applies the missing ones.
//!
//! # Schema (version 2)
//!
//! | table          | key                        | holds |
//! |----------------|----------------------------|-------|
//! | `meta`         | key                        | `schema_version`, `created_by` (`evo X.Y.Z`) |
//! | `runs`         | id; name unique            | config TOML, problem, family, seed, strategy, evaluator (`gpu` / `replay:FILE`), device, driver, NVRTC version, arch, status (`running` / `finished` / `interrupted`), search state (JSON) |
//! | `candidates`   | id; (run_id, hash) unique  | canonical genome, hash, generation, parents (JSON hashes), origin, status (NULL = pending), gate, detail, resources (JSON), fitness, source (compile cache) key, created/evaluated at, eval ms |
//! | `measurements` | id; (candidate_id, shape) unique | per shape (canonical text + JSON): median / p20 / p80 µs, samples (JSON), TFLOP/s, peak fraction, max abs error, relative L2 |
//! | `baselines`    | (run_id, shape)            | median µs and its source (`genome:<hash>`, `import:<file>`) |
//! | `generations`  | (run_id, generation)       | elites, insights, state (JSON), best fitness, evaluated count |
//! | `profiles`     | id                         | candidate, tool, shape, metrics (JSON) |
//! | `hosts`        | id (`hostname:pid:tag`)    | run, device, GPUs, evaluator, heartbeat, evaluations, database time, stats (JSON) |
//!
//! Version 2 added `runs.settings` (JSON: lease, generation budget, patience, mixed
//! GPUs) and, on candidates, `lease_owner`, `lease_until` (ms since the epoch),
//! `evaluated_by` and `claims`: see `hosts.rs` for how hosts share a run.
//!
//! Deleting a run deletes everything of it (`ON DELETE CASCADE`). Timestamps are RFC 3339
//! text in UTC with milliseconds (`2026-11-22T00:52:01.123Z`); JSON is stored as text.
//!
//! # What callers must know
//!
//! * **Duplicates.** A genome is in a run at most once (`UNIQUE(run_id, hash)`).
//!   [`Store::insert_candidates`] fails with [`StoreError::DuplicateCandidate`] and
//!   inserts nothing when any genome is already in the run (or twice in the batch);
//!   [`Store::insert_candidates_skipping_seen`] skips those instead and returns `None`
//!   for them.
//! * **Durability.** [`Store::insert_candidates`] and [`Store::record_result`] (the
//!   status, gate, detail, resources, fitness, timing and all measurements) are each one
//!   transaction: a process killed at any moment loses only what was not committed.
//!   After a crash, [`Store::pending_candidates`] lists the candidates to evaluate again.
//! * **Results are written once.** Recording a result for a candidate that has one is
//!   [`StoreError::AlreadyRecorded`].
//! * **One vocabulary.** Statuses and gates are evo-core's [`evo_core::Status`] and
//!   [`evo_core::Gate`], stored as their snake_case names (a row with another name is
//!   [`StoreError::Corrupt`]); a fitness is accepted only for the timed statuses
//!   (`evaluated` and `regressed`), and only `evaluated` candidates are elites or count
//!   for best fitness.
//! * **Run state is typed.** Settings, search state, elites and host counters are the
//!   types of [`state`] ([`RunSettings`], [`SearchState`], ...), stored as JSON text.
//! * **Refusals leave files untouched.** A file that is not SQLite, a SQLite database of
//!   another program, and a database whose `_sqlx_migrations` (or `meta.schema_version`)
//!   holds a version this build does not know ([`StoreError::TooNew`]: upgrade evo) are
//!   refused before anything is written.
//! * A run's `seed` is a `u64` stored in a signed 64-bit column (same bits).
//! * NaN error values in measurements are stored as NULL (SQLite has no NaN).
//! * **Several hosts.** [`Store::claim_candidates`] gives each pending candidate to one
//!   host under a lease; [`Store::record_claimed_result`] writes only under that lease
//!   ([`StoreError::LeaseLost`]); [`Store::advance_generation`] is a compare-and-set that
//!   one host wins.

mod error;
mod hosts;
mod model;
mod open;
pub mod state;
mod store;

pub use error::StoreError;
pub use evo_core::shape_key;
pub use hosts::{now_ms, Advance, Host, NewHost};
pub use model::{
    Baseline, Candidate, CandidateId, CandidateResult, Generation, GenerationRow, Measurement,
    NewCandidate, NewMeasurement, NewProfile, NewRun, Origin, Profile, ProfileId, Run, RunId,
    RunStatus, RunSummary, PENDING,
};
pub use open::{
    database_file, known_schema_versions, redact_url, schema_version, DbKind, BUSY_TIMEOUT,
};
pub use state::{to_stored_json, EliteEntry, GpuBusy, HostStats, RunSettings, SearchState};
pub use store::Store;

/// The database file `evo search` uses when `--db` is not given.
pub const DEFAULT_DB_FILE: &str = "population.db";
