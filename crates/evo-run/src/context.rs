//! A run's context: config → templates → family → target → specializations → space, the
//! one loader every command uses — from a config file (`evo space`, `render`, `compile`,
//! `eval`), from a stored run (`evo show`, `diff`, `export`, a resumed search), and for a
//! new search (with the GPU's own target).

use std::path::{Path, PathBuf};

use evo_core::config::SearchConfig;
use evo_core::target::DEFAULT_ARCH;
use evo_core::{Genome, Space, Target, Vars};
use evo_kernels::{Family, Specializations};
use evo_store::Run;
use serde::Serialize;

use crate::error::{refuse, refused, Result, ResultExt, UsageError};

/// The architecture kernels are compiled for, and how it was chosen (for the user).
#[derive(Clone, Debug, Serialize)]
pub struct TargetChoice {
    pub target: Target,
    pub reason: String,
}

/// Resolves `auto` to the first GPU's architecture (its shared-memory limit included),
/// else the default; any other text is an architecture.
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
            let mut target = Target::from_arch(&arch)
                .context(|| format!("GPU 0 ({}) has an architecture evo does not know", d.name))?;
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

/// `--arch`'s value: `auto` or an architecture evo knows; another is a [`UsageError`],
/// whatever the config and the machine.
pub fn check_arch_flag(arch: &str) -> Result<()> {
    if arch != "auto" {
        Target::from_arch(arch).map_err(|e| UsageError(format!("--arch: {e}")))?;
    }
    Ok(())
}

/// A `NAME=value,...` list typed as option `flag` (`--genome`, `--shape`, `--spec`): one
/// that is not of that form is a [`UsageError`] (what it names is checked by its user).
pub fn parse_flag_list(flag: &str, text: &str) -> Result<Genome> {
    Genome::parse(text).map_err(|e| UsageError(format!("{flag}: {e}")).into())
}

/// The templates folder: `flag` (`--templates`), else the config's `templates`, else
/// `../templates` next to the config, else `./templates`; the first holding a folder for
/// the config's problem.
pub fn templates_root(flag: Option<&Path>, config: &SearchConfig) -> Result<PathBuf> {
    if evo_kernels::problem(&config.problem).is_none() {
        let known: Vec<&str> = evo_kernels::problems().iter().map(|p| p.name()).collect();
        refuse!(
            "{}: unknown problem `{}`; evo knows {}",
            config.path.display(),
            config.problem,
            known.join(", ")
        );
    }
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
    refuse!(
        "no templates folder with a `{}/` subfolder found (tried {}); pass --templates DIR or set `templates` in the config",
        config.problem,
        tried.join(", ")
    )
}

/// Loads the config's family for `target` and records it in `config.family`: with several
/// (`family = [...]`), the first whose `min_arch` the target meets (a resumed run chooses
/// again on its stored architecture, so it keeps its family).
pub fn load_family(root: &Path, config: &mut SearchConfig, target: &Target) -> Result<Family> {
    let mut too_new = Vec::new();
    for name in &config.families {
        let family = Family::load(root, &config.problem, name)?;
        if config.families.len() == 1 || target.cc >= family.min_arch {
            config.family = family.name.clone();
            return Ok(family);
        }
        too_new.push(format!("{name} needs sm_{}", family.min_arch));
    }
    refuse!(
        "config {}: no family it names runs on {} ({})",
        config.path.display(),
        target.arch,
        too_new.join(", ")
    )
}

/// The config a run started with: its stored text, under the path it was read from
/// (relative paths in it, like an imported baseline, resolve against that path).
pub fn stored_config(run: &Run) -> Result<SearchConfig> {
    let path = run
        .state()?
        .and_then(|s| s.config_path)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("{}.toml", run.name)));
    SearchConfig::parse(&path, &run.config_toml)
        .context(|| format!("the config stored in run `{}`", run.name))
}

