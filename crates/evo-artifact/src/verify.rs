//! Verify: is this artifact intact, and does it still pass on this GPU? In steps, so a
//! caller shows each result before the next step (and a step that fails ends it):
//!
//! 1. [`check_hashes`]: every file against its SHA-256 in the manifest (a modified or
//!    missing file fails the check, and no kernel of a modified artifact is run). A
//!    manifest that lists no hash for a file the artifact needs (a fixed file, or a
//!    variant's source, PTX or CUBIN: [`needed_files`](crate::manifest::needed_files)) is
//!    refused: its `files` was edited, and that file could be changed unseen.
//! 2. [`check_consistency`]: every variant's genome against its hash, and its source
//!    against what the genome renders to with this evo's templates in its run's
//!    specialization (the manifest is not hashed: an edited genome or hash fails here);
//!    each CUBIN's registers and launch rule against the manifest; every dispatch entry's
//!    `defer` mark against the manifest's own times (a mark removed or
//!    invented fails here).
//! 3. [`GpuHere::new`], then [`run_gates`]: each variant's CUBIN (the artifact's own
//!    bytes) through evo's gates on GPU 0 — static, correctness on the manifest's shapes
//!    plus the problem's edge shapes with the run's tolerances, and the timing — with
//!    launch geometry from the manifest's launch rule; times compared with the manifest
//!    per shape. A different GPU, driver or NVRTC is reported, not hidden.
//!
//! Every step fills the one [`Report`].

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use evo_core::config::SearchConfig;
use evo_core::{Genome, Target, Vars};
use evo_eval::pipeline::{Candidate, CandidateShape, Evaluator, GateSettings};
use evo_eval::Status;
use evo_gpu::device::{DeviceInfo, DriverInfo};
use evo_gpu::{CompileCache, CompileRequest, Compiled, Compiler};
use evo_kernels::{resolve_launch_args, resolve_scratch, Problem};
use evo_run::Context as Loaded;
use serde::Serialize;

use crate::export::{load_config, nvrtc_name};
use crate::files::EVO_KERNEL_PY;
use crate::manifest::{
    check_files, sha256_hex, FileCheck, Manifest, Variant, VariantLaunches, MANIFEST,
};

/// One shape of one variant on this GPU, beside the manifest's time.
#[derive(Serialize)]
pub struct ShapeCheck {
    pub variant: String,
    pub shape: Vars,
    pub timed: bool,
    pub max_abs_err: Option<f64>,
    pub rel_l2: Option<f64>,
    pub median_us: Option<f64>,
    pub manifest_us: Option<f64>,
    /// Now over the manifest's time.
    pub ratio: Option<f64>,
}

/// One variant's verdict on this GPU.
#[derive(Serialize)]
pub struct VariantCheck {
    pub variant: String,
    pub status: String,
    pub detail: String,
    /// Whether NVRTC here rebuilds the same CUBIN from kernel.cu.
    pub rebuilt_identical: Option<bool>,
}

/// What a verify found, step by step (`evo --json verify` prints it as it is).
#[derive(Serialize, Default)]
pub struct Report {
    pub files: Vec<(String, FileCheck)>,
    pub extra_files: Vec<String>,
    pub gpu: Option<String>,
    pub differences: Vec<String>,
    /// What the GPU part checks, per variant.
    pub plan: Vec<String>,
    pub variants: Vec<VariantCheck>,
    pub shapes: Vec<ShapeCheck>,
    pub ok: bool,
}

impl Report {
    /// The listed files that are missing or modified.
    pub fn bad_files(&self) -> Vec<&(String, FileCheck)> {
        self.files
            .iter()
            .filter(|(_, c)| *c != FileCheck::Ok)
            .collect()
    }
}

/// One variant made ready for the gates, without a GPU.
struct Prepared {
    candidate: Candidate,
    compiled: Compiled,
}

