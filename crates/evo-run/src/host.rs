//! [`Run::work`]: this host's part of a run. Claims pending candidates under a lease
//! (extended by a heartbeat while it evaluates), evaluates them, records each result
//! when it arrives (only while the lease is still its own), advances generations when
//! nothing is pending, and stops on the run's end, a budget or [`Stop`]; then gives back
//! its leases and says what it did.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use evo_core::{Gate, Genome, Status};
use evo_eval::profile::SanitizerVerdict;
use evo_store::{
    CandidateId, CandidateResult, GpuBusy, HostStats, NewProfile, RunStatus, StoreError,
};
use tokio::task::JoinSet;

use crate::backend::{Backend, Contention, GenomeResult, RegressionRule};
use crate::baseline::Baseline;
use crate::budget::Budget;
use crate::error::Result;
use crate::generation::{history_of, stored_genome, Invocation, Step};
use crate::scoring::{measurements, result_row, score, times_on};
use crate::{Evaluated, HostOptions, Progress, Run, WorkReport};

/// Counters of one invocation.
#[derive(Default)]
pub(crate) struct Tally {
    pub evaluated: u64,
    pub by_status: BTreeMap<&'static str, u64>,
    pub gpu_ms: f64,
    /// Time spent waiting for the database (claims, results, advances, polls).
    pub db: Duration,
    /// Generations this host advanced.
    pub advanced: u32,
    /// Results refused because the lease had gone to another host.
    pub lost: u64,
    /// The best fitness this host knows of in the run: a result above it goes through
    /// the sanitizer gate before it is recorded.
    pub best: Option<f64>,
    /// Whether the user was told that the sanitizer gate cannot run here.
    pub sanitizer_unavailable_said: bool,
    /// The budget share at this invocation's first result (see [`eta`]).
    pub first_share: Option<f64>,
    /// Where the evaluations' time went, ms per stage ([`HostStats::stages_ms`]).
    pub stages_ms: BTreeMap<String, f64>,
}

impl Tally {
    /// Awaits a database call, adding its time to [`Tally::db`].
    pub async fn db<T>(&mut self, call: impl Future<Output = T>) -> T {
        let t = Instant::now();
        let r = call.await;
        self.db += t.elapsed();
        r
    }
}

/// A genome in evaluation: `None` when it was halted before reaching a GPU (its lease is
/// released when the host finishes).
type InFlight = JoinSet<Option<(CandidateId, Genome, GenomeResult)>>;

/// What one invocation works with, fixed while it works.
struct Shift<'a> {
    host: &'a HostOptions,
    baseline: &'a Baseline,
    started: Instant,
    progress: &'a dyn Progress,
}

/// Why the loop stopped, and whether the run itself is done.
struct Ended {
    reason: &'static str,
    run_finished: bool,
}

impl Run {
    /// Works on the run until it finishes, a budget of `host` is spent or its
    /// [`crate::Stop`] is requested; reports what this invocation did.
    pub async fn work(self, host: HostOptions, progress: &dyn Progress) -> Result<WorkReport> {
        tracing::info!(run = %self.name, evaluator = %self.backend.label(), strategy = self.kind.name(), "search starts");
        let started = Instant::now();
        let mut tally = Tally::default();
        // From before the baseline: a joining host waiting for it sees this one alive.
        let heartbeat = self.heartbeat();
        let baseline = match self.baseline(&host.stop, progress).await {
            Ok(b) => b,
            Err(e) => {
                heartbeat.abort();
                // Not on Ctrl-C: an interrupted run is kept, to resume.
                if self.created_here && !host.stop.is_requested() {
                    crate::open::discard_new_run(
                        &self.store,
                        self.id,
                        &self.name,
                        Some(&self.host.id),
                    )
                    .await;
                }
                return Err(e);
            }
        };
        tally.gpu_ms += baseline.gpu_ms;
        tally.best = history_of(&self.store.candidates(self.id).await?, &self.context.space)?
            .best()
            .and_then(|r| r.fitness());
        let shift = Shift {
            host: &host,
            baseline: &baseline,
            started,
            progress,
        };
        let ended = self.claim_loop(&shift, &mut tally).await;
        heartbeat.abort();
        let ended = ended?;
        let report = self.finish(&host, ended, started, tally, progress).await;
        // The write-ahead log folded into the file: population.db alone is complete.
        self.store.close().await;
        report
    }

