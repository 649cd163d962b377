//! evo-store: the population database — runs, candidates, per-shape measurements,
//! baselines, generations and profiles — through sqlx on SQLite (`population.db` by
//! default). Only this crate names sqlx.
//!
//! Status: placeholder; the schema and migrations arrive with the search issue.

/// The database file `evo search` uses when `--db` is not given.
pub const DEFAULT_DB_FILE: &str = "population.db";
