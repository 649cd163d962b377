//! `evo export-landscape`: a run's measurements as a landscape file for the replay
//! evaluator.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{anyhow, Context, Result};
use evo_core::{ShapeMeasurement, Status};
use evo_eval::landscape::{Landscape, Point, FORMAT};
use evo_store::Store;

pub fn export(run: &str, out: &Path, db: &str) -> Result<ExitCode> {
    let rt = crate::setup::runtime()?;
    rt.block_on(async {
        let store = Store::open(db)
            .await
            .with_context(|| format!("opening {db}"))?;
        let r = store
            .run(run)
            .await?
            .ok_or_else(|| anyhow!("no run `{run}` in {db}"))?;
        let mut landscape = Landscape {
            format: FORMAT.into(),
            problem: r.problem.clone(),
            family: r.family.clone(),
            device: r.device.clone().unwrap_or_default(),
            source: format!("run {} ({})", r.name, r.evaluator),
            points: Default::default(),
        };
        for c in store.candidates(r.id).await? {
            let Some(status) = c.status else {
                continue;
            };
            // The records as stored, without the timing samples (they would make the
            // file many times larger and the replay does not read them).
            let shapes = store
                .measurements(c.id)
                .await?
                .into_iter()
                .map(|m| ShapeMeasurement {
                    samples: Vec::new(),
                    ..m.measured
                })
                .collect();
            // A regressed genome was evaluated; whether it regresses depends on the
            // baseline of the run that replays it.
            let status = if status == Status::Regressed {
                Status::Evaluated
            } else {
                status
            };
            landscape.points.insert(
                c.genome.clone(),
                Point {
                    status,
                    gate: c.gate,
                    detail: c.detail.clone().unwrap_or_default(),
                    shapes,
                    eval_ms: c.eval_ms,
                },
            );
        }
        landscape
            .save(out)
            .with_context(|| format!("writing {}", out.display()))?;
        println!(
            "{} genomes of run {} written to {}",
            landscape.points.len(),
            r.name,
            out.display()
        );
        Ok(ExitCode::SUCCESS)
    })
}

/// `evo search-quality`: how many evaluations each strategy needs, on a recorded
/// landscape, to get within `within` of the landscape's optimum; `seeds` runs each.
///
/// A genome's fitness is its speed as the geometric mean over the recorded shapes
/// (1 / geomean of median µs): the ratio to the optimum does not depend on a baseline.
/// Genomes of the space that are not in the file, or failed, count as failed; the
/// coverage is printed, so a partial landscape is never taken for an exhaustive one.
pub fn quality(
    templates: Option<&Path>,
    target: &crate::cli::TargetArgs,
    file: &Path,
    seeds: u64,
    within: f64,
    json: bool,
) -> Result<ExitCode> {
    use evo_search::landscape::{evaluations_to_reach, quantile, simulate_until};
    use evo_search::StrategyKind;

    let loaded = crate::setup::load(templates, target)?;
    let recorded = Landscape::load(file)?;
    if recorded.family != loaded.config.family {
        return Err(anyhow!(
            "{} records family `{}`, the config searches `{}`",
            file.display(),
            recorded.family,
            loaded.config.family
        ));
    }
    let timed_shapes = loaded.config.shapes.len();
    let mut landscape = evo_search::landscape::Landscape::new();
    let (mut valid, mut recorded_valid, mut correct) = (0usize, 0usize, 0usize);
    for genome in loaded.space.iter_valid() {
        valid += 1;
        let point = recorded.get(&genome.canonical());
        recorded_valid += point.is_some() as usize;
        let fitness = point
            .filter(|p| p.status == Status::Evaluated)
            .and_then(|p| {
                let times: Vec<f64> = p.shapes.iter().filter_map(|s| s.median_us).collect();
                // Every shape of the config timed (edge shapes are checked, not timed).
                (times.len() == timed_shapes).then(|| {
                    let log_mean = times.iter().map(|t| t.ln()).sum::<f64>() / times.len() as f64;
                    (-log_mean).exp()
                })
            });
        correct += fitness.is_some() as usize;
        landscape.insert(&genome, fitness);
    }
    let optimum = landscape
        .optimum()
        .ok_or_else(|| anyhow!("{} has no evaluated genome of this space", file.display()))?;
    let target_fitness = optimum * (1.0 - within);
    let near = loaded
        .space
        .iter_valid()
        .filter(|g| {
            landscape
                .outcome(g)
                .fitness()
                .is_some_and(|f| f >= target_fitness)
        })
        .count();
    let mut rows = Vec::new();
    for kind in [StrategyKind::Evolution, StrategyKind::Random] {
        let mut needed: Vec<usize> = Vec::new();
        for seed in 0..seeds {
            let strategy = evo_search::build(
                kind,
                evo_search::SearchParams {
                    seed,
                    ..loaded.config.search.params.clone()
                },
            );
            let trace = simulate_until(
                strategy.as_ref(),
                &loaded.space,
                &landscape,
                valid,
                target_fitness,
            );
            if let Some(n) = evaluations_to_reach(&trace, target_fitness) {
                needed.push(n);
            }
        }
        needed.sort_unstable();
        rows.push((kind.name().to_string(), needed));
    }
    if json {
        let strategies: Vec<_> = rows
            .iter()
            .map(|(name, needed)| {
                serde_json::json!({
                    "strategy": name,
                    "evaluations_needed": needed,
                    "reached": needed.len(),
                    "median": quantile(needed, 0.5),
                })
            })
            .collect();
        crate::output::print_json(&serde_json::json!({
            "landscape": file.display().to_string(),
            "device": recorded.device,
            "valid_genomes": valid,
            "recorded": recorded_valid,
            "correct": correct,
            "within": within,
            "genomes_within": near,
            "seeds": seeds,
            "strategies": strategies,
        }))?;
    } else {
        println!(
            "landscape {} ({}, {}): {recorded_valid} of {valid} valid genomes recorded, {correct} correct; \
             {near} within {:.0}% of the optimum",
            file.display(),
            recorded.device,
            recorded.source,
            within * 100.0
        );
        if recorded_valid < valid {
            println!(
                "warning: the landscape is not exhaustive over this space; the optimum is the best recorded"
            );
        }
        println!(
            "evaluations to get within {:.0}% of the optimum, {seeds} seeds each (budget {valid}):",
            within * 100.0
        );
        println!(
            "{:<10} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8}",
            "strategy", "min", "p25", "median", "p75", "max", "reached"
        );
        for (name, needed) in &rows {
            let q = |p| quantile(needed, p).map_or("-".into(), |v| format!("{v:.1}"));
            println!(
                "{name:<10} {:>7} {:>7} {:>7} {:>7} {:>7} {:>5}/{seeds}",
                q(0.0),
                q(0.25),
                q(0.5),
                q(0.75),
                q(1.0),
                needed.len()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
