//! The queries. Every statement uses `$1`-style placeholders and portable SQL and runs
//! unchanged on SQLite and PostgreSQL (sqlx's `Any` driver); writes that touch several
//! rows run in one transaction (on SQLite begun `IMMEDIATE`, so a busy database is
//! waited for instead of failing halfway). The few places where the two differ ask
//! [`Store::kind`].

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::Value as Json;
use sqlx::any::AnyRow;
use sqlx::{Any, AnyPool, Row, Transaction};

use crate::error::{is_fk_violation, is_unique_violation, Ctx, StoreError};
use crate::model::*;
use crate::open::{DbKind, EVO_VERSION};
use evo_core::{shape_key, Gate, Status};

/// A population database: a pool of connections to one SQLite file or one PostgreSQL
/// database. Share it by reference, or clone it (clones share the pool; [`Store::close`]
/// on one closes all). See the crate docs for the schema.
#[derive(Clone, Debug)]
pub struct Store {
    pub(crate) pool: AnyPool,
    pub(crate) kind: DbKind,
    /// The SQLite file; `None` on PostgreSQL.
    pub(crate) path: Option<std::path::PathBuf>,
    /// Opened read-only ([`Store::open_to_read`]): closing it writes nothing either.
    pub(crate) read_only: bool,
    /// The file, or the server URL without its password (for messages).
    pub(crate) location: String,
}

pub(crate) const RUN_COLS: &str = "id, name, created_at, updated_at, evo_version, config_toml, \
    problem, family, seed, strategy, evaluator, device, driver, nvrtc_version, arch, status, \
    search_state, settings";

pub(crate) const CANDIDATE_COLS: &str = "id, run_id, genome, hash, generation, parents, origin, \
    status, gate, detail, resources, fitness, source_key, created_at, evaluated_at, eval_ms, \
    evaluated_by, claims, lease_owner";

const MEASUREMENT_COLS: &str = "id, candidate_id, shape, shape_json, median_us, p20_us, \
    p80_us, samples, tflops, peak_fraction, max_abs_err, rel_l2";

const GENERATION_COLS: &str =
    "run_id, generation, elites, insights, state, best_fitness, evaluated, created_at";

/// Now as RFC 3339 text in UTC with milliseconds (fixed width, so text order is time
/// order), e.g. `2026-11-22T00:52:01.123Z`.
pub(crate) fn now() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

pub(crate) fn col<'r, T>(row: &'r AnyRow, name: &str, table: &'static str) -> Result<T, StoreError>
where
    T: sqlx::Decode<'r, Any> + sqlx::Type<Any>,
{
    row.try_get(name).map_err(|e| StoreError::Corrupt {
        table,
        message: format!("column {name}: {e}"),
    })
}

fn json_col<T: DeserializeOwned>(
    row: &AnyRow,
    name: &str,
    table: &'static str,
) -> Result<T, StoreError> {
    let text: String = col(row, name, table)?;
    serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
        table,
        message: format!("column {name} is not the JSON expected: {e}"),
    })
}

pub(crate) fn opt_json_col<T: DeserializeOwned>(
    row: &AnyRow,
    name: &str,
    table: &'static str,
) -> Result<Option<T>, StoreError> {
    let text: Option<String> = col(row, name, table)?;
    text.map(|text| {
        serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
            table,
            message: format!("column {name} is not the JSON expected: {e}"),
        })
    })
    .transpose()
}

pub(crate) fn u32_col(row: &AnyRow, name: &str, table: &'static str) -> Result<u32, StoreError> {
    let v: i64 = col(row, name, table)?;
    u32::try_from(v).map_err(|_| StoreError::Corrupt {
        table,
        message: format!("column {name} holds {v}, not a u32"),
    })
}

pub(crate) fn u64_col(row: &AnyRow, name: &str, table: &'static str) -> Result<u64, StoreError> {
    let v: i64 = col(row, name, table)?;
    u64::try_from(v).map_err(|_| StoreError::Corrupt {
        table,
        message: format!("column {name} holds {v}, not a count"),
    })
}

pub(crate) fn to_json(
    value: &impl serde::Serialize,
    what: &'static str,
) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::invalid(what, e.to_string()))
}

pub(crate) fn run_from_row(row: &AnyRow) -> Result<Run, StoreError> {
    const T: &str = "runs";
    let status: String = col(row, "status", T)?;
    let seed: i64 = col(row, "seed", T)?;
    Ok(Run {
        id: RunId(col(row, "id", T)?),
        name: col(row, "name", T)?,
        created_at: col(row, "created_at", T)?,
        updated_at: col(row, "updated_at", T)?,
        evo_version: col(row, "evo_version", T)?,
        config_toml: col(row, "config_toml", T)?,
        problem: col(row, "problem", T)?,
        family: col(row, "family", T)?,
        seed: seed as u64,
        strategy: col(row, "strategy", T)?,
        evaluator: col(row, "evaluator", T)?,
        device: col(row, "device", T)?,
        driver: col(row, "driver", T)?,
        nvrtc_version: col(row, "nvrtc_version", T)?,
        arch: col(row, "arch", T)?,
        status: RunStatus::parse(&status).ok_or_else(|| StoreError::Corrupt {
            table: T,
            message: format!("unknown run status `{status}`"),
        })?,
        search_state: opt_json_col(row, "search_state", T)?,
        settings: opt_json_col(row, "settings", T)?,
    })
}

