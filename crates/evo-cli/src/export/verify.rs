//! `evo verify DIR`: is this artifact intact, and does it still pass on this GPU?
//!
//! 1. Every file against its SHA-256 in the manifest (a modified or missing file fails
//!    the check, and no kernel of a modified artifact is run).
//! 2. Every variant's genome against its hash, and its source against what the genome
//!    renders to with this evo's templates in its run's specialization (the manifest is
//!    not hashed: an edited genome or hash fails here).
//! 3. On a GPU: each variant's CUBIN (the artifact's own bytes) through evo's gates —
//!    static, correctness on the manifest's shapes plus the problem's edge shapes with
//!    the run's tolerances, and the timing — with launch geometry from the manifest's
//!    launch rule; times compared with the manifest per shape. A different GPU, driver
//!    or NVRTC is printed, not hidden. Without a GPU it stops after the hashes with
//!    exit code 3.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use evo_core::config::SearchConfig;
use evo_core::{Genome, Target, Vars};
use evo_eval::pipeline::{Candidate, CandidateShape, Evaluator, GateSettings};
use evo_eval::Status;
use evo_gpu::{CompileCache, CompileRequest, Compiled, Compiler};
use evo_kernels::{resolve_launch_args, resolve_scratch};
use serde::Serialize;

use super::manifest::{check_files, FileCheck, Manifest, Variant, VariantLaunches};
use super::Loaded;
use crate::output::{print_json, table};

#[derive(Serialize)]
struct ShapeCheck {
    variant: String,
    shape: Vars,
    timed: bool,
    max_abs_err: Option<f64>,
    rel_l2: Option<f64>,
    median_us: Option<f64>,
    manifest_us: Option<f64>,
    /// Now over the manifest's time.
    ratio: Option<f64>,
}

#[derive(Serialize)]
struct VariantCheck {
    variant: String,
    status: String,
    detail: String,
    /// Whether NVRTC here rebuilds the same CUBIN from kernel.cu.
    rebuilt_identical: Option<bool>,
}

#[derive(Serialize, Default)]
struct Report {
    files: Vec<(String, FileCheck)>,
    extra_files: Vec<String>,
    gpu: Option<String>,
    differences: Vec<String>,
    /// What the GPU part checks, per variant.
    plan: Vec<String>,
    variants: Vec<VariantCheck>,
    shapes: Vec<ShapeCheck>,
    ok: bool,
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
    problem: &dyn evo_kernels::Problem,
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
                bail!(
                    "{}: the manifest's launches on {key} are {:?}, its launch rules give {dims:?}",
                    v.name,
                    rec.launches
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
            key: super::manifest::sha256_hex(&cubin),
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
    l.space
        .check_genome(&genome)
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
            "{}: {} is not the source genome `{}` renders to with this evo's templates (first difference at line {line}): the genome in manifest.json or the templates changed since the export (evo {exported_by} exported it; this is evo {})",
            v.name,
            v.source_file,
            v.genome,
            env!("CARGO_PKG_VERSION"),
        );
    }
    let name = super::nvrtc_name(&genome, &v.specialization);
    if v.nvrtc_name != name {
        bail!(
            "{}: nvrtc_name is `{}`, the search compiles this genome as `{name}`",
            v.name,
            v.nvrtc_name
        );
    }
    Ok(())
}

