//! Flags to what the commands work on: a config's context (evo-run's one loader), the
//! genomes `--genome`/`--random`/`--cover`/`--pairwise` pick, the GPUs of `--gpus`, and
//! the tokio runtime.

use std::path::Path;

use anyhow::{bail, Context as _, Result};
use evo_core::Genome;
use evo_run::Context;

use crate::cli::{GenomeArgs, TargetArgs};

/// A config file's context for `--arch` (default: the config's `[compile] arch`).
pub fn load(templates_flag: Option<&Path>, args: &TargetArgs) -> Result<Context> {
    Ok(Context::from_file(
        &args.config,
        templates_flag,
        args.arch.as_deref(),
    )?)
}

/// Genome choices of the flag-driven commands (`--genome`, `--random`, `--cover`,
/// `--pairwise`) over a loaded context.
pub trait Picking {
    fn covering_genomes(&self, pairwise: bool) -> Vec<Genome>;
    fn pick_genomes(&self, pick: &GenomeArgs, force: Option<bool>) -> Result<Vec<Genome>>;
}

impl Picking for Context {
    /// A covering sample of the space (`--cover`: every knob value; `--pairwise`: every pair
    /// of values the constraints allow), with a note on stderr about what it cannot cover.
    fn covering_genomes(&self, pairwise: bool) -> Vec<Genome> {
        if pairwise {
            let (set, excluded) = self.space.pairwise_set();
            eprintln!(
                "{} genomes combine every pair of knob values the constraints allow ({excluded} pairs they exclude)",
                set.len()
            );
            set
        } else {
            let (cover, unused) = self.space.covering_set();
            if !unused.is_empty() {
                eprintln!("note: no valid genome uses {unused:?}");
            }
            cover
        }
    }

    /// The genomes a command was asked for: `--genome` (checked against the space),
    /// or `--random N` valid ones (clap refuses both at once). `force`: the command's
    /// `--force` (a genome that breaks a constraint is then only warned about), `None` for a
    /// command without one.
    fn pick_genomes(&self, pick: &GenomeArgs, force: Option<bool>) -> Result<Vec<Genome>> {
        match (&pick.genome, pick.random) {
            (Some(text), _) => {
                let g = evo_run::parse_flag_list("--genome", text)?;
                let g = self.space.complete(&g).context("--genome")?;
                if let Some(r) = self.space.rejection(&g) {
                    let spec = Genome::from_vars(self.specs.specs[r.context].clone()).canonical();
                    let why = match r.error {
                        Some(e) => format!("cannot evaluate constraint `{}`: {e}", r.constraint),
                        None => format!(
                            "violates constraint `{}` ({}) for specialization {spec}",
                            r.constraint,
                            self.space
                                .constraints()
                                .iter()
                                .find(|(n, _)| *n == r.constraint)
                                .map(|(_, e)| e.source())
                                .unwrap_or("")
                        ),
                    };
                    match force {
                        None => bail!("genome {} {why}", g.canonical()),
                        Some(false) => {
                            bail!("genome {} {why} (--force renders it anyway)", g.canonical())
                        }
                        Some(true) => {}
                    }
                    tracing::warn!("genome {} {why}", g.canonical());
                }
                Ok(vec![g])
            }
            (None, Some(0)) => {
                crate::usage!("--random 0 asks for no genome: give a count of 1 or more")
            }
            (None, Some(n)) => {
                use rand::SeedableRng;
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(pick.seed);
                let out = evo_search::random_batch(&self.space, n, &Default::default(), &mut rng);
                if out.is_empty() {
                    bail!("the space has no valid genome");
                }
                Ok(out)
            }
            (None, None) => {
                crate::usage!("give a genome with --genome NAME=value,... (or --random N)")
            }
        }
    }
}

/// The GPUs named by `--gpus` (see [`evo_run::select_gpus`]).
pub fn gpus(list: &str) -> Result<(Vec<u32>, evo_gpu::device::DriverInfo)> {
    Ok(evo_run::select_gpus(list)?)
}

/// A tokio runtime for the commands that drive workers.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
