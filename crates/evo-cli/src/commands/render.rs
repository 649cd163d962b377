//! `evo render`: print the CUDA source of one genome.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{GenomeArgs, TargetArgs};
use crate::output::out;
use crate::setup::{self, Picking};

pub fn run(
    templates: Option<&Path>,
    target: &TargetArgs,
    pick: &GenomeArgs,
    spec: Option<&str>,
    force: bool,
) -> Result<ExitCode> {
    let loaded = setup::load(templates, target)?;
    let spec = loaded.spec_index(spec)?;
    for genome in loaded.pick_genomes(pick, Some(force))? {
        out!("{}", loaded.family.render(&loaded.space, &genome, spec)?)?;
    }
    Ok(ExitCode::SUCCESS)
}
