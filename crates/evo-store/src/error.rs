//! [`StoreError`]: everything that can go wrong, with enough context to act on.

use std::path::PathBuf;

use crate::{CandidateId, RunId};

/// The boxed source of a database error (sqlx stays private to this crate).
pub type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "unsupported database `{url}`: {reason} (give a SQLite file path, \
         sqlite://PATH, or a PostgreSQL URL postgres://USER:PASSWORD@HOST:PORT/DATABASE)"
    )]
    UnsupportedUrl { url: String, reason: &'static str },

    #[error("{path} is not a SQLite database: {reason}; evo did not touch it")]
    NotSqlite { path: PathBuf, reason: String },

    #[error(
        "{path} is a database but not an evo population database (it has the \
         tables {tables} and no evo schema); evo did not touch it"
    )]
    NotEvoDatabase { path: PathBuf, tables: String },

    #[error(
        "{path} was written by a newer evo: it has schema version(s) {unknown:?}, and this \
         evo {evo_version} knows versions up to {known_max}; upgrade evo to open it \
         (the file was not modified)"
    )]
    TooNew {
        path: PathBuf,
        unknown: Vec<i64>,
        known_max: i64,
        evo_version: &'static str,
    },

    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error(
        "cannot connect to the PostgreSQL server at {server} ({url}): the connection was \
         refused; start the server, or check the host and port in --db (or EVO_DB)"
    )]
    Refused { server: String, url: String },

    #[error(
        "cannot connect to the PostgreSQL server at {server} ({url}): no answer in {waited_s} s; \
         check that the host is reachable from here and the port in --db (or EVO_DB)"
    )]
    ConnectTimeout {
        server: String,
        url: String,
        waited_s: u64,
    },

    #[error("cannot open database {path}: {source}")]
    Open { path: PathBuf, source: Source },

    #[error("cannot create database {path}: its folder {folder} does not exist (create it, or pass --db PATH)")]
    NoFolder { path: PathBuf, folder: PathBuf },

    #[error(
        "cannot write {path}: {what} is read-only (SQLite keeps its -wal and -shm files beside \
         the database); the read commands (runs, elites, show, lineage, diff, stats, report) \
         work on it as it is; to search or export, copy it to a writable folder"
    )]
    ReadOnly { path: PathBuf, what: String },

    #[error("cannot bring the schema of {path} up to date: {source}")]
    Migrate { path: PathBuf, source: Source },

    #[error("a run named `{0}` already exists")]
    RunExists(String),

    #[error("no run {0}")]
    NoSuchRun(String),

    #[error("no candidate {0}")]
    NoSuchCandidate(CandidateId),

    #[error("genome {hash} is already in run {run}")]
    DuplicateCandidate { run: RunId, hash: String },

    #[error("candidate {0} already has a result")]
    AlreadyRecorded(CandidateId),

    #[error(
        "candidate {candidate}: the lease of host {host} expired and another host claimed \
         it; its result was not written (raise --lease if evaluations take that long)"
    )]
    LeaseLost {
        candidate: CandidateId,
        host: String,
    },

    #[error("invalid {what}: {message}")]
    Invalid { what: &'static str, message: String },

    #[error("database row of {table} cannot be read: {message}")]
    Corrupt {
        table: &'static str,
        message: String,
    },

    #[error("database error while {context}: {source}")]
    Db { context: String, source: Source },
}

impl StoreError {
    /// Whether the database location itself is wrong whatever is there (`--db` must
    /// change: a usage error).
    pub fn is_usage(&self) -> bool {
        matches!(self, StoreError::UnsupportedUrl { .. })
    }

    pub(crate) fn invalid(what: &'static str, message: impl Into<String>) -> Self {
        StoreError::Invalid {
            what,
            message: message.into(),
        }
    }
}

/// Whether a sqlx error is a UNIQUE (or PRIMARY KEY) violation.
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.kind() == sqlx::error::ErrorKind::UniqueViolation)
}

/// Whether a sqlx error is a FOREIGN KEY violation.
pub(crate) fn is_fk_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.kind() == sqlx::error::ErrorKind::ForeignKeyViolation)
}

/// `.ctx("doing X")` turns a sqlx error into [`StoreError::Db`] saying what was being done.
pub(crate) trait Ctx<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, StoreError>;
}

impl<T> Ctx<T> for Result<T, sqlx::Error> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::Db {
            context: context(),
            source: Box::new(e),
        })
    }
}
