//! Turning a config path and flags into what every command works on: the family, the
//! target, the specializations and the space.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use evo_core::config::SearchConfig;
use evo_core::target::DEFAULT_ARCH;
use evo_core::{Genome, Space, Target};
use evo_kernels::{Family, Specializations};
use serde::Serialize;

use crate::cli::{GenomeArgs, TargetArgs};

/// How the target architecture was chosen, for the user.
#[derive(Clone, Debug, Serialize)]
pub struct TargetChoice {
    pub target: Target,
    pub reason: String,
}

/// Resolves `auto` (or nothing) to the first GPU's architecture, else the default.
pub fn choose_target(requested: &str) -> Result<TargetChoice> {
    if requested != "auto" {
        let target = Target::from_arch(requested)?;
        return Ok(TargetChoice {
            target,
            reason: "as requested".into(),
        });
    }
    match evo_gpu::device::probe() {
        Ok(info) if !info.devices.is_empty() => {
            let d = &info.devices[0];
            let arch = Target::arch_for_capability(d.compute_capability.0, d.compute_capability.1);
            let mut target = Target::from_arch(&arch).with_context(|| {
                format!("GPU 0 ({}) has an architecture evo does not know", d.name)
            })?;
            target.max_smem_per_block = d.max_smem_per_block_optin;
            Ok(TargetChoice {
                target,
                reason: format!("the architecture of GPU 0, {}", d.name),
            })
        }
        Ok(_) => Ok(TargetChoice {
            target: Target::from_arch(DEFAULT_ARCH)?,
            reason: "default: the driver sees no GPU".into(),
        }),
        Err(e) => {
            tracing::info!("no GPU for choosing the target: {e}");
            Ok(TargetChoice {
                target: Target::from_arch(DEFAULT_ARCH)?,
                reason: "default: no GPU found".into(),
            })
        }
    }
}

/// Finds the templates folder (see `--templates`).
pub fn templates_root(flag: Option<&Path>, config: &SearchConfig) -> Result<PathBuf> {
    let mut tried = Vec::new();
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(f) = flag {
        candidates.push(f.to_path_buf());
    } else if let Some(t) = &config.templates {
        candidates.push(t.clone());
    } else {
        if let Some(dir) = config.path.parent() {
            candidates.push(dir.join("../templates"));
        }
        candidates.push(PathBuf::from("templates"));
    }
    for c in candidates {
        if c.join(&config.problem).is_dir() {
            return Ok(c);
        }
        tried.push(c.display().to_string());
    }
    bail!(
        "no templates folder with a `{}/` subfolder found (tried {}); pass --templates DIR or set `templates` in the config",
        config.problem,
        tried.join(", ")
    )
}

/// Everything loaded from one config.
pub struct Loaded {
    pub config: SearchConfig,
    pub family: Family,
    pub target: TargetChoice,
    pub specs: Specializations,
    pub space: Space,
}

pub fn load(templates_flag: Option<&Path>, args: &TargetArgs) -> Result<Loaded> {
    let config = SearchConfig::load(&args.config)?;
    let root = templates_root(templates_flag, &config)?;
    let family = Family::load(&root, &config.problem, &config.family)?;
    let requested = args
        .arch
        .clone()
        .unwrap_or_else(|| config.compile.arch.clone());
    let target = choose_target(&requested)?;
    let specs = Specializations::new(family.problem, target.target.clone(), &config.shapes)
        .map_err(|e| anyhow!("config {}: {e}", config.path.display()))?;
    specs.check_family(&family).map_err(|e| anyhow!(e))?;
    let space = family.space(specs.contexts())?;
    Ok(Loaded {
        config,
        family,
        target,
        specs,
        space,
    })
}

impl Loaded {
    /// Index of the specialization matching `K=V,...` (all given keys must match).
    pub fn spec_index(&self, wanted: Option<&str>) -> Result<usize> {
        let Some(wanted) = wanted else { return Ok(0) };
        let want = Genome::parse(wanted).context("--spec")?;
        self.specs
            .specs
            .iter()
            .position(|s| want.iter().all(|(k, v)| s.get(k) == Some(v)))
            .ok_or_else(|| {
                let have: Vec<String> = self
                    .specs
                    .specs
                    .iter()
                    .map(|s| Genome::from_vars(s.clone()).canonical())
                    .collect();
                anyhow!("no specialization of the config matches {wanted}; it has {have:?}")
            })
    }

    /// A covering sample of the space (`--cover`: every knob value; `--pairwise`: every pair
    /// of values the constraints allow), with a note on stderr about what it cannot cover.
    pub fn covering_genomes(&self, pairwise: bool) -> Vec<Genome> {
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
    /// or `--random N` valid ones.
    pub fn pick_genomes(&self, pick: &GenomeArgs, allow_invalid: bool) -> Result<Vec<Genome>> {
        match (&pick.genome, pick.random) {
            (Some(text), None) => {
                let g = Genome::parse(text).context("--genome")?;
                self.space.check_genome(&g).context("--genome")?;
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
                    if !allow_invalid {
                        bail!("genome {} {why} (--force renders it anyway)", g.canonical());
                    }
                    tracing::warn!("genome {} {why}", g.canonical());
                }
                Ok(vec![g])
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
            (Some(_), Some(_)) => bail!("give either --genome or --random, not both"),
            (None, None) => bail!("give a genome with --genome NAME=value,... (or --random N)"),
        }
    }
}

/// The GPUs named by `--gpus` (e.g. `0,1`), checked against what the driver sees. No
/// GPU at all is a [`crate::MissingComponent`] (exit code 3).
pub fn gpus(list: &str) -> Result<(Vec<u32>, evo_gpu::device::DriverInfo)> {
    let info = evo_gpu::device::probe().map_err(|e| {
        crate::MissingComponent(format!("this command runs kernels and needs a GPU: {e}"))
    })?;
    if info.devices.is_empty() {
        return Err(crate::MissingComponent(
            "this command runs kernels and needs a GPU: the driver sees none".into(),
        )
        .into());
    }
    let mut out = Vec::new();
    let all: String;
    let list = if list.trim() == "all" {
        all = (0..info.devices.len())
            .map(|g| g.to_string())
            .collect::<Vec<_>>()
            .join(",");
        all.as_str()
    } else {
        list
    };
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let g: u32 = part
            .parse()
            .with_context(|| format!("--gpus: `{part}` is not a GPU number"))?;
        if g as usize >= info.devices.len() {
            bail!(
                "--gpus: GPU {g} does not exist (the driver sees {} GPU(s))",
                info.devices.len()
            );
        }
        if !out.contains(&g) {
            out.push(g);
        }
    }
    if out.is_empty() {
        bail!("--gpus names no GPU");
    }
    let first = &info.devices[out[0] as usize];
    for g in &out[1..] {
        let d = &info.devices[*g as usize];
        if d.name != first.name {
            bail!(
                "--gpus mixes {} and {}: their timings would not compare",
                first.name,
                d.name
            );
        }
    }
    Ok((out, info))
}

/// A tokio runtime for the commands that drive workers.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
