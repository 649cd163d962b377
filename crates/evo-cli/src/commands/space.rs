//! `evo space`: how big a config's space is and what its constraints reject.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use evo_core::space::EXACT_STATS_LIMIT;
use evo_core::Genome;
use rand::SeedableRng;
use serde::Serialize;

use crate::cli::TargetArgs;
use crate::output::{outln, print_json, table};
use crate::setup;

#[derive(Serialize)]
struct SpaceReport<'a> {
    family: &'a str,
    problem: &'a str,
    family_file: String,
    target: &'a evo_run::TargetChoice,
    specializations: Vec<String>,
    knobs: &'a [evo_core::Knob],
    derived: Vec<(&'a str, &'a str)>,
    constraints: Vec<(&'a str, &'a str)>,
    stats: evo_core::SpaceStats,
    estimated_valid: u128,
    samples: Vec<(String, String)>,
}

pub fn run(
    templates: Option<&Path>,
    target: &TargetArgs,
    samples: usize,
    seed: u64,
    list: bool,
    json: bool,
) -> Result<ExitCode> {
    let loaded = setup::load(templates, target)?;
    let space = &loaded.space;
    if list {
        // A closed pipe (`| head`) ends the listing: see crate::output.
        for g in space.iter_valid() {
            outln!("{}", g.canonical())?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let stats = space.stats(EXACT_STATS_LIMIT, 200_000, &mut rng);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let picked = evo_search::random_batch(space, samples, &Default::default(), &mut rng);
    let report = SpaceReport {
        family: &loaded.family.name,
        problem: loaded.family.problem.name(),
        family_file: loaded.family.path.display().to_string(),
        target: &loaded.target,
        specializations: loaded
            .specs
            .specs
            .iter()
            .map(|s| Genome::from_vars(s.clone()).canonical())
            .collect(),
        knobs: space.knobs(),
        derived: space
            .derived()
            .iter()
            .map(|(n, e)| (n.as_str(), e.source()))
            .collect(),
        constraints: space
            .constraints()
            .iter()
            .map(|(n, e)| (n.as_str(), e.source()))
            .collect(),
        estimated_valid: stats.estimated_valid(),
        stats,
        samples: picked.iter().map(|g| (g.canonical(), g.hash().0)).collect(),
    };
    if json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "family      {} (problem {}), {}",
        report.family,
        report.problem,
        report.family_file
    )?;
    outln!(
        "target      {} ({})",
        loaded.target.target.arch,
        loaded.target.reason
    )?;
    outln!("specialized {}", report.specializations.join("; "))?;
    let mut t = table(&["knob", "values"]);
    for k in space.knobs() {
        t.add_row(vec![
            k.name.clone(),
            k.values
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(" "),
        ]);
    }
    outln!("{t}")?;
    let s = &report.stats;
    outln!("raw combinations  {}", s.raw_size)?;
    if s.exact {
        outln!("valid genomes     {} (counted exactly)", s.valid)?;
    } else {
        outln!(
            "valid genomes     ~{} (estimated from {} random draws, {} valid)",
            report.estimated_valid,
            s.examined,
            s.valid
        )?;
    }
    if s.eval_errors > 0 {
        outln!(
            "evaluation errors {} (a constraint or derived value could not be computed)",
            s.eval_errors
        )?;
    }
    let mut t = table(&["constraint", "expression", "rejects"]);
    for ((name, expr), (_, n)) in report.constraints.iter().zip(&s.rejected_by) {
        t.add_row(vec![name.to_string(), expr.to_string(), n.to_string()]);
    }
    outln!("{t}")?;
    if !report.samples.is_empty() {
        outln!("sample genomes (seed {seed}):")?;
        for (g, h) in &report.samples {
            outln!("  {h}  {g}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