    fn lease(&self) -> Duration {
        Duration::from_millis(self.settings.lease_ms)
    }

    /// The other hosts of this run that are alive: not finished, and a heartbeat within two
    /// leases (a host heartbeats every quarter lease, from before its baseline on).
    pub(crate) async fn other_live_hosts(&self) -> Result<Vec<evo_store::Host>> {
        let now = evo_store::now_ms();
        let lease_ms = self.lease().as_millis() as i64;
        Ok(self
            .store
            .hosts(self.id)
            .await?
            .into_iter()
            .filter(|h| {
                h.id != self.host.id
                    && h.finished_at.is_none()
                    && now - h.heartbeat_ms < 2 * lease_ms
            })
            .collect())
    }

    /// Keeps this host alive in `hosts` and its leases held while it evaluates.
    fn heartbeat(&self) -> tokio::task::JoinHandle<()> {
        let (store, id, lease) = (self.store.clone(), self.host.id.clone(), self.lease());
        tokio::spawn(async move {
            let every = (lease / 4).max(Duration::from_millis(50));
            loop {
                tokio::time::sleep(every).await;
                if let Err(e) = store.heartbeat(&id, lease).await {
                    tracing::warn!("heartbeat: {e}");
                }
            }
        })
    }

    async fn claim_loop(&self, shift: &Shift<'_>, tally: &mut Tally) -> Result<Ended> {
        let (host, started) = (shift.host, shift.started);
        let limit = self.backend.parallelism();
        let overlap = self.overlap(limit);
        let poll = (self.lease() / 20).clamp(Duration::from_millis(20), Duration::from_millis(500));
        let mut reason = "interrupted";
        let mut stopping = false;
        // Why the run finished, when an early advance below finished it.
        let mut finished_early = None;
        let mut in_flight = InFlight::new();
        let mut generation_now = 0u32;
        let search = &self.context.config.search;
        let regression = Arc::new(RegressionRule {
            keys: shift.baseline.keys.clone(),
            baseline: shift.baseline.times.clone(),
            tolerance: search.regression_tolerance,
            shapes: search.regression_shapes,
        });
        loop {
            if !stopping {
                stopping = host.stop.is_requested();
                if let Some(spent) = spent(host, started, tally.evaluated + in_flight.len() as u64)
                {
                    reason = spent;
                    stopping = true;
                }
            }
            // Take work while there is room: pending candidates nobody holds, or whose
            // holder's lease expired.
            if !stopping && in_flight.len() < limit {
                let room = match host.budget {
                    Some(Budget::Evaluations(n)) => (limit - in_flight.len())
                        .min((n - tally.evaluated - in_flight.len() as u64) as usize),
                    _ => limit - in_flight.len(),
                };
                if let Some(g) = self
                    .claim(room, &mut in_flight, host, &regression, tally)
                    .await?
                {
                    generation_now = g;
                }
            }
            // Only the generation's last genomes in evaluation (`step` checks that none
            // is left to claim): propose the next generation now, so its first compiles
            // run while these finish instead of leaving the GPUs idle after them.
            if !stopping && !in_flight.is_empty() && in_flight.len() <= overlap {
                match self
                    .step(Invocation { started, tally }, shift.progress, overlap)
                    .await?
                {
                    // New proposals: claim them before waiting on a result.
                    Step::Advanced(None) => continue,
                    // The run ended (this host's leases had lapsed and another host
                    // recorded its genomes): keep the reason for when these finish.
                    Step::Advanced(Some(why)) => finished_early = Some(why),
                    // Lost or pending: wait on a result, so the loop always moves on.
                    Step::RunFinished | Step::Lost | Step::Pending => {}
                }
            }
            if let Some(joined) = in_flight.join_next().await {
                if let Some((id, genome, r)) = joined.expect("evaluation task") {
                    self.record(id, &genome, r, generation_now, shift, tally)
                        .await?;
                }
                continue;
            }
            // Nothing in flight and nothing to claim.
            if stopping {
                return Ok(Ended {
                    reason,
                    run_finished: false,
                });
            }
            match self
                .step(Invocation { started, tally }, shift.progress, 0)
                .await?
            {
                Step::RunFinished => {
                    return Ok(Ended {
                        reason: finished_early.unwrap_or("the run finished"),
                        run_finished: true,
                    })
                }
                Step::Pending => tokio::time::sleep(poll).await,
                Step::Lost | Step::Advanced(None) => {}
                Step::Advanced(Some(reason)) => {
                    return Ok(Ended {
                        reason,
                        run_finished: true,
                    })
                }
            }
        }
    }

