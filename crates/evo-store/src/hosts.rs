//! Several hosts on one run: hosts register and heartbeat, claim pending candidates with
//! a lease, write results back under their lease, and advance generations with a
//! compare-and-set that exactly one host wins.
//!
//! Leases are times in milliseconds since the Unix epoch from the hosts' clocks (keep
//! them in sync with NTP; a lease is many seconds, skew of a few hundred ms is harmless).
//! On PostgreSQL a claim is `UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED)`,
//! so concurrent claims never wait on each other nor take the same row; on SQLite the
//! same `UPDATE ... RETURNING` runs under the database's single write lock.

use std::time::Duration;

use serde_json::Value as Json;

use crate::error::{Ctx, StoreError};
use crate::model::*;
use crate::open::DbKind;
use crate::store::{
    candidate_from_row, col, now, opt_json_col, to_json, u32_col, u64_col, CANDIDATE_COLS,
};
use crate::Store;

/// Milliseconds since the Unix epoch on this host's clock.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A process that works on a run (`evo search` or `evo join`).
#[derive(Clone, Debug, PartialEq)]
pub struct NewHost {
    /// `hostname:pid:tag`, unique; the owner name of its leases.
    pub id: String,
    pub hostname: String,
    pub pid: u32,
    /// The GPU name (`None` on the replay evaluator).
    pub device: Option<String>,
    pub gpus: u32,
    pub evaluator: String,
}

/// A host as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct Host {
    pub id: String,
    pub run_id: RunId,
    pub hostname: String,
    pub pid: u32,
    pub device: Option<String>,
    pub gpus: u32,
    pub evaluator: String,
    pub started_at: String,
    pub heartbeat_ms: i64,
    pub finished_at: Option<String>,
    pub evaluated: u64,
    pub db_ms: f64,
    pub stats: Option<Json>,
}

/// What [`Store::advance_generation`] writes when it wins.
#[derive(Clone, Debug)]
pub struct Advance<'a> {
    /// The newest generation row the caller saw (`None`: no generation finished yet);
    /// the advance fails if another host has written one since.
    pub expected_latest: Option<u32>,
    /// The generation just completed (elites, insights, state), if any.
    pub completed: Option<&'a GenerationRow>,
    /// The generation the proposals belong to.
    pub next_generation: u32,
    pub proposals: &'a [NewCandidate],
    /// The run's search state after the advance.
    pub search_state: &'a Json,
    /// Mark the run finished (budget, patience or an exhausted space).
    pub finish: bool,
    /// How many candidates of the completed generation may still be pending (each under
    /// a lease that has not expired: being evaluated): the next generation is proposed
    /// while the last few of this one finish. 0: every candidate of the run has a
    /// result. An advance that finishes the run takes none.
    pub overlap: u64,
}

const HOST_COLS: &str = "id, run_id, hostname, pid, device, gpus, evaluator, started_at, \
    heartbeat_ms, finished_at, evaluated, db_ms, stats";