pub(crate) fn candidate_from_row(row: &AnyRow) -> Result<Candidate, StoreError> {
    const T: &str = "candidates";
    let origin: String = col(row, "origin", T)?;
    Ok(Candidate {
        id: CandidateId(col(row, "id", T)?),
        run_id: RunId(col(row, "run_id", T)?),
        genome: col(row, "genome", T)?,
        hash: col(row, "hash", T)?,
        generation: u32_col(row, "generation", T)?,
        parents: json_col(row, "parents", T)?,
        origin: Origin::parse(&origin).ok_or_else(|| StoreError::Corrupt {
            table: T,
            message: format!("unknown origin `{origin}`"),
        })?,
        status: named_col(row, "status", T, Status::parse)?,
        gate: named_col(row, "gate", T, Gate::parse)?,
        detail: col(row, "detail", T)?,
        resources: opt_json_col(row, "resources", T)?,
        fitness: col(row, "fitness", T)?,
        source_key: col(row, "source_key", T)?,
        created_at: col(row, "created_at", T)?,
        evaluated_at: col(row, "evaluated_at", T)?,
        eval_ms: col(row, "eval_ms", T)?,
        evaluated_by: col(row, "evaluated_by", T)?,
        claims: u32_col(row, "claims", T)?,
        lease_owner: col(row, "lease_owner", T)?,
    })
}

/// A nullable column holding a name of evo-core's vocabulary (a status or a gate).
fn named_col<V>(
    row: &AnyRow,
    name: &str,
    table: &'static str,
    parse: fn(&str) -> Option<V>,
) -> Result<Option<V>, StoreError> {
    let text: Option<String> = col(row, name, table)?;
    text.map(|t| {
        parse(&t).ok_or_else(|| StoreError::Corrupt {
            table,
            message: format!("column {name} holds `{t}`, a name this evo does not know"),
        })
    })
    .transpose()
}

fn measurement_from_row(row: &AnyRow) -> Result<Measurement, StoreError> {
    const T: &str = "measurements";
    Ok(Measurement {
        id: col(row, "id", T)?,
        candidate_id: CandidateId(col(row, "candidate_id", T)?),
        shape: col(row, "shape", T)?,
        measured: NewMeasurement {
            shape: json_col(row, "shape_json", T)?,
            median_us: col(row, "median_us", T)?,
            p20_us: col(row, "p20_us", T)?,
            p80_us: col(row, "p80_us", T)?,
            samples: json_col::<Vec<Option<f64>>>(row, "samples", T)?
                .into_iter()
                .map(|s| s.unwrap_or(f64::NAN))
                .collect(),
            tflops: col(row, "tflops", T)?,
            peak_fraction: col(row, "peak_fraction", T)?,
            max_abs_err: col(row, "max_abs_err", T)?,
            rel_l2: col(row, "rel_l2", T)?,
        },
    })
}

pub(crate) fn generation_from_row(row: &AnyRow) -> Result<Generation, StoreError> {
    const T: &str = "generations";
    Ok(Generation {
        run_id: RunId(col(row, "run_id", T)?),
        generation: u32_col(row, "generation", T)?,
        elites: json_col(row, "elites", T)?,
        insights: json_col(row, "insights", T)?,
        state: json_col(row, "state", T)?,
        best_fitness: col(row, "best_fitness", T)?,
        evaluated: u64_col(row, "evaluated", T)?,
        created_at: col(row, "created_at", T)?,
    })
}

fn profile_from_row(row: &AnyRow) -> Result<Profile, StoreError> {
    const T: &str = "profiles";
    Ok(Profile {
        id: ProfileId(col(row, "id", T)?),
        candidate_id: CandidateId(col(row, "candidate_id", T)?),
        tool: col(row, "tool", T)?,
        shape: col(row, "shape", T)?,
        metrics: json_col(row, "metrics", T)?,
        created_at: col(row, "created_at", T)?,
    })
}

fn check_finite(what: &'static str, name: &str, v: Option<f64>) -> Result<(), StoreError> {
    match v {
        Some(x) if !x.is_finite() => Err(StoreError::invalid(what, format!("{name} is {x}"))),
        _ => Ok(()),
    }
}

/// A nullable float, bound so that PostgreSQL always sees DOUBLE PRECISION. (sqlx 0.8.6's
/// `Any` driver sends a NULL `Option<f64>` as a REAL parameter; a statement first
/// prepared with a NULL then rejects a later 8-byte value: "incorrect binary data format
/// in bind parameter". A NULL typed as `f32` goes out as DOUBLE PRECISION.)
pub(crate) struct F64(pub Option<f64>);

impl sqlx::Type<Any> for F64 {
    fn type_info() -> sqlx::any::AnyTypeInfo {
        <f64 as sqlx::Type<Any>>::type_info()
    }
}

impl<'q> sqlx::Encode<'q, Any> for F64 {
    fn encode_by_ref(
        &self,
        buf: &mut <Any as sqlx::Database>::ArgumentBuffer<'q>,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        match self.0 {
            Some(v) => <f64 as sqlx::Encode<'q, Any>>::encode_by_ref(&v, buf),
            None => <Option<f32> as sqlx::Encode<'q, Any>>::encode_by_ref(&None, buf),
        }
    }
}

/// NaN cannot be stored in SQLite (it becomes NULL anyway): make that explicit.
fn nan_to_none(v: Option<f64>) -> Option<f64> {
    v.filter(|x| !x.is_nan())
}

fn validate_result(
    result: &CandidateResult,
    measurements: &[NewMeasurement],
) -> Result<(), StoreError> {
    check_finite("result", "fitness", result.fitness)?;
    if result.fitness.is_some() && !result.status.has_fitness() {
        return Err(StoreError::invalid(
            "result",
            format!(
                "a `{}` candidate has no fitness (only evaluated and regressed do)",
                result.status
            ),
        ));
    }
    check_finite("result", "eval_ms", result.eval_ms)?;
    let mut shapes = HashSet::new();
    for m in measurements {
        let key = shape_key(&m.shape);
        for (name, v) in [
            ("median_us", m.median_us),
            ("p20_us", m.p20_us),
            ("p80_us", m.p80_us),
        ] {
            check_finite("measurement", &format!("{name} of shape {key}"), v)?;
        }
        if !shapes.insert(key.clone()) {
            return Err(StoreError::invalid(
                "measurement",
                format!("shape {key} is given twice"),
            ));
        }
    }
    Ok(())
}

