//! One module per command.

mod check;
mod compile;
mod doctor;
mod render;
mod selftest;
mod space;

use std::process::ExitCode;

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
                out: out.as_deref(),
                threads: *threads,
                no_cache: *no_cache,
                sass: *sass,
                json: cli.json,
            },
        ),
        Command::Check(args) => check::run(args, cli.json),
        Command::Selftest { gpu } => selftest::run(*gpu, cli.json),
        Command::Worker { gpu } => {
            let stdin = std::io::stdin().lock();
            let stdout = std::io::stdout().lock();
            evo_eval::worker::serve(*gpu as i32, stdin, stdout)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