/// Reads a variant's files and checks the manifest against them: the CUBIN's ELF has the
/// registers the manifest records, and its launch rule gives the recorded launch on every
/// recorded shape. Shapes to check: the manifest's, plus the problem's edge shapes of the
/// specialization when the run checked edge shapes.
fn prepare(
    dir: &Path,
    m: &Manifest,
    v: &Variant,
    config: &SearchConfig,
    problem: &dyn Problem,
) -> Result<Prepared> {
    let source = std::fs::read_to_string(dir.join(&v.source_file))?;
    let cubin = std::fs::read(dir.join(&v.cubin_file))?;
    let ptx = std::fs::read_to_string(dir.join(&v.ptx_file))?;
    let elf = evo_gpu::resources::elf_kernels(&cubin)
        .with_context(|| format!("reading {}", v.cubin_file))?;
    for r in &v.resources {
        let k = elf.iter().find(|k| k.name == r.name).ok_or_else(|| {
            anyhow!(
                "{} has no kernel `{}` (the manifest names it)",
                v.cubin_file,
                r.name
            )
        })?;
        if k.registers != r.registers {
            bail!(
                "{}: `{}` uses {} registers, the manifest says {}",
                v.cubin_file,
                r.name,
                k.registers,
                r.registers
            );
        }
    }
    let params = &m.abi.params;
    let mut shapes: Vec<(Vars, bool)> = v
        .shapes
        .iter()
        .map(|s| (s.shape.clone(), s.timed))
        .collect();
    if config.correctness.edge_shapes {
        let timed: Vec<Vars> = shapes.iter().filter(|s| s.1).map(|s| s.0.clone()).collect();
        for e in problem.edge_shapes(&timed) {
            if !shapes.iter().any(|(s, _)| *s == e) {
                shapes.push((e, false));
            }
        }
    }
    let first = shapes
        .first()
        .map(|s| s.0.clone())
        .ok_or_else(|| anyhow!("{}: the manifest records no shape", v.name))?;
    let launches = VariantLaunches::of(v, params, &problem.args(&first))?;
    let mut cshapes = Vec::new();
    for (shape, timed) in &shapes {
        let key = evo_store::shape_key(shape);
        let mut all = launches.constants.clone();
        all.extend(shape.iter().map(|(k, x)| (k.clone(), x.clone())));
        let dims = launches
            .rules
            .iter()
            .map(|r| r.eval(&all))
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("{}: launch rules on {key}", v.name))?;
        if let Some(rec) = v.shapes.iter().find(|s| s.shape == *shape) {
            if rec.launches != dims {
                let list = |d: &[evo_core::LaunchDims]| {
                    d.iter()
                        .map(|d| format!("({d})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                bail!(
                    "{}: the manifest's launches on {key} are {}, its launch rules give {}",
                    v.name,
                    list(&rec.launches),
                    list(&dims)
                );
            }
        }
        let (args, scratch) = if launches.is_multi_arg() {
            let err = |e: String| anyhow!("{}: on {key}: {e}", v.name);
            (
                resolve_launch_args(
                    problem,
                    &launches.rules,
                    &launches.args,
                    &launches.scratch,
                    &launches.constants,
                    shape,
                )
                .map_err(err)?,
                resolve_scratch(&launches.scratch, &launches.constants, shape).map_err(err)?,
            )
        } else {
            (vec![], vec![])
        };
        cshapes.push(CandidateShape {
            vars: shape.clone(),
            launches: dims,
            timed: *timed,
            contend_us: None,
            args,
            scratch,
        });
    }
    Ok(Prepared {
        candidate: Candidate {
            label: format!("{}@{}", v.genome, v.name),
            source,
            kernels: v.launches.iter().map(|l| l.kernel.clone()).collect(),
            shapes: cshapes,
            contiguous: v.contiguous.clone(),
        },
        compiled: Compiled {
            key: sha256_hex(&cubin),
            arch: m.arch.clone(),
            options: m.source_of(v)?.compile.nvrtc_options.clone(),
            nvrtc_version: m.nvrtc_version.clone(),
            success: true,
            log: String::new(),
            ptx: Some(ptx),
            cubin: Some(cubin),
            compile_ms: 0.0,
            cached: true,
            kernels: v.resources.clone(),
        },
    })
}

/// Whether a variant is what its genome gives: the genome is canonical and hashes to
/// `genome_hash`, it is a valid genome of its run's family, and its source file is what
/// the genome renders to (with this evo's templates) in the variant's specialization of
/// the run's config, compiled under the name the search used.
fn check_genome(dir: &Path, exported_by: &str, v: &Variant, l: &Loaded) -> Result<()> {
    let genome = Genome::parse(&v.genome)
        .map_err(|e| anyhow!("{}: genome `{}` does not parse: {e}", v.name, v.genome))?;
    if genome.canonical() != v.genome {
        bail!(
            "{}: genome `{}` is not in canonical form (`{}`): the manifest was edited",
            v.name,
            v.genome,
            genome.canonical()
        );
    }
    if genome.hash().0 != v.genome_hash {
        bail!(
            "{}: the manifest gives genome hash {}, but genome `{}` hashes to {}: the manifest was edited",
            v.name,
            v.genome_hash,
            v.genome,
            genome.hash().0
        );
    }
    if v.family != l.family.name {
        bail!(
            "{}: the manifest says family {}, but run `{}` searched {}",
            v.name,
            v.family,
            v.run,
            l.family.name
        );
    }
    let spec_index = l
        .specs
        .specs
        .iter()
        .position(|s| *s == v.specialization)
        .ok_or_else(|| {
            anyhow!(
                "{}: specialization {} is not one of run `{}`'s config",
                v.name,
                Genome::from_vars(v.specialization.clone()).canonical(),
                v.run
            )
        })?;
    // A manifest written before a knob existed: its genome takes the knob's default.
    let genome = l
        .space
        .complete(&genome)
        .with_context(|| format!("{}: genome `{}`", v.name, v.genome))?;
    if let Some(r) = l.space.rejection(&genome) {
        bail!(
            "{}: genome `{}` violates constraint `{}` of family {}",
            v.name,
            v.genome,
            r.constraint,
            l.family.name
        );
    }
    let rendered = l.family.render(&l.space, &genome, spec_index)?;
    let path = dir.join(&v.source_file);
    let file =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    if rendered != file {
        let line = rendered
            .lines()
            .zip(file.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| rendered.lines().count().min(file.lines().count()))
            + 1;
        bail!(
            "{}: {} is not the source genome `{}` renders to with this evo's templates (first difference at line {line}): the genome, specialization or architecture in manifest.json, or the templates, changed since the export (evo {exported_by} exported it; this is evo {})",
            v.name,
            v.source_file,
            v.genome,
            env!("CARGO_PKG_VERSION"),
        );
    }
    let name = nvrtc_name(&genome, &v.specialization);
    if v.nvrtc_name != name {
        bail!(
            "{}: nvrtc_name is `{}`, the search compiles this genome as `{name}`",
            v.name,
            v.nvrtc_name
        );
    }
    Ok(())
}

/// Whether every dispatch entry carries the `defer` mark the manifest's own numbers call
/// for ([`Manifest::deferral`] at `dispatch.min_speedup`): none in specialization mode or
/// in an export made with `--keep-slower` (`min_speedup` 0), exactly the entries whose
/// variant measured less than `min_speedup` times faster than its run's PyTorch baseline
/// otherwise, with those times. The manifest is not hashed, and a removed mark would make
/// `evo_kernel.py` run a kernel no faster than PyTorch's: an edit fails here. A per-shape
/// manifest without `min_speedup` was written before marks existed, unless its
/// `evo_kernel.py` is this evo's (which every per-shape export of this evo writes it with).
fn check_marks(m: &Manifest) -> Result<()> {
    let edited = "the manifest was edited; export it again with `evo export`";
    match (m.dispatch.mode.as_str(), m.dispatch.min_speedup) {
        ("per_shape", Some(min)) if !(min.is_finite() && min >= 0.0) => {
            bail!("dispatch.min_speedup is {min}, not a speedup of 0 or more: {edited}")
        }
        ("per_shape", None)
            if m.files.get("evo_kernel.py") == Some(&sha256_hex(EVO_KERNEL_PY.as_bytes())) =>
        {
            bail!(
                "dispatch.min_speedup is missing, but this evo's evo_kernel.py, which the artifact holds, comes only with exports that write it: {edited}"
            )
        }
        ("per_shape", _) => {}
        (mode, Some(min)) => bail!(
            "dispatch.min_speedup is {min} in {mode} mode, where one variant serves every shape and nothing is marked: {edited}"
        ),
        (_, None) => {}
    }
    let min = m.dispatch.min_speedup.unwrap_or(0.0);
    let policy = match m.dispatch.min_speedup {
        Some(min) => format!("and dispatch.min_speedup ({min})"),
        None => "(no dispatch.min_speedup: this artifact marks no entry)".into(),
    };
    for e in &m.dispatch.table {
        let want = m.deferral(e)?;
        let times = |b: &crate::manifest::Deferral| {
            format!(
                "PyTorch's SDPA {} µs, {} {} µs",
                b.baseline_us, e.variant, b.variant_us
            )
        };
        match (&e.defer, want) {
            (Some(have), None) => bail!(
                "dispatch entry {} is marked defer ({}), but by the manifest's own times {policy} it is not (its variant's `shapes` median against its run's PyTorch `baseline_us` there): evo_kernel.py would send these calls to PyTorch's SDPA for no reason; {edited}",
                e.key_text(),
                times(have)
            ),
            (Some(have), Some(want)) if *have != want => bail!(
                "dispatch entry {}'s defer mark says {}, the manifest's own times say {}: {edited}",
                e.key_text(),
                times(have),
                times(&want)
            ),
            (None, Some(want)) => bail!(
                "dispatch entry {} has no defer mark, but its run measured evo's variant less than {min}x faster than PyTorch's SDPA there ({}), and the export marks every such entry: evo_kernel.py would run it instead of PyTorch's SDPA; {edited}",
                e.key_text(),
                times(&want)
            ),
            _ => {}
        }
    }
    Ok(())
}

/// Step 1: the manifest of the artifact in `dir`, and every file it lists against its
/// hash (`files` and `extra_files` of the report: files of the folder the artifact does
/// not need, e.g. a user's notes, are only listed). A bad file ([`Report::bad_files`])
/// ends the verify: no kernel of a modified artifact is run. An error: a file the
/// artifact needs ([`needed_files`](crate::manifest::needed_files)) with no hash in the
/// manifest (say, `files` emptied and `evo_kernel.py` edited), or a name outside the
/// folder.
pub fn check_hashes(dir: &Path) -> crate::error::Result<(Manifest, Report)> {
    let m = Manifest::read(dir)?;
    let (files, extra_files) = check_files(dir, &m)?;
    let report = Report {
        files,
        extra_files,
        ..Report::default()
    };
    Ok((m, report))
}

/// An artifact found consistent without a GPU: each run's context and each variant made
/// ready for the gates.
pub struct Consistent {
    pub problem: &'static dyn Problem,
    loaded: BTreeMap<String, Loaded>,
    prepared: Vec<Prepared>,
}

/// Step 2, still without a GPU: each run's config, each variant's genome, source, CUBIN
/// and launch rule against the manifest; what the GPU part will check goes to
/// `report.plan`.
pub fn check_consistency(
    dir: &Path,
    m: &Manifest,
    templates: Option<&Path>,
    report: &mut Report,
) -> crate::error::Result<Consistent> {
    Ok(consistency(dir, m, templates, report)?)
}

fn consistency(
    dir: &Path,
    m: &Manifest,
    templates: Option<&Path>,
    report: &mut Report,
) -> Result<Consistent> {
    let problem = evo_kernels::problem(&m.problem)
        .ok_or_else(|| anyhow!("this evo does not know problem `{}`", m.problem))?;
    let mut loaded: BTreeMap<String, Loaded> = BTreeMap::new();
    for s in &m.sources {
        let l = load_config(
            &s.run,
            Path::new(MANIFEST),
            &s.config_toml,
            &m.arch,
            templates,
        )
        .with_context(|| format!("run `{}` of manifest.json", s.run))?;
        loaded.insert(s.run.clone(), l);
    }
    let mut prepared = Vec::new();
    for v in &m.variants {
        m.source_of(v)?;
        let l = &loaded[&v.run];
        check_genome(dir, &m.evo_version, v, l)?;
        let p = prepare(dir, m, v, &l.config, problem)?;
        let timed = p.candidate.shapes.iter().filter(|s| s.timed).count();
        report.plan.push(format!(
            "{}: {} timed shapes + {} correctness-only shapes",
            v.name,
            timed,
            p.candidate.shapes.len() - timed
        ));
        prepared.push(p);
    }
    check_marks(m)?;
    Ok(Consistent {
        problem,
        loaded,
        prepared,
    })
}

/// The GPU the gates run on (the first of `gpus`), with its architecture.
pub struct GpuHere {
    gpus: Vec<u32>,
    device: DeviceInfo,
    arch: String,
}

impl GpuHere {
    /// Step 3, on the GPUs the caller selected (`evo_run::select_gpus`): this GPU, its
    /// driver and NVRTC (`report.gpu`), and where they differ from the manifest's
    /// (`report.differences`). NVRTC missing is an `evo_run::MissingComponent`.
    pub fn new(
        m: &Manifest,
        gpus: Vec<u32>,
        info: DriverInfo,
        report: &mut Report,
    ) -> crate::error::Result<GpuHere> {
        let device = info.devices[gpus[0] as usize].clone();
        let arch =
            Target::arch_for_capability(device.compute_capability.0, device.compute_capability.1);
        let driver = format!(
            "CUDA {}.{}",
            info.cuda_version / 1000,
            (info.cuda_version % 1000) / 10
        );
        let nvrtc = evo_gpu::nvrtc::version()
            .map(|(a, b)| format!("{a}.{b}"))
            .map_err(|e| {
                evo_run::MissingComponent(format!(
                    "verify needs NVRTC (for the SASS check and the rebuild): {e}"
                ))
            })
            .map_err(anyhow::Error::from)?;
        report.gpu = Some(format!("{} ({arch}), {driver}, NVRTC {nvrtc}", device.name));
        let mut differ = |what: &str, then: Option<&str>, now: &str| {
            if then.is_some_and(|t| t != now) {
                report.differences.push(format!(
                    "{what}: the manifest's measurements come from {}, this is {now}",
                    then.unwrap_or("?")
                ));
            }
        };
        differ("GPU", m.device.as_deref(), &device.name);
        differ("driver", m.driver.as_deref(), &driver);
        differ("NVRTC", Some(&m.nvrtc_version), &nvrtc);
        Ok(GpuHere { gpus, device, arch })
    }
}

/// Step 4: every variant through the gates of its own run on this GPU (refused when the
/// CUBINs are for another architecture); `report.variants`, `report.shapes` and
/// `report.ok` (every variant passed) are filled.
pub async fn run_gates(
    m: &Manifest,
    consistent: Consistent,
    here: GpuHere,
    report: &mut Report,
) -> crate::error::Result<()> {
    Ok(evaluate_variants(m, consistent, here, report).await?)
}

async fn evaluate_variants(
    m: &Manifest,
    consistent: Consistent,
    here: GpuHere,
    report: &mut Report,
) -> Result<()> {
    let Consistent {
        problem,
        loaded,
        prepared,
    } = consistent;
    let GpuHere {
        gpus,
        device,
        arch: here_arch,
    } = here;
    if here_arch != m.arch {
        bail!(
            "the artifact's CUBINs are for {}; GPU 0 ({}) is {here_arch}: they cannot run here",
            m.arch,
            device.name
        );
    }

    let mut target = Target::from_arch(&here_arch)?;
    target.max_smem_per_block = device.max_smem_per_block_optin;
    // The gates and the compiler of a variant's own run (its config's tolerances, timing
    // and compile options), over one pool of workers.
    let settings = |run: &str| -> Result<(Compiler, GateSettings)> {
        let source = m
            .sources
            .iter()
            .find(|s| s.run == run)
            .ok_or_else(|| anyhow!("no source `{run}`"))?;
        let config = &loaded[run].config;
        let compiler = Compiler::new(
            &m.arch,
            &source.compile.options,
            source.compile.max_registers,
            Some(CompileCache::new(CompileCache::default_dir())),
        )?;
        let gates = GateSettings {
            target: target.clone(),
            static_rules: config.static_rules.clone(),
            correctness: config.correctness.clone(),
            timing: config.timing.enabled.then(|| config.timing.clone()),
        };
        Ok((compiler, gates))
    };
    let (compiler, gates) = settings(&m.variants[0].run)?;
    let mut evaluator = Evaluator::on_gpus(
        problem,
        compiler,
        &gpus,
        loaded[&m.variants[0].run].config.timeouts.clone(),
        gates,
    )?;
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);

    let mut all_ok = true;
    for (i, (v, p)) in m.variants.iter().zip(prepared).enumerate() {
        (evaluator.compiler, evaluator.gates) = settings(&v.run)?;
        // Does NVRTC here rebuild the same CUBIN from the source? (Reported, not required.)
        let rebuilt = evaluator
            .compiler
            .compile(&CompileRequest {
                name: v.nvrtc_name.clone(),
                source: p.candidate.source.clone(),
            })
            .ok()
            .and_then(|c| c.cubin)
            .map(|c| Some(&c) == p.compiled.cubin.as_ref());
        let (candidate, compiled) = (p.candidate, p.compiled);
        let verdict = evaluator
            .evaluate(candidate, compiled, i as u64, salt)
            .await;
        let ok = verdict.status == Status::Evaluated;
        all_ok &= ok;
        report.variants.push(VariantCheck {
            variant: v.name.clone(),
            status: verdict.status.name().into(),
            detail: verdict.detail.clone(),
            rebuilt_identical: rebuilt,
        });
        if let Some(r) = &verdict.result {
            for s in &r.shapes {
                let w = s.worst();
                let rec = v.shapes.iter().find(|x| x.shape == s.vars);
                let now = s.timing.as_ref().map(|t| t.median_us);
                let then = rec.and_then(|x| x.median_us);
                report.shapes.push(ShapeCheck {
                    variant: v.name.clone(),
                    shape: s.vars.clone(),
                    timed: rec.is_some_and(|x| x.timed),
                    max_abs_err: w.map(|w| w.max_abs),
                    rel_l2: w.map(|w| w.rel_l2),
                    median_us: now,
                    manifest_us: then,
                    ratio: now.zip(then).map(|(a, b)| a / b),
                });
            }
        }
    }
    evaluator.pool.shutdown().await;
    report.ok = all_ok;
    Ok(())
}