impl Store {
    /// Opens (creating it if missing) the database at `url_or_path`: `population.db`, any
    /// path, `sqlite://PATH`, or a PostgreSQL server `postgres://user:pw@host/db` (the
    /// database must exist; its tables are created). Brings its schema up to date.
    /// Refuses, without writing a byte, a file that is not SQLite, a database of another
    /// program, and a database written by a newer evo ([`StoreError::TooNew`]).
    pub async fn open(url_or_path: &str) -> Result<Store, StoreError> {
        crate::open::open(url_or_path).await
    }

    /// Opens an existing database for the read commands: without writing anything when it
    /// is a SQLite file at this build's schema (so read-only files and folders can be
    /// read); one that needs a migration is opened (and migrated) as [`Store::open`] does.
    pub async fn open_to_read(url_or_path: &str) -> Result<Store, StoreError> {
        crate::open::open_to_read(url_or_path).await
    }

    /// The database file; on PostgreSQL the server's URL without its password (see
    /// [`Store::file`]).
    pub fn path(&self) -> &Path {
        self.path
            .as_deref()
            .unwrap_or_else(|| Path::new(&self.location))
    }

    /// The database file; `None` on PostgreSQL.
    pub fn file(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The file, or the server's URL without its password.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// SQLite or PostgreSQL.
    pub fn kind(&self) -> DbKind {
        self.kind
    }

    /// Closes every connection, first folding the write-ahead log into the database file
    /// (SQLite), so the file alone holds every committed write: a copy of population.db
    /// without its `-wal` file is complete. Best effort: a reader in another process may
    /// keep part of the log until it closes. Dropping a store without closing it loses
    /// nothing that was committed, but may leave the log beside the file.
    pub async fn close(self) {
        if self.kind == DbKind::Sqlite {
            // Fails harmlessly on a read-only open (nothing of its own to fold in).
            let _ = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(&self.pool)
                .await;
        }
        self.pool.close().await;
        // sqlx 0.8's close can return with a connection left open: one being handed back
        // (its release ping in flight) when the pool closed lands among the idle ones after
        // close took its last look at them. Closing again closes those.
        for _ in 0..1000 {
            if self.pool.size() == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            self.pool.close().await;
        }
        // SQLite removes the log when the last connection closes, but connections closed at
        // the same moment (the pool closes returned ones on their own tasks) can each see the
        // other still open and both leave it. One connection opened and closed alone folds
        // it in and removes it (unless another process has the file open: then it stays).
        if let (Some(path), false) = (&self.path, self.read_only) {
            crate::open::fold_log(path).await;
        }
    }

    /// A transaction that writes: on SQLite `BEGIN IMMEDIATE` (takes the write lock at
    /// once, so it waits for other writers instead of failing on upgrade).
    pub(crate) async fn write_tx(
        &self,
        context: &str,
    ) -> Result<Transaction<'static, Any>, StoreError> {
        match self.kind {
            DbKind::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
            DbKind::Postgres => self.pool.begin().await,
        }
        .ctx(|| format!("starting a transaction for {context}"))
    }

    /// The `meta` table: `schema_version`, `created_by`.
    pub async fn meta(&self) -> Result<BTreeMap<String, String>, StoreError> {
        let rows = sqlx::query("SELECT key, value FROM meta ORDER BY key")
            .fetch_all(&self.pool)
            .await
            .ctx(|| "reading meta".into())?;
        rows.iter()
            .map(|r| Ok((col(r, "key", "meta")?, col(r, "value", "meta")?)))
            .collect()
    }

    // ----- runs -----

