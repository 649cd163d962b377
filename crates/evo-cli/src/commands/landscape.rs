//! `evo export-landscape`: a run's measurements as a landscape file for the replay
//! evaluator.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use evo_core::{ShapeMeasurement, Status};
use evo_eval::landscape::{Landscape, Point, FORMAT};
use evo_search::StrategyKind;

use crate::output::outln;

pub fn export(run: &str, out: &Path, db: &str) -> Result<ExitCode> {
    crate::output::check_out_file(out)?;
    let rt = crate::setup::runtime()?;
    rt.block_on(async {
        let store = evo_run::inspect::open_existing(db).await?;
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
            // Pending genomes, and those a replay had no record of, were never measured.
            let Some(status) = c.status.filter(|s| *s != Status::NotRecorded) else {
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
        outln!(
            "{} genomes of run {} written to {}",
            landscape.points.len(),
            r.name,
            out.display()
        )?;
        Ok(ExitCode::SUCCESS)
    })
}

/// What `evo search-quality` measures.
pub struct QualityOptions {
    /// A recorded landscape, or `None` for `synthetic` random ones.
    pub file: Option<PathBuf>,
    pub synthetic: Option<u64>,
    pub seeds: u64,
    pub within: f64,
    /// Genomes per generation; `None`: the config's.
    pub population: Option<usize>,
    /// Reverse every knob's value list.
    pub reverse: bool,
}

/// The strategies compared, in the order printed.
const COMPARED: [StrategyKind; 3] = [
    StrategyKind::Surrogate,
    StrategyKind::Evolution,
    StrategyKind::Random,
];

/// One strategy's results over every landscape and seed.
struct Row {
    name: &'static str,
    /// Evaluations each reaching run needed, sorted.
    needed: Vec<usize>,
    runs: u64,
    /// Wall time of the simulated runs per generation, in ms (proposing dominates it).
    ms_per_generation: f64,
}

/// `evo search-quality`: how many evaluations each strategy needs, on a recorded
/// landscape (or random synthetic ones over the config's space), to get within `within`
/// of the landscape's optimum; `seeds` runs each.
///
/// A recorded genome's fitness is its speed as the geometric mean over the recorded
/// shapes (1 / geomean of median µs): the ratio to the optimum does not depend on a
/// baseline. Genomes of the space that are not in the file, or failed, count as failed;
/// the coverage is printed, so a partial landscape is never taken for an exhaustive one.
pub fn quality(
    templates: Option<&Path>,
    target: &crate::cli::TargetArgs,
    o: &QualityOptions,
    json: bool,
) -> Result<ExitCode> {
    use evo_search::landscape::{evaluations_to_reach, quantile, random_landscape, simulate_until};

    let loaded = crate::setup::load(templates, target)?;
    let space = if o.reverse {
        loaded.space.with_reversed_values()
    } else {
        loaded.space.clone()
    };
    let valid = space.valid_indices().len();
    let mut header = serde_json::Map::new();
    let (landscapes, description) = match (&o.file, o.synthetic) {
        (Some(file), _) => {
            let (landscape, coverage) = recorded_landscape(&loaded, &space, file)?;
            header = coverage;
            (vec![landscape], format!("landscape {}", file.display()))
        }
        (None, Some(n)) => (
            (0..n).map(|i| random_landscape(&space, i)).collect(),
            format!(
                "{n} synthetic landscapes over the space of {}",
                loaded.config.path.display()
            ),
        ),
        (None, None) => crate::usage!("give --landscape FILE or --synthetic N"),
    };
    let population = o
        .population
        .unwrap_or(loaded.config.search.params.population);
    if population == 0 {
        crate::usage!("--population must be at least 1");
    }
    let mut targets = Vec::new();
    let mut genomes_within = Vec::new();
    for (i, l) in landscapes.iter().enumerate() {
        let optimum = l
            .optimum()
            .ok_or_else(|| anyhow!("landscape {i} has no evaluated genome of this space"))?;
        let target = optimum * (1.0 - o.within);
        targets.push(target);
        genomes_within.push(
            space
                .iter_valid()
                .filter(|g| l.outcome(g).fitness().is_some_and(|f| f >= target))
                .count(),
        );
    }
    let mut rows = Vec::new();
    for kind in COMPARED {
        let mut needed: Vec<usize> = Vec::new();
        let (mut elapsed, mut generations) = (0.0, 0usize);
        for (landscape, &target) in landscapes.iter().zip(&targets) {
            for seed in 0..o.seeds {
                let params = evo_search::SearchParams {
                    seed,
                    population,
                    ..loaded.config.search.params.clone()
                };
                let strategy = evo_search::build(kind, params);
                let start = Instant::now();
                let trace = simulate_until(strategy.as_ref(), &space, landscape, valid, target);
                elapsed += start.elapsed().as_secs_f64() * 1e3;
                let reached = evaluations_to_reach(&trace, target);
                generations += reached.unwrap_or(valid).div_ceil(population);
                needed.extend(reached);
            }
        }
        needed.sort_unstable();
        rows.push(Row {
            name: kind.name(),
            needed,
            runs: o.seeds * landscapes.len() as u64,
            ms_per_generation: elapsed / generations.max(1) as f64,
        });
    }
    if json {
        let strategies: Vec<_> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "strategy": r.name,
                    "evaluations_needed": r.needed,
                    "reached": r.needed.len(),
                    "runs": r.runs,
                    "p25": quantile(&r.needed, 0.25),
                    "median": quantile(&r.needed, 0.5),
                    "p75": quantile(&r.needed, 0.75),
                    "ms_per_generation": r.ms_per_generation,
                })
            })
            .collect();
        header.insert("landscape".into(), description.into());
        header.insert("valid_genomes".into(), valid.into());
        header.insert("within".into(), o.within.into());
        header.insert("genomes_within".into(), genomes_within.into());
        header.insert("seeds".into(), o.seeds.into());
        header.insert("population".into(), population.into());
        header.insert("reversed".into(), o.reverse.into());
        header.insert("strategies".into(), strategies.into());
        crate::output::print_json(&serde_json::Value::Object(header))?;
        return Ok(ExitCode::SUCCESS);
    }
    match &o.file {
        Some(file) => {
            let count = |k: &str| header.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
            outln!(
                "landscape {} ({}, {}): {} of {valid} valid genomes recorded, {} correct; \
                 {} within {:.0}% of the optimum",
                file.display(),
                header.get("device").and_then(|v| v.as_str()).unwrap_or(""),
                header.get("source").and_then(|v| v.as_str()).unwrap_or(""),
                count("recorded"),
                count("correct"),
                genomes_within[0],
                o.within * 100.0
            )?;
            if count("recorded") < valid as u64 {
                outln!(
                    "warning: the landscape is not exhaustive over this space; the optimum is the best recorded"
                )?;
            }
        }
        None => outln!(
            "{description} ({valid} valid genomes); genomes within {:.0}% of each optimum: {genomes_within:?}",
            o.within * 100.0
        )?,
    }
    outln!(
        "evaluations to get within {:.0}% of the optimum, {} runs each (budget {valid}), population {population}{}:",
        o.within * 100.0,
        o.seeds * landscapes.len() as u64,
        if o.reverse { ", value lists reversed" } else { "" }
    )?;
    outln!(
        "{:<10} {:>7} {:>7} {:>7} {:>7} {:>7} {:>9} {:>9}",
        "strategy",
        "min",
        "p25",
        "median",
        "p75",
        "max",
        "reached",
        "ms/gen"
    )?;
    for r in &rows {
        let q = |p| quantile(&r.needed, p).map_or("-".into(), |v| format!("{v:.1}"));
        outln!(
            "{:<10} {:>7} {:>7} {:>7} {:>7} {:>7} {:>5}/{:<3} {:>9.1}",
            r.name,
            q(0.0),
            q(0.25),
            q(0.5),
            q(0.75),
            q(1.0),
            r.needed.len(),
            r.runs,
            r.ms_per_generation
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The recorded landscape over `space`, and its coverage for the report (device,
/// source, recorded and correct genomes).
fn recorded_landscape(
    loaded: &evo_run::Context,
    space: &evo_core::Space,
    file: &Path,
) -> Result<(
    evo_search::landscape::Landscape,
    serde_json::Map<String, serde_json::Value>,
)> {
    let recorded = Landscape::load(file)?;
    if recorded.family != loaded.config.family {
        bail!(
            "{} records family `{}`, the config searches `{}`",
            file.display(),
            recorded.family,
            loaded.config.family
        );
    }
    let timed_shapes = loaded.config.shapes.len();
    let mut landscape = evo_search::landscape::Landscape::new();
    let (mut recorded_valid, mut correct) = (0usize, 0usize);
    for genome in space.iter_valid() {
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
    let mut coverage = serde_json::Map::new();
    coverage.insert("device".into(), recorded.device.clone().into());
    coverage.insert("source".into(), recorded.source.clone().into());
    coverage.insert("recorded".into(), recorded_valid.into());
    coverage.insert("correct".into(), correct.into());
    Ok((landscape, coverage))
}