/// Everything loaded from one config for one target.
pub struct Context {
    pub config: SearchConfig,
    pub family: Family,
    pub target: TargetChoice,
    pub specs: Specializations,
    pub space: Space,
}

impl Context {
    /// Loads the config's family (see [`templates_root`]) and binds its space to the
    /// specializations of the config's shapes on `target`.
    pub fn load(
        config: SearchConfig,
        templates: Option<&Path>,
        target: TargetChoice,
    ) -> Result<Context> {
        let mut config = config;
        let root = templates_root(templates, &config)?;
        let family = load_family(&root, &mut config, &target.target)?;
        Context::bind(config, family, target)
    }

    /// [`Context::load`] with the family already loaded.
    pub fn bind(config: SearchConfig, family: Family, target: TargetChoice) -> Result<Context> {
        let specs = Specializations::new(family.problem, target.target.clone(), &config.shapes)
            .map_err(|e| refused!("config {}: {e}", config.path.display()))?;
        specs
            .check_family(&family)
            .map_err(crate::RunError::Refused)?;
        let space = family.space(specs.contexts())?;
        Ok(Context {
            config,
            family,
            target,
            specs,
            space,
        })
    }

    /// A config file for architecture `arch` (`auto`: the GPU's own, else the default;
    /// `None`: the config's `[compile] arch`).
    pub fn from_file(path: &Path, templates: Option<&Path>, arch: Option<&str>) -> Result<Context> {
        if let Some(flag) = arch {
            check_arch_flag(flag)?;
        }
        let config = SearchConfig::load(path)?;
        let target = choose_target(arch.unwrap_or(&config.compile.arch))?;
        Context::load(config, templates, target)
    }

    /// A stored run as its search loaded it: the stored config, the architecture the run
    /// recorded (else the default), so sources re-render deterministically and compile
    /// without a GPU.
    pub fn of_run(run: &Run, templates: Option<&Path>) -> Result<Context> {
        let config = stored_config(run)?;
        let arch = run
            .arch
            .clone()
            .filter(|a| a != "auto")
            .unwrap_or_else(|| DEFAULT_ARCH.to_string());
        let target = TargetChoice {
            target: Target::from_arch(&arch)?,
            reason: format!("the architecture run `{}` used", run.name),
        };
        Context::load(config, templates, target)
    }

    /// Index of the specialization matching `K=V,...` (all given keys must match); the
    /// first without one.
    pub fn spec_index(&self, wanted: Option<&str>) -> Result<usize> {
        let Some(wanted) = wanted else { return Ok(0) };
        let want = parse_flag_list("--spec", wanted)?;
        self.specs
            .specs
            .iter()
            .position(|s| want.iter().all(|(k, v)| s.get(k) == Some(v)))
            .ok_or_else(|| {
                refused!(
                    "no specialization of the config matches {wanted}; it has {:?}",
                    self.spec_names()
                )
            })
    }

    /// The canonical text of each specialization.
    pub fn spec_names(&self) -> Vec<String> {
        self.specs
            .specs
            .iter()
            .map(|s| Genome::from_vars(s.clone()).canonical())
            .collect()
    }

    /// The config's shapes, complete (specialization and run-time variables).
    pub fn configured_shapes(&self) -> Vec<Vars> {
        self.specs.shapes.iter().map(|(_, v)| v.clone()).collect()
    }

    /// The problem's edge shapes for the configured ones (checked, never timed), unless
    /// the config turns them off.
    pub fn edge_shapes(&self) -> Vec<Vars> {
        if self.config.correctness.edge_shapes {
            self.family.problem.edge_shapes(&self.configured_shapes())
        } else {
            Vec::new()
        }
    }

    /// A genome's source for one specialization: a pure function of the family, the
    /// genome and the specialization.
    pub fn render(&self, genome: &str, spec: usize) -> Result<String> {
        let g = Genome::parse(genome).context(|| format!("genome `{genome}`"))?;
        Ok(self.family.render(&self.space, &g, spec)?)
    }
}
