//! One module per command.

mod compile;
mod doctor;
mod render;
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
    }
}