impl Store {
    /// Sets the run-wide settings (a JSON object every host reads).
    pub async fn set_run_settings(&self, run: RunId, settings: &Json) -> Result<(), StoreError> {
        let done = sqlx::query("UPDATE runs SET settings = $1, updated_at = $2 WHERE id = $3")
            .bind(to_json(settings, "settings")?)
            .bind(now())
            .bind(run.0)
            .execute(&self.pool)
            .await
            .ctx(|| format!("saving the settings of run {run}"))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NoSuchRun(run.to_string()));
        }
        Ok(())
    }

    /// Records a host starting work on a run.
    pub async fn register_host(&self, run: RunId, host: &NewHost) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO hosts (id, run_id, hostname, pid, device, gpus, evaluator, started_at, \
             heartbeat_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(&host.id)
        .bind(run.0)
        .bind(&host.hostname)
        .bind(i64::from(host.pid))
        .bind(&host.device)
        .bind(i64::from(host.gpus))
        .bind(&host.evaluator)
        .bind(now())
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .ctx(|| format!("registering host {} on run {run}", host.id))?;
        Ok(())
    }

    /// The hosts that ever worked on the run, in the order they started.
    pub async fn hosts(&self, run: RunId) -> Result<Vec<Host>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {HOST_COLS} FROM hosts WHERE run_id = $1 ORDER BY started_at, id"
        ))
        .bind(run.0)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("reading the hosts of run {run}"))?;
        rows.iter()
            .map(|row| {
                const T: &str = "hosts";
                Ok(Host {
                    id: col(row, "id", T)?,
                    run_id: RunId(col(row, "run_id", T)?),
                    hostname: col(row, "hostname", T)?,
                    pid: u32_col(row, "pid", T)?,
                    device: col(row, "device", T)?,
                    gpus: u32_col(row, "gpus", T)?,
                    evaluator: col(row, "evaluator", T)?,
                    started_at: col(row, "started_at", T)?,
                    heartbeat_ms: col(row, "heartbeat_ms", T)?,
                    finished_at: col(row, "finished_at", T)?,
                    evaluated: u64_col(row, "evaluated", T)?,
                    db_ms: col(row, "db_ms", T)?,
                    stats: opt_json_col(row, "stats", T)?,
                })
            })
            .collect()
    }

    /// Says the host is alive and extends the leases of the candidates it holds to
    /// `lease` from now. Returns how many leases were extended.
    pub async fn heartbeat(&self, host: &str, lease: Duration) -> Result<u64, StoreError> {
        let now = now_ms();
        sqlx::query("UPDATE hosts SET heartbeat_ms = $1 WHERE id = $2")
            .bind(now)
            .bind(host)
            .execute(&self.pool)
            .await
            .ctx(|| format!("heartbeat of host {host}"))?;
        let done = sqlx::query(
            "UPDATE candidates SET lease_until = $1 WHERE lease_owner = $2 AND status IS NULL",
        )
        .bind(now.saturating_add(ms(lease)))
        .bind(host)
        .execute(&self.pool)
        .await
        .ctx(|| format!("extending the leases of host {host}"))?;
        Ok(done.rows_affected())
    }

    /// Gives back the candidates the host claimed and did not record: they are in the
    /// queue again at once. Returns how many.
    pub async fn release_leases(&self, host: &str) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE candidates SET lease_owner = NULL, lease_until = NULL \
             WHERE lease_owner = $1 AND status IS NULL",
        )
        .bind(host)
        .execute(&self.pool)
        .await
        .ctx(|| format!("releasing the leases of host {host}"))?;
        Ok(done.rows_affected())
    }

    /// Ends a host whose process is known to be dead (killed, crashed): its leases are
    /// released and it is marked finished, so no one waits for it or counts it as working.
    /// Its counters stay as they were. Returns how many leases were released.
    pub async fn end_dead_host(&self, host: &str) -> Result<u64, StoreError> {
        let released = self.release_leases(host).await?;
        sqlx::query("UPDATE hosts SET finished_at = $1 WHERE id = $2 AND finished_at IS NULL")
            .bind(now())
            .bind(host)
            .execute(&self.pool)
            .await
            .ctx(|| format!("ending dead host {host}"))?;
        Ok(released)
    }

    /// Marks the host finished with its counters, and releases its leases.
    pub async fn finish_host(
        &self,
        host: &str,
        evaluated: u64,
        db_ms: f64,
        stats: &Json,
    ) -> Result<(), StoreError> {
        self.release_leases(host).await?;
        sqlx::query(
            "UPDATE hosts SET finished_at = $1, heartbeat_ms = $2, evaluated = $3, db_ms = $4, \
             stats = $5 WHERE id = $6",
        )
        .bind(now())
        .bind(now_ms())
        .bind(i64::try_from(evaluated).unwrap_or(i64::MAX))
        .bind(if db_ms.is_finite() { db_ms } else { 0.0 })
        .bind(to_json(stats, "host stats")?)
        .bind(host)
        .execute(&self.pool)
        .await
        .ctx(|| format!("finishing host {host}"))?;
        Ok(())
    }

    /// Claims up to `n` pending candidates of the run for `host` until `lease` from now:
    /// those nobody holds and those whose lease expired, oldest first. Each is returned
    /// to exactly one host (row locks skipped on PostgreSQL, the write lock on SQLite).
    pub async fn claim_candidates(
        &self,
        run: RunId,
        host: &str,
        n: usize,
        lease: Duration,
    ) -> Result<Vec<Candidate>, StoreError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let lock = match self.kind {
            DbKind::Postgres => " FOR UPDATE SKIP LOCKED",
            DbKind::Sqlite => "",
        };
        let now = now_ms();
        let mut tx = self.write_tx("claiming candidates").await?;
        let rows = sqlx::query(&format!(
            "UPDATE candidates SET lease_owner = $1, lease_until = $2, claims = claims + 1 \
             WHERE id IN (SELECT id FROM candidates WHERE run_id = $3 AND status IS NULL \
             AND (lease_owner IS NULL OR lease_until < $4) ORDER BY id LIMIT $5{lock}) \
             RETURNING {CANDIDATE_COLS}"
        ))
        .bind(host)
        .bind(now.saturating_add(ms(lease)))
        .bind(run.0)
        .bind(now)
        .bind(i64::try_from(n).unwrap_or(i64::MAX))
        .fetch_all(&mut *tx)
        .await
        .ctx(|| format!("claiming candidates of run {run}"))?;
        tx.commit()
            .await
            .ctx(|| format!("committing claims on run {run}"))?;
        let mut claimed = rows
            .iter()
            .map(candidate_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        claimed.sort_by_key(|c| c.id);
        Ok(claimed)
    }

    /// Completes a generation and stores the next one's proposals, if no other host did
    /// so first: in one transaction (the run's row locked on PostgreSQL, the database on
    /// SQLite) it checks that the newest generation row is still `expected_latest`, that
    /// no candidate of the run is pending (but at most [`Advance::overlap`] ones of the
    /// completed generation under a live lease), that `next_generation` has no
    /// candidates yet, and that the run has not finished; then writes the completed
    /// generation, the proposals and the search state. `Ok(false)`: another host advanced
    /// (or finished the run) first; nothing was written.
    pub async fn advance_generation(
        &self,
        run: RunId,
        a: &Advance<'_>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.write_tx(&format!("advancing run {run}")).await?;
        if self.kind == DbKind::Postgres {
            sqlx::query("SELECT id FROM runs WHERE id = $1 FOR UPDATE")
                .bind(run.0)
                .fetch_optional(&mut *tx)
                .await
                .ctx(|| format!("locking run {run}"))?
                .ok_or_else(|| StoreError::NoSuchRun(run.to_string()))?;
        }
        let status: Option<String> = sqlx::query_scalar("SELECT status FROM runs WHERE id = $1")
            .bind(run.0)
            .fetch_optional(&mut *tx)
            .await
            .ctx(|| format!("reading the status of run {run}"))?;
        let finished = match status {
            None => return Err(StoreError::NoSuchRun(run.to_string())),
            Some(s) => s == RunStatus::Finished.name(),
        };
        let latest: Option<i64> =
            sqlx::query_scalar("SELECT MAX(generation) FROM generations WHERE run_id = $1")
                .bind(run.0)
                .fetch_one(&mut *tx)
                .await
                .ctx(|| format!("reading the latest generation of run {run}"))?;
        let pending: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM candidates WHERE run_id = $1 AND status IS NULL",
        )
        .bind(run.0)
        .fetch_one(&mut *tx)
        .await
        .ctx(|| format!("counting the pending candidates of run {run}"))?;
        // Pending candidates an overlapping advance tolerates: ones of the generation it
        // completes under a lease that has not expired (an expired one's holder may be
        // dead: nobody is evaluating it).
        let overlapping: i64 = match a.completed {
            Some(g) if a.overlap > 0 && !a.finish => sqlx::query_scalar(
                "SELECT COUNT(*) FROM candidates WHERE run_id = $1 AND status IS NULL \
                 AND generation = $2 AND lease_owner IS NOT NULL AND lease_until >= $3",
            )
            .bind(run.0)
            .bind(i64::from(g.generation))
            .bind(now_ms())
            .fetch_one(&mut *tx)
            .await
            .ctx(|| format!("counting the candidates of run {run} in evaluation"))?,
            _ => 0,
        };
        let overlap = i64::try_from(a.overlap).unwrap_or(i64::MAX);
        let pending_refused = pending > overlapping || overlapping > overlap;
        let proposed: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM candidates WHERE run_id = $1 AND generation = $2 \
             AND origin <> $3",
        )
        .bind(run.0)
        .bind(i64::from(a.next_generation))
        .bind(Origin::Baseline.name())
        .fetch_one(&mut *tx)
        .await
        .ctx(|| {
            format!(
                "counting the candidates of generation {}",
                a.next_generation
            )
        })?;
        if finished || latest != a.expected_latest.map(i64::from) || pending_refused || proposed > 0
        {
            tx.rollback()
                .await
                .ctx(|| format!("abandoning the advance of run {run}"))?;
            return Ok(false);
        }
        if let Some(g) = a.completed {
            Self::upsert_generation_tx(&mut tx, g).await?;
        }
        Self::insert_tx(&mut tx, run, a.proposals, false).await?;
        let mut sql = String::from("UPDATE runs SET search_state = $1, updated_at = $2");
        if a.finish {
            sql.push_str(", status = $4");
        }
        sql.push_str(" WHERE id = $3");
        let mut q = sqlx::query(&sql)
            .bind(to_json(a.search_state, "search state")?)
            .bind(now())
            .bind(run.0);
        if a.finish {
            q = q.bind(RunStatus::Finished.name());
        }
        q.execute(&mut *tx)
            .await
            .ctx(|| format!("saving the search state of run {run}"))?;
        tx.commit()
            .await
            .ctx(|| format!("committing the advance of run {run}"))?;
        Ok(true)
    }
}