    /// Adds a run in state `running`. Fails with [`StoreError::RunExists`] if the name is
    /// taken.
    pub async fn create_run(&self, run: &NewRun) -> Result<RunId, StoreError> {
        if run.name.trim().is_empty() {
            return Err(StoreError::invalid("run", "the name is empty"));
        }
        let now = now();
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO runs (name, created_at, updated_at, evo_version, config_toml, problem, \
             family, seed, strategy, evaluator, device, driver, nvrtc_version, arch, status) \
             VALUES ($1, $2, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING id",
        )
        .bind(&run.name)
        .bind(&now)
        .bind(EVO_VERSION)
        .bind(&run.config_toml)
        .bind(&run.problem)
        .bind(&run.family)
        .bind(run.seed as i64)
        .bind(&run.strategy)
        .bind(&run.evaluator)
        .bind(&run.device)
        .bind(&run.driver)
        .bind(&run.nvrtc_version)
        .bind(&run.arch)
        .bind(RunStatus::Running.name())
        .fetch_one(&self.pool)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                StoreError::RunExists(run.name.clone())
            } else {
                StoreError::Db {
                    context: format!("creating run `{}`", run.name),
                    source: Box::new(e),
                }
            }
        })?;
        Ok(RunId(id))
    }

    /// The run named `name_or_id`, else (if it is a number) the run with that id.
    pub async fn run(&self, name_or_id: &str) -> Result<Option<Run>, StoreError> {
        let row = sqlx::query(&format!("SELECT {RUN_COLS} FROM runs WHERE name = $1"))
            .bind(name_or_id)
            .fetch_optional(&self.pool)
            .await
            .ctx(|| format!("looking up run `{name_or_id}`"))?;
        if let Some(row) = row {
            return run_from_row(&row).map(Some);
        }
        match name_or_id.trim().parse::<i64>() {
            Ok(id) => self.run_by_id(RunId(id)).await,
            Err(_) => Ok(None),
        }
    }

    pub async fn run_by_id(&self, id: RunId) -> Result<Option<Run>, StoreError> {
        sqlx::query(&format!("SELECT {RUN_COLS} FROM runs WHERE id = $1"))
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await
            .ctx(|| format!("looking up run {id}"))?
            .map(|row| run_from_row(&row))
            .transpose()
    }

    /// Every run, oldest first, with its candidate counts and best fitness.
    pub async fn runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        let rows = sqlx::query(
            "SELECT r.id, r.name, r.created_at, r.updated_at, r.problem, r.family, r.strategy, \
             r.evaluator, r.device, r.status, \
             (SELECT MAX(c.fitness) FROM candidates c WHERE c.run_id = r.id AND c.status = $1) \
               AS best_fitness, \
             (SELECT MAX(c.fitness) FROM candidates c WHERE c.run_id = r.id AND c.status = $2) \
               AS best_regressed, \
             (SELECT MAX(g.generation) FROM generations g WHERE g.run_id = r.id) \
               AS last_generation \
             FROM runs r ORDER BY r.id",
        )
        .bind(Status::Evaluated.name())
        .bind(Status::Regressed.name())
        .fetch_all(&self.pool)
        .await
        .ctx(|| "listing runs".into())?;
        let count_rows = sqlx::query(
            "SELECT run_id, status, COUNT(*) AS n FROM candidates GROUP BY run_id, status",
        )
        .fetch_all(&self.pool)
        .await
        .ctx(|| "counting candidates".into())?;
        let mut counts: BTreeMap<i64, BTreeMap<String, u64>> = BTreeMap::new();
        for row in &count_rows {
            const T: &str = "candidates";
            let run: i64 = col(row, "run_id", T)?;
            let status: Option<String> = col(row, "status", T)?;
            counts.entry(run).or_default().insert(
                status.unwrap_or_else(|| PENDING.into()),
                u64_col(row, "n", T)?,
            );
        }
        rows.iter()
            .map(|row| {
                const T: &str = "runs";
                let id: i64 = col(row, "id", T)?;
                let status: String = col(row, "status", T)?;
                let last_generation: Option<i64> = col(row, "last_generation", T)?;
                let counts = counts.remove(&id).unwrap_or_default();
                Ok(RunSummary {
                    id: RunId(id),
                    name: col(row, "name", T)?,
                    created_at: col(row, "created_at", T)?,
                    updated_at: col(row, "updated_at", T)?,
                    problem: col(row, "problem", T)?,
                    family: col(row, "family", T)?,
                    strategy: col(row, "strategy", T)?,
                    evaluator: col(row, "evaluator", T)?,
                    device: col(row, "device", T)?,
                    status: RunStatus::parse(&status).ok_or_else(|| StoreError::Corrupt {
                        table: T,
                        message: format!("unknown run status `{status}`"),
                    })?,
                    candidates: counts.values().sum(),
                    counts,
                    best_fitness: col(row, "best_fitness", T)?,
                    best_regressed: col(row, "best_regressed", T)?,
                    last_generation: last_generation.map(|g| g as u32),
                })
            })
            .collect()
    }

    pub async fn set_run_status(&self, run: RunId, status: RunStatus) -> Result<(), StoreError> {
        let done = sqlx::query("UPDATE runs SET status = $1, updated_at = $2 WHERE id = $3")
            .bind(status.name())
            .bind(now())
            .bind(run.0)
            .execute(&self.pool)
            .await
            .ctx(|| format!("setting the status of run {run}"))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NoSuchRun(run.to_string()));
        }
        Ok(())
    }

    /// Replaces the run's search state (call once per generation, or use
    /// [`Store::save_generation_and_state`] to write both atomically).
    pub async fn save_search_state(&self, run: RunId, state: &Json) -> Result<(), StoreError> {
        let done = sqlx::query("UPDATE runs SET search_state = $1, updated_at = $2 WHERE id = $3")
            .bind(to_json(state, "search state")?)
            .bind(now())
            .bind(run.0)
            .execute(&self.pool)
            .await
            .ctx(|| format!("saving the search state of run {run}"))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NoSuchRun(run.to_string()));
        }
        Ok(())
    }

    /// Deletes a run and everything of it (candidates, measurements, baselines,
    /// generations, profiles).
    pub async fn delete_run(&self, run: RunId) -> Result<(), StoreError> {
        let done = sqlx::query("DELETE FROM runs WHERE id = $1")
            .bind(run.0)
            .execute(&self.pool)
            .await
            .ctx(|| format!("deleting run {run}"))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NoSuchRun(run.to_string()));
        }
        Ok(())
    }

    // ----- candidates -----

    /// Adds candidates to a run in one transaction and returns their ids in order. A
    /// genome already in the run (or twice in `candidates`) is an error
    /// ([`StoreError::DuplicateCandidate`]) and nothing is inserted; filter with
    /// [`Store::seen_hashes`] first, or use [`Store::insert_candidates_skipping_seen`].
    pub async fn insert_candidates(
        &self,
        run: RunId,
        candidates: &[NewCandidate],
    ) -> Result<Vec<CandidateId>, StoreError> {
        let ids = self.insert_impl(run, candidates, false).await?;
        Ok(ids.into_iter().flatten().collect())
    }

    /// Like [`Store::insert_candidates`], but a genome already in the run (or earlier in
    /// `candidates`) is skipped: its entry in the result is `None`.
    pub async fn insert_candidates_skipping_seen(
        &self,
        run: RunId,
        candidates: &[NewCandidate],
    ) -> Result<Vec<Option<CandidateId>>, StoreError> {
        self.insert_impl(run, candidates, true).await
    }

    async fn insert_impl(
        &self,
        run: RunId,
        candidates: &[NewCandidate],
        skip_seen: bool,
    ) -> Result<Vec<Option<CandidateId>>, StoreError> {
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.write_tx("inserting candidates").await?;
        let ids = Self::insert_tx(&mut tx, run, candidates, skip_seen).await?;
        tx.commit()
            .await
            .ctx(|| format!("committing candidates of run {run}"))?;
        Ok(ids)
    }

    /// Inserts candidates inside a transaction (see [`Store::insert_candidates`]).
    pub(crate) async fn insert_tx(
        tx: &mut Transaction<'static, Any>,
        run: RunId,
        candidates: &[NewCandidate],
        skip_seen: bool,
    ) -> Result<Vec<Option<CandidateId>>, StoreError> {
        let sql = if skip_seen {
            "INSERT INTO candidates (run_id, genome, hash, generation, parents, origin, \
             source_key, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (run_id, hash) DO NOTHING RETURNING id"
        } else {
            "INSERT INTO candidates (run_id, genome, hash, generation, parents, origin, \
             source_key, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id"
        };
        let now = now();
        let mut ids = Vec::with_capacity(candidates.len());
        for c in candidates {
            let hash = c.genome.hash().0;
            let id: Option<i64> = sqlx::query_scalar(sql)
                .bind(run.0)
                .bind(c.genome.canonical())
                .bind(&hash)
                .bind(i64::from(c.generation))
                .bind(to_json(&c.parents, "parents")?)
                .bind(c.origin.name())
                .bind(&c.source_key)
                .bind(&now)
                .fetch_optional(&mut **tx)
                .await
                .map_err(|e| {
                    if is_unique_violation(&e) {
                        StoreError::DuplicateCandidate {
                            run,
                            hash: hash.clone(),
                        }
                    } else if is_fk_violation(&e) {
                        StoreError::NoSuchRun(run.to_string())
                    } else {
                        StoreError::Db {
                            context: format!("inserting genome {hash} into run {run}"),
                            source: Box::new(e),
                        }
                    }
                })?;
            ids.push(id.map(CandidateId));
        }
        Ok(ids)
    }

    /// Hashes of every genome of the run, evaluated or not.
    pub async fn seen_hashes(&self, run: RunId) -> Result<HashSet<String>, StoreError> {
        sqlx::query_scalar("SELECT hash FROM candidates WHERE run_id = $1")
            .bind(run.0)
            .fetch_all(&self.pool)
            .await
            .ctx(|| format!("reading the hashes of run {run}"))
            .map(|v: Vec<String>| v.into_iter().collect())
    }

    async fn candidates_where(
        &self,
        filter: &str,
        bind: i64,
        context: impl FnOnce() -> String,
    ) -> Result<Vec<Candidate>, StoreError> {
        sqlx::query(&format!(
            "SELECT {CANDIDATE_COLS} FROM candidates WHERE {filter}"
        ))
        .bind(bind)
        .fetch_all(&self.pool)
        .await
        .ctx(context)?
        .iter()
        .map(candidate_from_row)
        .collect()
    }

    /// Candidates without a result, in id order: after a crash, these are the ones to
    /// evaluate again.
    pub async fn pending_candidates(&self, run: RunId) -> Result<Vec<Candidate>, StoreError> {
        self.candidates_where("run_id = $1 AND status IS NULL ORDER BY id", run.0, || {
            format!("reading the pending candidates of run {run}")
        })
        .await
    }

    /// Every candidate of the run, in id order.
    pub async fn candidates(&self, run: RunId) -> Result<Vec<Candidate>, StoreError> {
        self.candidates_where("run_id = $1 ORDER BY id", run.0, || {
            format!("reading the candidates of run {run}")
        })
        .await
    }

    pub async fn candidate(&self, id: CandidateId) -> Result<Option<Candidate>, StoreError> {
        let mut found = self
            .candidates_where("id = $1", id.0, || format!("reading candidate {id}"))
            .await?;
        Ok(found.pop())
    }

    pub async fn candidate_by_hash(
        &self,
        run: RunId,
        hash: &str,
    ) -> Result<Option<Candidate>, StoreError> {
        sqlx::query(&format!(
            "SELECT {CANDIDATE_COLS} FROM candidates WHERE run_id = $1 AND hash = $2"
        ))
        .bind(run.0)
        .bind(hash)
        .fetch_optional(&self.pool)
        .await
        .ctx(|| format!("looking up genome {hash} in run {run}"))?
        .map(|row| candidate_from_row(&row))
        .transpose()
    }

    /// Candidates (of every run) whose genome hash starts with `prefix` (hex digits,
    /// any case), in id order. Anything but hex digits matches nothing.
    pub async fn candidates_by_hash_prefix(
        &self,
        prefix: &str,
    ) -> Result<Vec<Candidate>, StoreError> {
        let prefix = prefix.trim().to_ascii_lowercase();
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(Vec::new());
        }
        sqlx::query(&format!(
            "SELECT {CANDIDATE_COLS} FROM candidates WHERE hash LIKE $1 ORDER BY id"
        ))
        .bind(format!("{prefix}%"))
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("looking up genome hashes starting with {prefix}"))?
        .iter()
        .map(candidate_from_row)
        .collect()
    }

    /// The best `top` candidates with status `evaluated` and a fitness: highest fitness
    /// first, ties by id (older first).
    pub async fn elites(&self, run: RunId, top: usize) -> Result<Vec<Candidate>, StoreError> {
        sqlx::query(&format!(
            "SELECT {CANDIDATE_COLS} FROM candidates \
             WHERE run_id = $1 AND status = $2 AND fitness IS NOT NULL \
             ORDER BY fitness DESC, id ASC LIMIT $3"
        ))
        .bind(run.0)
        .bind(Status::Evaluated.name())
        .bind(i64::try_from(top).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("reading the elites of run {run}"))?
        .iter()
        .map(candidate_from_row)
        .collect()
    }

    /// Candidates per status name ([`PENDING`] for those without a result).
    pub async fn status_counts(&self, run: RunId) -> Result<BTreeMap<String, u64>, StoreError> {
        let rows = sqlx::query(
            "SELECT status, COUNT(*) AS n FROM candidates WHERE run_id = $1 GROUP BY status",
        )
        .bind(run.0)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("counting the candidates of run {run}"))?;
        rows.iter()
            .map(|row| {
                let status: Option<String> = col(row, "status", "candidates")?;
                Ok((
                    status.unwrap_or_else(|| PENDING.into()),
                    u64_col(row, "n", "candidates")?,
                ))
            })
            .collect()
    }

    /// Stores the result of a pending candidate and its measurements in one transaction.
    /// Fails with [`StoreError::AlreadyRecorded`] if it already has one, and
    /// [`StoreError::Invalid`] for an unknown status or gate, a fitness on a status that
    /// has none, a non-finite time or a shape given twice.
    pub async fn record_result(
        &self,
        candidate: CandidateId,
        result: &CandidateResult,
        measurements: &[NewMeasurement],
    ) -> Result<(), StoreError> {
        self.record_impl(candidate, None, result, measurements)
            .await
    }

    /// [`Store::record_result`] for a candidate that `host` claimed
    /// ([`Store::claim_candidates`]): written only while the lease is still the host's
    /// ([`StoreError::LeaseLost`] when it expired and another host claimed the
    /// candidate), and the lease is released in the same transaction.
    pub async fn record_claimed_result(
        &self,
        candidate: CandidateId,
        host: &str,
        result: &CandidateResult,
        measurements: &[NewMeasurement],
    ) -> Result<(), StoreError> {
        self.record_impl(candidate, Some(host), result, measurements)
            .await
    }

    async fn record_impl(
        &self,
        candidate: CandidateId,
        host: Option<&str>,
        result: &CandidateResult,
        measurements: &[NewMeasurement],
    ) -> Result<(), StoreError> {
        validate_result(result, measurements)?;
        let resources = result
            .resources
            .as_ref()
            .map(|r| to_json(r, "resources"))
            .transpose()?;
        let mut tx = self
            .write_tx(&format!("the result of candidate {candidate}"))
            .await?;
        let done = sqlx::query(if host.is_some() {
            "UPDATE candidates SET status = $1, gate = $2, detail = $3, resources = $4, \
             fitness = $5, eval_ms = $6, evaluated_at = $7, \
             source_key = COALESCE($8, source_key), evaluated_by = $10, \
             lease_owner = NULL, lease_until = NULL \
             WHERE id = $9 AND status IS NULL AND lease_owner = $10"
        } else {
            "UPDATE candidates SET status = $1, gate = $2, detail = $3, resources = $4, \
             fitness = $5, eval_ms = $6, evaluated_at = $7, \
             source_key = COALESCE($8, source_key), evaluated_by = $10, \
             lease_owner = NULL, lease_until = NULL \
             WHERE id = $9 AND status IS NULL"
        })
        .bind(result.status.name())
        .bind(result.gate.map(Gate::name))
        .bind(&result.detail)
        .bind(resources)
        .bind(F64(result.fitness))
        .bind(F64(result.eval_ms))
        .bind(now())
        .bind(&result.source_key)
        .bind(candidate.0)
        .bind(host)
        .execute(&mut *tx)
        .await
        .ctx(|| format!("recording the result of candidate {candidate}"))?;
        if done.rows_affected() == 0 {
            let exists: Option<Option<String>> =
                sqlx::query_scalar("SELECT status FROM candidates WHERE id = $1")
                    .bind(candidate.0)
                    .fetch_optional(&mut *tx)
                    .await
                    .ctx(|| format!("looking up candidate {candidate}"))?;
            return Err(match (exists, host) {
                (Some(Some(_)), _) => StoreError::AlreadyRecorded(candidate),
                (Some(None), Some(host)) => StoreError::LeaseLost {
                    candidate,
                    host: host.to_string(),
                },
                (Some(None), None) => StoreError::AlreadyRecorded(candidate),
                (None, _) => StoreError::NoSuchCandidate(candidate),
            });
        }
        for m in measurements {
            let shape = shape_key(&m.shape);
            sqlx::query(
                "INSERT INTO measurements (candidate_id, shape, shape_json, median_us, p20_us, \
                 p80_us, samples, tflops, peak_fraction, max_abs_err, rel_l2) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            )
            .bind(candidate.0)
            .bind(&shape)
            .bind(to_json(&m.shape, "shape")?)
            .bind(F64(m.median_us))
            .bind(F64(m.p20_us))
            .bind(F64(m.p80_us))
            .bind(to_json(&m.samples, "samples")?)
            .bind(F64(nan_to_none(m.tflops)))
            .bind(F64(nan_to_none(m.peak_fraction)))
            .bind(F64(nan_to_none(m.max_abs_err)))
            .bind(F64(nan_to_none(m.rel_l2)))
            .execute(&mut *tx)
            .await
            .ctx(|| format!("storing the measurement of candidate {candidate} on {shape}"))?;
        }
        tx.commit()
            .await
            .ctx(|| format!("committing the result of candidate {candidate}"))
    }

    /// The candidate's measurements in the order they were recorded.
    pub async fn measurements(
        &self,
        candidate: CandidateId,
    ) -> Result<Vec<Measurement>, StoreError> {
        sqlx::query(&format!(
            "SELECT {MEASUREMENT_COLS} FROM measurements WHERE candidate_id = $1 ORDER BY id"
        ))
        .bind(candidate.0)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("reading the measurements of candidate {candidate}"))?
        .iter()
        .map(measurement_from_row)
        .collect()
    }

    // ----- baselines -----

    /// Sets the baseline of each given shape (canonical text, see [`shape_key`]) in one
    /// transaction; a shape that already has one is overwritten, other shapes are kept.
    pub async fn set_baselines<S: AsRef<str>, T: AsRef<str>>(
        &self,
        run: RunId,
        baselines: &[(S, f64, T)],
    ) -> Result<(), StoreError> {
        for (shape, median_us, _) in baselines {
            if !(median_us.is_finite() && *median_us > 0.0) {
                return Err(StoreError::invalid(
                    "baseline",
                    format!("time of shape {} is {median_us}", shape.as_ref()),
                ));
            }
        }
        let now = now();
        let mut tx = self
            .write_tx(&format!("the baselines of run {run}"))
            .await?;
        for (shape, median_us, source) in baselines {
            sqlx::query(
                "INSERT INTO baselines (run_id, shape, median_us, source, created_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id, shape) DO UPDATE SET \
                 median_us = excluded.median_us, source = excluded.source, \
                 created_at = excluded.created_at",
            )
            .bind(run.0)
            .bind(shape.as_ref())
            .bind(median_us)
            .bind(source.as_ref())
            .bind(&now)
            .execute(&mut *tx)
            .await
            .map_err(|e| {
                if is_fk_violation(&e) {
                    StoreError::NoSuchRun(run.to_string())
                } else {
                    StoreError::Db {
                        context: format!("setting the baseline of run {run}"),
                        source: Box::new(e),
                    }
                }
            })?;
        }
        tx.commit()
            .await
            .ctx(|| format!("committing the baselines of run {run}"))
    }

    /// Replaces the baselines of a run and, in the same transaction, the fitness and
    /// status of candidates that reached timing (`evaluated` ↔ `regressed` only: a new
    /// baseline changes speedups, not correctness). Each update is
    /// `(candidate, status, fitness)`.
    pub async fn rebase<S: AsRef<str>, T: AsRef<str>>(
        &self,
        run: RunId,
        baselines: &[(S, f64, T)],
        updates: &[(CandidateId, Status, Option<f64>)],
    ) -> Result<(), StoreError> {
        for (id, status, fitness) in updates {
            if !status.has_fitness() {
                return Err(StoreError::invalid(
                    "rescore",
                    format!("candidate {id}: status `{status}` does not carry a fitness"),
                ));
            }
            if fitness.is_some_and(|f| !f.is_finite()) {
                return Err(StoreError::invalid(
                    "rescore",
                    format!("candidate {id}: fitness {fitness:?}"),
                ));
            }
        }
        self.set_baselines(run, baselines).await?;
        let mut tx = self.write_tx(&format!("rescoring run {run}")).await?;
        for (id, status, fitness) in updates {
            let done = sqlx::query(
                "UPDATE candidates SET status = $1, fitness = $2 \
                 WHERE id = $3 AND run_id = $4 AND status IN ('evaluated', 'regressed')",
            )
            .bind(status.name())
            .bind(F64(*fitness))
            .bind(id.0)
            .bind(run.0)
            .execute(&mut *tx)
            .await
            .ctx(|| format!("rescoring candidate {id}"))?;
            if done.rows_affected() != 1 {
                return Err(StoreError::invalid(
                    "rescore",
                    format!("candidate {id} of run {run} has not reached timing"),
                ));
            }
        }
        tx.commit()
            .await
            .ctx(|| format!("committing the rescoring of run {run}"))
    }

    /// The run's baselines, by shape text.
    pub async fn baselines(&self, run: RunId) -> Result<Vec<Baseline>, StoreError> {
        let rows = sqlx::query(
            "SELECT run_id, shape, median_us, source, created_at FROM baselines \
             WHERE run_id = $1 ORDER BY shape",
        )
        .bind(run.0)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("reading the baselines of run {run}"))?;
        rows.iter()
            .map(|row| {
                const T: &str = "baselines";
                Ok(Baseline {
                    run_id: RunId(col(row, "run_id", T)?),
                    shape: col(row, "shape", T)?,
                    median_us: col(row, "median_us", T)?,
                    source: col(row, "source", T)?,
                    created_at: col(row, "created_at", T)?,
                })
            })
            .collect()
    }

    // ----- generations -----

    pub(crate) async fn upsert_generation_tx(
        tx: &mut Transaction<'static, Any>,
        g: &GenerationRow,
    ) -> Result<(), StoreError> {
        check_finite("generation", "best_fitness", g.best_fitness)?;
        sqlx::query(
            "INSERT INTO generations (run_id, generation, elites, insights, state, best_fitness, \
             evaluated, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (run_id, generation) DO UPDATE SET elites = excluded.elites, \
             insights = excluded.insights, state = excluded.state, \
             best_fitness = excluded.best_fitness, evaluated = excluded.evaluated, \
             created_at = excluded.created_at",
        )
        .bind(g.run_id.0)
        .bind(i64::from(g.generation))
        .bind(to_json(&g.elites, "elites")?)
        .bind(to_json(&g.insights, "insights")?)
        .bind(to_json(&g.state, "state")?)
        .bind(F64(g.best_fitness))
        .bind(i64::try_from(g.evaluated).unwrap_or(i64::MAX))
        .bind(now())
        .execute(&mut **tx)
        .await
        .map_err(|e| {
            if is_fk_violation(&e) {
                StoreError::NoSuchRun(g.run_id.to_string())
            } else {
                StoreError::Db {
                    context: format!("saving generation {} of run {}", g.generation, g.run_id),
                    source: Box::new(e),
                }
            }
        })?;
        Ok(())
    }

    /// Stores a generation; saving the same (run, generation) again replaces it (a
    /// resumed run may redo the generation it was killed in).
    pub async fn save_generation(&self, g: &GenerationRow) -> Result<(), StoreError> {
        let mut tx = self.write_tx("saving a generation").await?;
        Self::upsert_generation_tx(&mut tx, g).await?;
        tx.commit().await.ctx(|| "committing a generation".into())
    }

    /// [`Store::save_generation`] and [`Store::save_search_state`] in one transaction,
    /// so a crash cannot leave one without the other.
    pub async fn save_generation_and_state(
        &self,
        g: &GenerationRow,
        search_state: &Json,
    ) -> Result<(), StoreError> {
        let mut tx = self.write_tx("saving a generation").await?;
        Self::upsert_generation_tx(&mut tx, g).await?;
        let done = sqlx::query("UPDATE runs SET search_state = $1, updated_at = $2 WHERE id = $3")
            .bind(to_json(search_state, "search state")?)
            .bind(now())
            .bind(g.run_id.0)
            .execute(&mut *tx)
            .await
            .ctx(|| format!("saving the search state of run {}", g.run_id))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NoSuchRun(g.run_id.to_string()));
        }
        tx.commit().await.ctx(|| "committing a generation".into())
    }

    /// The run's generations in order.
    pub async fn generations(&self, run: RunId) -> Result<Vec<Generation>, StoreError> {
        sqlx::query(&format!(
            "SELECT {GENERATION_COLS} FROM generations WHERE run_id = $1 ORDER BY generation"
        ))
        .bind(run.0)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("reading the generations of run {run}"))?
        .iter()
        .map(generation_from_row)
        .collect()
    }

    /// The run's highest generation.
    pub async fn latest_generation(&self, run: RunId) -> Result<Option<Generation>, StoreError> {
        sqlx::query(&format!(
            "SELECT {GENERATION_COLS} FROM generations WHERE run_id = $1 \
             ORDER BY generation DESC LIMIT 1"
        ))
        .bind(run.0)
        .fetch_optional(&self.pool)
        .await
        .ctx(|| format!("reading the latest generation of run {run}"))?
        .map(|row| generation_from_row(&row))
        .transpose()
    }

    // ----- profiles -----

    pub async fn insert_profile(
        &self,
        candidate: CandidateId,
        profile: &NewProfile,
    ) -> Result<ProfileId, StoreError> {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO profiles (candidate_id, tool, shape, metrics, created_at) \
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
        )
        .bind(candidate.0)
        .bind(&profile.tool)
        .bind(&profile.shape)
        .bind(to_json(&profile.metrics, "metrics")?)
        .bind(now())
        .fetch_one(&self.pool)
        .await
        .map_err(|e| {
            if is_fk_violation(&e) {
                StoreError::NoSuchCandidate(candidate)
            } else {
                StoreError::Db {
                    context: format!("storing a profile of candidate {candidate}"),
                    source: Box::new(e),
                }
            }
        })?;
        Ok(ProfileId(id))
    }

    /// The candidate's profiles, oldest first.
    pub async fn profiles(&self, candidate: CandidateId) -> Result<Vec<Profile>, StoreError> {
        sqlx::query(
            "SELECT id, candidate_id, tool, shape, metrics, created_at FROM profiles \
             WHERE candidate_id = $1 ORDER BY id",
        )
        .bind(candidate.0)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("reading the profiles of candidate {candidate}"))?
        .iter()
        .map(profile_from_row)
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_fixed_width_rfc3339() {
        let t = now();
        assert_eq!(t.len(), "2026-11-22T00:52:01.123Z".len(), "{t}");
        assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
    }

    #[test]
    fn results_are_validated() {
        let ok = CandidateResult {
            fitness: Some(1.5),
            ..CandidateResult::new(Status::Evaluated)
        };
        assert!(validate_result(&ok, &[]).is_ok());
        let fitness_on_failure = CandidateResult {
            fitness: Some(1.0),
            ..CandidateResult::new(Status::CompileFailed)
        };
        assert!(validate_result(&fitness_on_failure, &[]).is_err());
        let nan = CandidateResult {
            fitness: Some(f64::NAN),
            ..CandidateResult::new(Status::Evaluated)
        };
        assert!(validate_result(&nan, &[]).is_err());
    }

    /// A status or gate name this evo does not know (another program wrote the row) is
    /// refused when read, never taken for another.
    #[tokio::test]
    async fn unknown_status_names_in_the_database_are_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("p.db").to_str().unwrap())
            .await
            .unwrap();
        let run = store
            .create_run(&NewRun {
                name: "r".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let genome = evo_core::Genome::parse("A=1").unwrap();
        let id = store
            .insert_candidates(run, &[NewCandidate::new(genome, 0, Origin::Seed)])
            .await
            .unwrap()[0];
        for (column, name) in [("status", "exploded"), ("gate", "vibes")] {
            sqlx::query(&format!("UPDATE candidates SET {column} = $1"))
                .bind(name)
                .execute(&store.pool)
                .await
                .unwrap();
            let err = store.candidate(id).await.unwrap_err();
            assert!(
                matches!(&err, StoreError::Corrupt { .. }) && err.to_string().contains(name),
                "{err}"
            );
            sqlx::query(&format!("UPDATE candidates SET {column} = NULL"))
                .execute(&store.pool)
                .await
                .unwrap();
        }
        store.close().await;
    }
}
