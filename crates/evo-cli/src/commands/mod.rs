//! One module per command.

pub mod check;
mod compile;
mod doctor;
mod eval;
mod export;
pub mod inspect;
mod landscape;
mod profile;
mod render;
mod report;
mod search;
mod selftest;
mod space;
mod verify;

use std::process::ExitCode;

use evo_run::{Budget, RunRequest, RunTarget};

use crate::cli::{Cli, Command};

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let templates = cli.templates.as_deref();
    match &cli.command {
        Command::Doctor { compile_only } => doctor::run(templates, *compile_only, cli.json),
        Command::Space {
            target,
            samples,
            seed,
            list,
        } => space::run(templates, target, *samples, *seed, *list, cli.json),
        Command::Render {
            target,
            pick,
            spec,
            force,
        } => render::run(templates, target, pick, spec.as_deref(), *force),
        Command::Compile {
            target,
            pick,
            all,
            cover,
            pairwise,
            out,
            threads,
            no_cache,
            sass,
        } => compile::run(
            templates,
            compile::Options {
                target,
                pick,
                all: *all,
                cover: *cover,
                pairwise: *pairwise,
                out: out.as_deref(),
                threads: *threads,
                no_cache: *no_cache,
                sass: *sass,
                json: cli.json,
            },
        ),
        Command::Check(args) => check::run(args, cli.json),
        Command::Search {
            config,
            run,
            resume,
            db,
            budget,
            lease,
            allow_mixed_gpus,
            patience,
            seed,
            strategy,
            evaluator,
            gpus,
            no_progress,
        } => {
            let target = match (resume, config) {
                (Some(name), config) => RunTarget::Resume {
                    name: name.clone(),
                    config: config.clone(),
                },
                (None, Some(config)) => RunTarget::New {
                    config: config.clone(),
                    name: run.clone(),
                },
                (None, None) => crate::usage!("give a config with -c (or --resume RUN)"),
            };
            let request = RunRequest {
                target,
                db: db.clone(),
                lease: *lease,
                allow_mixed_gpus: *allow_mixed_gpus,
                max_generations: budget.and_then(Budget::generations),
                patience: *patience,
                seed: *seed,
                strategy: strategy.clone(),
                evaluator: evaluator.clone(),
                gpus: gpus.gpus.clone(),
                templates: cli.templates.clone(),
            };
            search::run(request, *budget, !no_progress, cli.json)
        }
        Command::Join {
            run,
            db,
            budget,
            evaluator,
            gpus,
            no_progress,
        } => {
            let request = RunRequest {
                target: RunTarget::Join { name: run.clone() },
                db: db.clone(),
                lease: None,
                allow_mixed_gpus: false,
                max_generations: budget.and_then(Budget::generations),
                patience: None,
                seed: None,
                strategy: None,
                evaluator: evaluator.clone(),
                gpus: gpus.gpus.clone(),
                templates: cli.templates.clone(),
            };
            search::run(request, *budget, !no_progress, cli.json)
        }
        Command::Runs { db } => inspect::runs(&db.db, cli.json),
        Command::Elites { run, top, wide, db } => {
            inspect::elites(&db.db, run.as_deref(), *top, *wide, cli.json)
        }
        Command::Show {
            id,
            source,
            ptx,
            sass,
            log,
            spec,
            run,
            db,
        } => inspect::show(inspect::ShowOptions {
            db: &db.db,
            id,
            run: run.as_deref(),
            what: match (source, ptx, sass, log) {
                (true, _, _, _) => inspect::ShowWhat::Source,
                (_, true, _, _) => inspect::ShowWhat::Ptx,
                (_, _, true, _) => inspect::ShowWhat::Sass,
                (_, _, _, true) => inspect::ShowWhat::Log,
                _ => inspect::ShowWhat::Summary,
            },
            spec: spec.as_deref(),
            templates,
            json: cli.json,
        }),
        Command::Lineage { id, run, db } => inspect::lineage(&db.db, id, run.as_deref(), cli.json),
        Command::Diff {
            a,
            b,
            spec,
            run,
            db,
        } => inspect::diff(inspect::DiffOptions {
            db: &db.db,
            a,
            b,
            run: run.as_deref(),
            spec: spec.as_deref(),
            templates,
            json: cli.json,
        }),
        Command::Stats { run, db } => inspect::stats(&db.db, run.as_deref(), cli.json),
        Command::Report { run, out, top, db } => {
            report::run(&db.db, run.as_deref(), out, *top, cli.json)
        }
        Command::ExportLandscape { run, out, db } => landscape::export(run, out, db),
        Command::SearchQuality {
            target,
            landscape: file,
            synthetic,
            seeds,
            within,
            population,
            reverse,
        } => landscape::quality(
            templates,
            target,
            &landscape::QualityOptions {
                file: file.clone(),
                synthetic: *synthetic,
                seeds: *seeds,
                within: *within,
                population: *population,
                reverse: *reverse,
            },
            cli.json,
        ),
        Command::Baseline {
            action: crate::cli::BaselineAction::Import { file, run, db },
        } => search::import_baseline(file, run, db),
        Command::Eval {
            target,
            genome,
            random,
            cover,
            pairwise,
            seed,
            no_timing,
            gpus,
        } => eval::run(
            templates,
            eval::Options {
                target,
                genomes: genome,
                random: *random,
                cover: *cover,
                pairwise: *pairwise,
                seed: *seed,
                no_timing: *no_timing,
                gpus: &gpus.gpus,
                json: cli.json,
            },
        ),
        Command::Export {
            what,
            out,
            per_shape,
            force,
            unsanitized,
            unchecked_build,
            min_speedup,
            keep_slower,
            db,
        } => export::run(
            evo_artifact::ExportOptions {
                what,
                out,
                db,
                per_shape: *per_shape,
                force: *force,
                unsanitized: *unsanitized,
                unchecked_build: *unchecked_build,
                min_speedup: if *keep_slower {
                    0.0
                } else {
                    min_speedup.unwrap_or(evo_artifact::manifest::DEFAULT_MIN_SPEEDUP)
                },
                templates,
            },
            cli.json,
        ),
        Command::Verify { dir } => verify::run(dir, templates, cli.json),
        Command::Selftest { gpu } => selftest::run(*gpu, cli.json),
        Command::Profile {
            file,
            problem,
            config,
            genome,
            shape,
            launch,
            tools,
            gpu,
        } => profile::run(
            templates,
            profile::Options {
                file: file.as_deref(),
                problem: problem.as_deref(),
                config: config.as_deref(),
                genome: genome.as_deref(),
                shape: shape.as_deref(),
                launch: launch.as_deref(),
                tools,
                gpu: *gpu,
                json: cli.json,
            },
        ),
        Command::RunOnce {
            problem,
            source,
            shape,
            launch,
            plan,
            gpu,
        } => profile::run_once(
            problem,
            source,
            shape,
            launch.as_deref(),
            plan.as_deref(),
            *gpu,
        ),
        Command::Worker { gpu } => {
            let stdin = std::io::stdin().lock();
            let stdout = std::io::stdout().lock();
            evo_eval::worker::serve(*gpu as i32, stdin, stdout)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
