//! `evo search`, `evo join` and `evo baseline import`: flags to an [`evo_run::Run`], and
//! what a run prints — a spinner with this host's counters, a line per generation, and
//! the summary. Ctrl-C is handled here, once: the first asks the run to stop and save,
//! the second aborts.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use evo_run::{Budget, HostOptions, Run, RunRequest, Stop, WorkReport};
use evo_store::Store;

use crate::output::outln;

/// The spinner: counters as its message, generation lines above it, notes on stderr.
struct Bar(indicatif::ProgressBar);

impl evo_run::Progress for Bar {
    fn note(&self, line: &str) {
        self.0.suspend(|| eprintln!("{line}"));
    }

    fn evaluated(&self, u: &evo_run::Evaluated<'_>) {
        let failures: Vec<String> = u
            .by_status
            .iter()
            .filter(|(s, _)| **s != "evaluated")
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        let budget = match (u.budget_share, u.eta) {
            (Some(s), Some(eta)) => format!(" | {:.0}% of the budget, ETA {}", 100.0 * s, hm(eta)),
            (Some(s), None) => format!(" | {:.0}% of the budget", 100.0 * s),
            _ => String::new(),
        };
        self.0.set_message(format!(
            "gen {} | {} evaluated here | best {} the baseline | {} | {:.0}/h{budget}",
            u.generation,
            u.evaluated,
            u.best_fitness.map_or("-".into(), |f| format!("{f:.3}x")),
            if failures.is_empty() {
                "no failures".to_string()
            } else {
                failures.join(", ")
            },
            u.per_hour
        ));
    }

    fn generation(&self, generation: u32, evaluated: u64, best_fitness: Option<f64>) {
        self.0.println(format!(
            "generation {generation}: {evaluated} genomes evaluated in the run, best fitness {}",
            best_fitness.map_or("-".into(), |f| format!("{f:.4}x"))
        ));
    }
}

/// The exit code of a search stopped by Ctrl-C or SIGTERM after saving (128 + SIGINT).
pub const INTERRUPTED: u8 = 130;