    /// Claims up to `room` candidates and starts evaluating them; returns the generation
    /// of the last one claimed.
    async fn claim(
        &self,
        room: usize,
        in_flight: &mut InFlight,
        host: &HostOptions,
        regression: &Arc<RegressionRule>,
        tally: &mut Tally,
    ) -> Result<Option<u32>> {
        let claimed = tally
            .db(self
                .store
                .claim_candidates(self.id, &self.host.id, room, self.lease()))
            .await?;
        let mut generation = None;
        let contention = if claimed.is_empty() {
            None
        } else {
            self.contention(&regression.keys, tally).await?
        };
        for c in claimed {
            generation = Some(c.generation);
            let genome = stored_genome(&c, &self.context.space)?;
            let (backend, halt, id) = (self.backend.clone(), host.stop.halted(), c.id);
            let (regression, contention) = (regression.clone(), contention.clone());
            in_flight.spawn(async move {
                let r = backend
                    .evaluate(
                        id.0 as u64,
                        &genome,
                        &halt,
                        Some(&regression),
                        contention.as_deref(),
                    )
                    .await?;
                Some((id, genome, r))
            });
        }
        Ok(generation)
    }

    /// The run's [`Contention`] on the shapes `keys`, from the elites stored now.
    async fn contention(
        &self,
        keys: &[String],
        tally: &mut Tally,
    ) -> Result<Option<Arc<Contention>>> {
        let wanted = self.context.config.search.params.elites;
        let elites = tally.db(self.store.elites(self.id, wanted)).await?;
        let mut measured = Vec::with_capacity(elites.len());
        for e in &elites {
            let ms = tally.db(self.store.measurements(e.id)).await?;
            measured.push(ms.into_iter().map(|m| m.measured).collect::<Vec<_>>());
        }
        Ok(Contention::of(keys, &measured, wanted).map(Arc::new))
    }