pub fn run(dir: &Path, templates: Option<&Path>, json: bool) -> Result<ExitCode> {
    let m = Manifest::read(dir)?;
    let mut report = Report::default();
    let (files, extra) = check_files(dir, &m)?;
    let bad: Vec<&(String, FileCheck)> =
        files.iter().filter(|(_, c)| *c != FileCheck::Ok).collect();
    if !json {
        println!(
            "artifact {}: {} from run{} {} ({} variant{}), schema {}",
            dir.display(),
            m.problem,
            if m.sources.len() == 1 { "" } else { "s" },
            m.sources
                .iter()
                .map(|s| format!("`{}` ({})", s.run, s.family))
                .collect::<Vec<_>>()
                .join(", "),
            m.variants.len(),
            if m.variants.len() == 1 { "" } else { "s" },
            m.schema
        );
        for (name, c) in &bad {
            match c {
                FileCheck::Missing => println!("  MISSING   {name}"),
                FileCheck::Modified { expected, actual } => {
                    println!("  MODIFIED  {name}: sha256 {actual}, the manifest says {expected}")
                }
                FileCheck::Ok => {}
            }
        }
        for name in &extra {
            println!("  note: {name} is not part of the artifact");
        }
    }
    report.files = files.clone();
    report.extra_files = extra;
    if !bad.is_empty() {
        if json {
            print_json(&report)?;
        } else {
            println!(
                "hashes: {} of {} files do not match manifest.json: the artifact was modified; its kernels are not run",
                bad.len(),
                files.len()
            );
        }
        return Ok(ExitCode::from(1));
    }
    if !json {
        println!("hashes: ok ({} files)", files.len());
    }

    // Consistency, still without a GPU: each run's config, each variant's genome, source,
    // CUBIN and launch rule against the manifest.
    let problem = evo_kernels::problem(&m.problem)
        .ok_or_else(|| anyhow!("this evo does not know problem `{}`", m.problem))?;
    let mut loaded: BTreeMap<String, Loaded> = BTreeMap::new();
    for s in &m.sources {
        let l = super::load_config(
            &s.run,
            Path::new(super::manifest::MANIFEST),
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
        let p = prepare(dir, &m, v, &l.config, problem)?;
        let timed = p.candidate.shapes.iter().filter(|s| s.timed).count();
        report.plan.push(format!(
            "{}: {} timed shapes + {} correctness-only shapes",
            v.name,
            timed,
            p.candidate.shapes.len() - timed
        ));
        prepared.push(p);
    }
    if !json {
        println!(
            "genomes: every variant's genome matches its hash and renders to its kernel source ({} variant{})",
            m.variants.len(),
            if m.variants.len() == 1 { "" } else { "s" }
        );
        println!(
            "manifest: consistent with the CUBINs and its launch rule; to check: {}",
            report.plan.join("; ")
        );
    }

    // The GPU part.
    let (gpus, info) = match crate::setup::gpus("0") {
        Ok(g) => g,
        Err(e) => {
            if json {
                report.ok = false;
                print_json(&report)?;
            }
            return Err(
                e.context("hashes are ok, but the correctness and timing checks cannot run here")
            );
        }
    };
    let device = &info.devices[gpus[0] as usize];
    let here_arch =
        Target::arch_for_capability(device.compute_capability.0, device.compute_capability.1);
    let driver = format!(
        "CUDA {}.{}",
        info.cuda_version / 1000,
        (info.cuda_version % 1000) / 10
    );
    let nvrtc = evo_gpu::nvrtc::version()
        .map(|(a, b)| format!("{a}.{b}"))
        .map_err(|e| {
            crate::MissingComponent(format!(
                "verify needs NVRTC (for the SASS check and the rebuild): {e}"
            ))
        })?;
    report.gpu = Some(format!(
        "{} ({here_arch}), {driver}, NVRTC {nvrtc}",
        device.name
    ));
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
    if !json {
        println!("GPU: {}", report.gpu.as_deref().unwrap_or(""));
        for d in &report.differences {
            println!("  DIFFERENT {d}");
        }
    }
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

    let rt = crate::setup::runtime()?;
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
        let verdict = rt.block_on(evaluator.evaluate(candidate, compiled, i as u64, salt));
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
    rt.block_on(evaluator.pool.shutdown());
    report.ok = all_ok;
    if json {
        print_json(&report)?;
    } else {
        for v in &report.variants {
            println!(
                "{}: {}{}{}",
                v.variant,
                if v.status == "evaluated" { "correct" } else { &v.status },
                if v.detail.is_empty() { String::new() } else { format!(" ({})", v.detail.lines().next().unwrap_or("")) },
                match v.rebuilt_identical {
                    Some(true) => "; NVRTC here rebuilds the identical CUBIN",
                    Some(false) => "; NVRTC here builds a different CUBIN from the source (the artifact's was run)",
                    None => "",
                }
            );
        }
        let mut t = table(&[
            "variant",
            "shape",
            "max abs err",
            "rel L2",
            "now µs",
            "manifest µs",
            "now / manifest",
        ]);
        for s in &report.shapes {
            let f = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.2}"));
            t.add_row(vec![
                s.variant.clone(),
                crate::commands::check::shape_text(problem, &s.shape),
                s.max_abs_err.map_or("-".into(), |x| format!("{x:.2e}")),
                s.rel_l2.map_or("-".into(), |x| format!("{x:.2e}")),
                f(s.median_us),
                f(s.manifest_us),
                s.ratio.map_or("-".into(), |x| format!("{x:.3}")),
            ]);
        }
        println!("{t}");
        let slower = report
            .shapes
            .iter()
            .filter(|s| s.ratio.is_some_and(|r| r > 1.10))
            .count();
        if slower > 0 {
            println!(
                "note: {slower} shape(s) more than 10% slower than the manifest's times{} (times are reported, not judged)",
                if report.differences.is_empty() { " on the same GPU, driver and NVRTC" } else { "; see the differences above" }
            );
        }
        println!(
            "{}",
            if all_ok {
                "verify: ok (every variant passed every correctness check on this GPU)"
            } else {
                "verify: FAILED (a variant did not pass the gates on this GPU)"
            }
        );
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