/// `1h05m`, `4m10s`, `12s`.
fn hm(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The first Ctrl-C or SIGTERM (a batch scheduler's stop) stops the run: evaluations on
/// a GPU finish and are saved, the run is marked interrupted. A second one exits at once.
/// `resume`: the command that continues the run, said when a second signal aborts it.
fn on_ctrl_c(stop: Stop, resume: String) {
    tokio::spawn(async move {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        let which = tokio::select! {
            r = tokio::signal::ctrl_c() => r.is_ok().then_some("Ctrl-C"),
            r = term.recv() => r.map(|_| "SIGTERM"),
        };
        let Some(which) = which else { return };
        eprintln!(
            "\n{which}: finishing the evaluations in flight, then saving ({which} again to abort)"
        );
        stop.request();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        // Committed results are kept; the evaluations in flight are lost and redone.
        eprintln!("aborted: every result saved so far is kept; continue with: {resume}");
        std::process::exit(130);
    });
}

/// Opens the run of `request` and works on it until it ends, `budget` is spent or
/// Ctrl-C; prints the summary. `progress`: draw the spinner (on a terminal).
pub fn run(
    request: RunRequest,
    budget: Option<Budget>,
    progress: bool,
    json: bool,
) -> Result<ExitCode> {
    let rt = crate::setup::runtime()?;
    rt.block_on(async {
        let db = request.db.clone();
        // Bad input (options, the config, its family and seeds, a missing GPU) refuses a new
        // run before a database file exists.
        let request = request.check()?;
        let store = Store::open(&db)
            .await
            .context("opening the population database")?;
        let bar = Bar(indicatif::ProgressBar::new_spinner());
        if !progress {
            bar.0
                .set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        let run = match Run::open(store.clone(), request, &bar).await {
            Ok(run) => run,
            Err(e) => {
                // Refused (a resume's flags, a host the run does not take): nothing is left
                // beside the file, its log folded in.
                store.close().await;
                return Err(e.into());
            }
        };
        crate::set_run_log(&run.log_path());
        let stop = Stop::default();
        on_ctrl_c(stop.clone(), resume_command(run.name(), &db));
        bar.0.enable_steady_tick(Duration::from_millis(250));
        let report = run.work(HostOptions { budget, stop }, &bar).await?;
        bar.0.finish_and_clear();
        let printed = if json {
            crate::output::print_json(&report)
        } else {
            print_summary(&report, &db)
        };
        // Stopped by Ctrl-C or SIGTERM: saved and resumable, but not done (a script or a
        // batch scheduler must not take it for a finished search, even with its stdout
        // closed early).
        let code = if report.interrupted {
            ExitCode::from(INTERRUPTED)
        } else {
            ExitCode::SUCCESS
        };
        crate::output::exit_code(printed, code)
    })
}

fn print_summary(r: &WorkReport, db: &str) -> Result<()> {
    outln!("run {}: {}", r.run, r.reason)?;
    outln!(
        "  {} evaluations here in {:.1} min ({:.0}/hour){}",
        r.evaluated,
        r.wall_s / 60.0,
        r.evaluated as f64 / (r.wall_s / 3600.0).max(1e-9),
        if r.gpus == 0 {
            String::new()
        } else {
            format!(
                ", GPU busy {:.0}%",
                100.0 * r.gpu_ms / (r.wall_s * 1e3 * r.gpus as f64)
            )
        }
    )?;
    if !r.gpu_busy.is_empty() {
        outln!(
            "  per GPU busy: {}",
            r.gpu_busy
                .iter()
                .map(|(g, f)| format!("gpu{g} {:.0}%", 100.0 * f))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
    }
    outln!(
        "  database: {:.2} ms per evaluation ({:.1} s in all; {} generation(s) advanced here{})",
        r.db_ms / (r.evaluated.max(1) as f64),
        r.db_ms / 1e3,
        r.advanced,
        if r.lost_leases > 0 {
            format!(", {} result(s) refused: lease lost", r.lost_leases)
        } else {
            String::new()
        }
    )?;
    outln!(
        "  statuses: {}",
        r.statuses
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    if let Some((fitness, genome, hash)) = &r.best {
        let against = match r.baseline.as_deref() {
            Some(s) if s.starts_with("torch:") => "PyTorch SDPA's speed",
            Some(s) if s.starts_with("genome:") => "the baseline genome's speed",
            _ => "the baseline's speed",
        };
        outln!("  best: {fitness:.4}x {against} (geometric mean over shapes), {genome} [{hash}]")?;
        if let Some(source) = &r.baseline {
            outln!("  baseline: {source}")?;
        }
    }
    if r.interrupted {
        outln!("  resume with: {}", resume_command(&r.run, db))?;
    }
    Ok(())
}

/// The command that continues run `run` of `db` (its password left out).
fn resume_command(run: &str, db: &str) -> String {
    format!(
        "evo search --resume {run} --db {}",
        evo_store::redact_url(db)
    )
}

/// `evo baseline import FILE --run RUN`: the run's new baseline, every timed candidate
/// rescored (see [`evo_run::baseline::rescore`]).
pub fn import_baseline(file: &Path, run: &str, db: &str) -> Result<ExitCode> {
    crate::setup::runtime()?.block_on(async {
        let store = Store::open(db)
            .await
            .context("opening the population database")?;
        let r = evo_run::baseline::rescore(&store, run, file, db).await?;
        for (key, t) in &r.times {
            outln!("baseline {t:10.2} us  {key}")?;
        }
        outln!(
            "run {}: baseline from {}; {} candidates rescored ({} regressed){}",
            r.run,
            r.source,
            r.rescored,
            r.regressed,
            r.best
                .map_or(String::new(), |b| format!("; best fitness {b:.4}"))
        )?;
        Ok(ExitCode::SUCCESS)
    })
}