    /// Scores a result against the baseline and records it under this host's lease.
    async fn record(
        &self,
        id: CandidateId,
        genome: &Genome,
        r: GenomeResult,
        generation: u32,
        shift: &Shift<'_>,
        tally: &mut Tally,
    ) -> Result<()> {
        let baseline = shift.baseline;
        let (status, fitness) = match &r.timing_stopped {
            // Regressed on the shapes timed; no fitness from a partial set.
            Some(_) => (Status::Regressed, None),
            None => score(
                r.status,
                &baseline.times,
                &times_on(&r.shapes, &baseline.keys),
                &self.context.config.search,
            ),
        };
        let mut row = result_row(&r, fitness);
        row.status = status;
        if let Some(why) = &r.timing_stopped {
            row.detail = Some(why.clone());
        }
        let sanitizer = match fitness {
            Some(f) if tally.best.is_none_or(|b| f > b) => {
                self.sanitize_new_best(genome, &mut row, shift, tally).await
            }
            _ => None,
        };
        let (status, fitness) = (row.status, row.fitness);
        let recorded = tally
            .db(self
                .store
                .record_claimed_result(id, &self.host.id, &row, &measurements(&r)))
            .await;
        match recorded {
            Ok(()) => {}
            Err(e @ StoreError::LeaseLost { .. }) => {
                tally.lost += 1;
                tracing::warn!("{e}");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
        if let Some(verdict) = sanitizer {
            let profile = NewProfile {
                tool: SanitizerVerdict::PROFILE_TOOL.into(),
                shape: None,
                metrics: serde_json::to_value(&verdict).expect("serializes"),
            };
            tally.db(self.store.insert_profile(id, &profile)).await?;
        }
        if fitness.is_some_and(|f| tally.best.is_none_or(|b| f > b)) {
            tally.best = fitness;
        }
        tally.evaluated += 1;
        tally.gpu_ms += r.gpu_ms;
        for (stage, ms) in &r.stages_ms {
            *tally.stages_ms.entry(stage.clone()).or_default() += ms;
        }
        *tally.by_status.entry(status.name()).or_default() += 1;
        let elapsed = shift.started.elapsed();
        let share = budget_share(shift.host.budget, elapsed, tally.evaluated, generation);
        let first_share = *tally.first_share.get_or_insert(match shift.host.budget {
            // A resumed run's generation budget was partly spent before this invocation.
            Some(Budget::Generations(_)) => share.unwrap_or(0.0),
            _ => 0.0,
        });
        shift.progress.evaluated(&Evaluated {
            generation,
            evaluated: tally.evaluated,
            by_status: &tally.by_status,
            per_hour: tally.evaluated as f64 / (elapsed.as_secs_f64() / 3600.0).max(1e-9),
            best_fitness: tally.best,
            budget_share: share,
            eta: share.and_then(|s| eta(elapsed, first_share, s)),
        });
        tracing::info!(genome = %genome.canonical(), status = status.name(), fitness = ?fitness, "evaluated");
        Ok(())
    }

    /// The sanitizer gate on a result about to become the run's best (GPU evaluator only):
    /// a finding makes `row` incorrect at the sanitizer gate with the tool's words. The
    /// verdict, to store as the candidate's `sanitizer` profile.
    async fn sanitize_new_best(
        &self,
        genome: &Genome,
        row: &mut CandidateResult,
        shift: &Shift<'_>,
        tally: &mut Tally,
    ) -> Option<SanitizerVerdict> {
        if !matches!(self.backend.as_ref(), Backend::Gpu(_)) {
            return None;
        }
        let verdict = self.backend.sanitize(genome).await;
        tally.gpu_ms += verdict.seconds() * 1e3;
        *tally.stages_ms.entry("sanitizer".into()).or_default() += verdict.seconds() * 1e3;
        match &verdict {
            SanitizerVerdict::Clean { .. } => {
                tracing::info!(genome = %genome.canonical(), seconds = verdict.seconds(), "new best is sanitizer-clean");
            }
            SanitizerVerdict::Finding { finding, .. } => {
                shift.progress.note(&format!(
                    "{} would have been the best so far; the sanitizer gate rejects it: {finding}",
                    genome.canonical()
                ));
                row.status = Status::Incorrect;
                row.gate = Some(Gate::Sanitizer);
                row.detail = Some(finding.clone());
                row.fitness = None;
            }
            SanitizerVerdict::NotRun { reason } => {
                if !tally.sanitizer_unavailable_said {
                    tally.sanitizer_unavailable_said = true;
                    shift.progress.note(&format!(
                        "the sanitizer gate cannot run here ({reason}): new bests are recorded unsanitized, and `evo export` sanitizes before it writes"
                    ));
                }
            }
        }
        Some(verdict)
    }

    /// Stops the workers, records this host's counters and releases its leases; marks
    /// the run interrupted or finished when no other host still works on it.
    async fn finish(
        &self,
        host: &HostOptions,
        ended: Ended,
        started: Instant,
        tally: Tally,
        progress: &dyn Progress,
    ) -> Result<WorkReport> {
        let interrupted = host.stop.is_requested();
        let wall = started.elapsed().as_secs_f64();
        let gpu_busy = self.backend.shut_down(wall).await;
        let db_ms = tally.db.as_secs_f64() * 1e3;
        let stats = HostStats {
            wall_s: wall,
            advanced: tally.advanced,
            lost_leases: tally.lost,
            gpu_busy: gpu_busy
                .iter()
                .map(|(g, f)| GpuBusy { gpu: *g, busy: *f })
                .collect(),
            reason: ended.reason.into(),
            stages_ms: {
                let mut stages = tally.stages_ms.clone();
                stages.insert("database".into(), db_ms);
                stages
            },
        };
        let store = &self.store;
        store
            .finish_host(
                &self.host.id,
                tally.evaluated,
                db_ms,
                &evo_store::to_stored_json(&stats),
            )
            .await?;
        if !ended.run_finished {
            // This host stops; the run goes on if another host still works on it.
            let others = self.other_live_hosts().await?.len();
            if others == 0 {
                let status = if interrupted {
                    RunStatus::Interrupted
                } else {
                    RunStatus::Finished
                };
                store.set_run_status(self.id, status).await?;
            } else {
                progress.note(&format!(
                    "{others} other host(s) still work on run `{}`",
                    self.name
                ));
            }
        }
        // The fittest genome, regressed ones included (against a fast external baseline
        // every early kernel regresses).
        let candidates = store.candidates(self.id).await?;
        let history = history_of(&candidates, &self.context.space)?;
        let best = history.best().and_then(|r| {
            // The stored row's hash (a genome stored before a knob existed keeps its own),
            // so `evo show HASH` finds it.
            let stored = candidates
                .iter()
                .find(|c| stored_genome(c, &self.context.space).is_ok_and(|g| g.hash() == r.hash))
                .map_or_else(|| r.hash.0.clone(), |c| c.hash.clone());
            r.fitness().map(|f| (f, r.genome.canonical(), stored))
        });
        Ok(WorkReport {
            run: self.name.clone(),
            reason: if interrupted {
                "interrupted"
            } else {
                ended.reason
            }
            .into(),
            interrupted,
            evaluated: tally.evaluated,
            wall_s: wall,
            gpus: self.gpus,
            gpu_ms: tally.gpu_ms,
            gpu_busy,
            db_ms,
            advanced: tally.advanced,
            lost_leases: tally.lost,
            statuses: store.status_counts(self.id).await?,
            best,
            baseline: store
                .baselines(self.id)
                .await?
                .into_iter()
                .next()
                .map(|b| b.source),
        })
    }
}

/// The share of `budget` spent after `elapsed`, `evaluated` results of this invocation,
/// or in generation `generation` of the run (a generation budget counts the run's).
fn budget_share(
    budget: Option<Budget>,
    elapsed: Duration,
    evaluated: u64,
    generation: u32,
) -> Option<f64> {
    let share = match budget? {
        Budget::Time(t) => elapsed.as_secs_f64() / t.as_secs_f64().max(1e-9),
        Budget::Evaluations(n) => evaluated as f64 / n.max(1) as f64,
        Budget::Generations(n) => f64::from(generation) / f64::from(n.max(1)),
    };
    Some(share.clamp(0.0, 1.0))
}

/// Time left at the pace so far: `elapsed` took the budget from `first` to `now`.
fn eta(elapsed: Duration, first: f64, now: f64) -> Option<Duration> {
    let done = now - first;
    (done > 1e-6).then(|| Duration::from_secs_f64(elapsed.as_secs_f64() * (1.0 - now) / done))
}

/// The budget of `host` that is spent, if one is: time from `started`, or evaluations
/// (those in flight count). A spent time budget also halts what has not reached a GPU.
fn spent(host: &HostOptions, started: Instant, evaluations: u64) -> Option<&'static str> {
    match host.budget {
        Some(Budget::Time(t)) if started.elapsed() >= t => {
            host.stop.halt();
            Some("time budget spent")
        }
        Some(Budget::Evaluations(n)) if evaluations >= n => Some("evaluation budget spent"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_share_and_eta() {
        let min = |m: u64| Duration::from_secs(60 * m);
        let b = Some(Budget::Time(min(60)));
        assert_eq!(budget_share(b, min(15), 7, 0), Some(0.25));
        assert_eq!(eta(min(15), 0.0, 0.25), Some(min(45)));
        let b = Some(Budget::Evaluations(200));
        assert_eq!(budget_share(b, min(10), 50, 3), Some(0.25));
        assert_eq!(eta(min(10), 0.0, 0.25), Some(min(30)));
        // A resumed run at generation 5 of 10 that reached generation 6 in 4 minutes.
        let b = Some(Budget::Generations(10));
        assert_eq!(budget_share(b, min(4), 30, 6), Some(0.6));
        let left = eta(min(4), 0.5, 0.6).unwrap().as_secs_f64();
        assert!((left - 16.0 * 60.0).abs() < 1e-6, "{left}");
        assert_eq!(eta(min(4), 0.5, 0.5), None);
        assert_eq!(budget_share(None, min(4), 30, 6), None);
        assert_eq!(
            budget_share(Some(Budget::Time(min(1))), min(2), 0, 0),
            Some(1.0)
        );
    }
}
