//! `evo compile`: NVRTC only, no GPU: PTX/CUBIN and resource usage per variant.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use evo_core::{Genome, LaunchDims};
use evo_gpu::{CompileCache, CompileRequest, Compiled, Compiler, SassCounts};
use serde::Serialize;

use crate::cli::{GenomeArgs, TargetArgs};
use crate::output::{bytes, exit_code, outln, print_json, table};
use crate::setup::{self, Picking};

pub struct Options<'a> {
    pub target: &'a TargetArgs,
    pub pick: &'a GenomeArgs,
    pub all: bool,
    pub cover: bool,
    pub pairwise: bool,
    pub out: Option<&'a Path>,
    pub threads: usize,
    pub no_cache: bool,
    pub sass: bool,
    pub json: bool,
}

#[derive(Serialize)]
struct VariantReport {
    genome: String,
    hash: String,
    spec: String,
    #[serde(flatten)]
    compiled: Compiled,
    ptx_bytes: usize,
    cubin_bytes: usize,
    /// Launch geometry per kernel for the first shape of this specialization.
    launch: Vec<(String, LaunchDims)>,
    sass: Option<std::collections::BTreeMap<String, SassCounts>>,
}

pub fn run(templates: Option<&Path>, o: Options) -> Result<ExitCode> {
    let loaded = setup::load(templates, o.target)?;
    let genomes: Vec<Genome> = if o.all {
        loaded.space.iter_valid().collect()
    } else if o.cover || o.pairwise {
        loaded.covering_genomes(o.pairwise)
    } else {
        loaded.pick_genomes(o.pick, None)?
    };
    let cache = (!o.no_cache).then(|| CompileCache::new(CompileCache::default_dir()));
    let compiler = Compiler::new(
        &loaded.target.target.arch,
        &loaded.config.compile.options,
        loaded.config.compile.max_registers,
        cache,
    )?;
    let contexts = loaded.specs.specs.len();
    let mut requests = Vec::new();
    let mut meta = Vec::new();
    for g in &genomes {
        for spec in 0..contexts {
            let source = loaded.family.render(&loaded.space, g, spec)?;
            requests.push(CompileRequest {
                name: format!("{}_{}.cu", loaded.family.name, g.hash()),
                source,
            });
            meta.push((g, spec));
        }
    }
    let started = std::time::Instant::now();
    let results = compiler.compile_many(&requests, o.threads);
    let wall = started.elapsed();

    if let Some(dir) = o.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut reports = Vec::new();
    for ((genome, spec), (req, result)) in meta.into_iter().zip(requests.iter().zip(results)) {
        let compiled = result?;
        let spec_text = Genome::from_vars(loaded.specs.specs[spec].clone()).canonical();
        let vars = loaded.space.vars(genome, spec)?;
        let launch = loaded
            .specs
            .shapes
            .iter()
            .find(|(s, _)| *s == spec)
            .map(|(_, shape)| loaded.family.launch_dims(&vars, shape))
            .transpose()?
            .unwrap_or_default();
        let sass = match (&compiled.cubin, o.sass) {
            (Some(cubin), true) => match compiler.sass_counts(cubin) {
                Some(Ok(c)) => Some(c),
                Some(Err(e)) => {
                    tracing::warn!("cuobjdump failed: {e}");
                    None
                }
                None => {
                    tracing::warn!(
                        "--sass: cuobjdump not found (scripts/install-cuda.sh installs it)"
                    );
                    None
                }
            },
            _ => None,
        };
        if let Some(dir) = o.out {
            // Append the extension: `with_extension` would replace the specialization
            // part after the hash's dot, and every specialization would share one file.
            let stem = format!(
                "{}.{}",
                genome.hash(),
                spec_text.replace(',', "_").replace('=', "-")
            );
            let file = |ext: &str| dir.join(format!("{stem}.{ext}"));
            std::fs::write(file("cu"), &req.source)?;
            std::fs::write(file("log"), &compiled.log)?;
            if let Some(ptx) = &compiled.ptx {
                std::fs::write(file("ptx"), ptx)?;
            }
            if let Some(cubin) = &compiled.cubin {
                std::fs::write(file("cubin"), cubin)?;
            }
        }
        reports.push(VariantReport {
            genome: genome.canonical(),
            hash: genome.hash().0,
            spec: spec_text,
            ptx_bytes: compiled.ptx.as_ref().map_or(0, |p| p.len()),
            cubin_bytes: compiled.cubin.as_ref().map_or(0, |c| c.len()),
            compiled,
            launch,
            sass,
        });
    }
    let failed = reports.iter().filter(|r| !r.compiled.success).count();
    let printed = if o.json {
        print_json(&reports)
    } else {
        print_human(&loaded, &compiler, &reports, wall, o.all)
    };
    let code = if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    };
    exit_code(printed, code)
}

fn print_human(
    loaded: &evo_run::Context,
    compiler: &Compiler,
    reports: &[VariantReport],
    wall: std::time::Duration,
    summary_only: bool,
) -> Result<()> {
    outln!(
        "target {} ({}), NVRTC {}, options: {}",
        compiler.arch(),
        loaded.target.reason,
        compiler.nvrtc_version(),
        compiler.options().join(" ")
    )?;
    let entry = loaded
        .family
        .launches
        .first()
        .map(|l| l.kernel.clone())
        .unwrap_or_default();
    let mut t = table(&[
        "hash",
        "spec",
        "status",
        "ms",
        "regs",
        "smem static+dyn",
        "stack",
        "spill st/ld",
        "tensor ops",
        "cubin",
    ]);
    for r in reports {
        let k = r.compiled.kernel(&entry);
        let dyn_smem = r
            .launch
            .iter()
            .find(|(n, _)| *n == entry)
            .map_or(0, |(_, d)| d.shared_bytes);
        let tensor = r
            .sass
            .as_ref()
            .and_then(|s| s.get(&entry))
            .map(|c| {
                c.tensor
                    .iter()
                    .map(|(op, n)| format!("{op}:{n}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| "-".into());
        let status = match (r.compiled.success, r.compiled.cached) {
            (true, true) => "ok (cached)",
            (true, false) => "ok",
            (false, _) => "FAILED",
        };
        t.add_row(vec![
            r.hash.clone(),
            r.spec.clone(),
            status.to_string(),
            format!("{:.0}", r.compiled.compile_ms),
            k.map_or("-".into(), |k| k.registers.to_string()),
            k.map_or("-".into(), |k| {
                format!(
                    "{}+{}",
                    bytes(k.static_smem_bytes as u64),
                    bytes(dyn_smem as u64)
                )
            }),
            k.map_or("-".into(), |k| k.stack_frame_bytes.to_string()),
            k.map_or("-".into(), |k| {
                format!("{}/{}", k.spill_store_bytes, k.spill_load_bytes)
            }),
            tensor,
            bytes(r.cubin_bytes as u64),
        ]);
    }
    if !summary_only || reports.len() <= 40 {
        outln!("{t}")?;
        if reports.len() == 1 {
            outln!("genome {}", reports[0].genome)?;
        }
    }
    let failed: Vec<&VariantReport> = reports.iter().filter(|r| !r.compiled.success).collect();
    let spilled = reports
        .iter()
        .filter(|r| r.compiled.kernels.iter().any(|k| k.spills()))
        .count();
    let serialized: Vec<(&VariantReport, &str, &str)> = reports
        .iter()
        .flat_map(|r| {
            r.compiled.kernels.iter().filter_map(move |k| {
                k.wgmma_serialized
                    .as_deref()
                    .map(|why| (r, k.name.as_str(), why))
            })
        })
        .collect();
    let fresh: Vec<f64> = reports
        .iter()
        .filter(|r| !r.compiled.cached && r.compiled.success)
        .map(|r| r.compiled.compile_ms)
        .collect();
    outln!(
        "{} variants: {} compiled, {} failed, {} with spills; {} from cache; wall {:.1} s{}",
        reports.len(),
        reports.len() - failed.len(),
        failed.len(),
        spilled,
        reports.iter().filter(|r| r.compiled.cached).count(),
        wall.as_secs_f64(),
        if fresh.is_empty() {
            String::new()
        } else {
            format!(
                ", NVRTC {:.0}-{:.0} ms per variant",
                fresh.iter().cloned().fold(f64::MAX, f64::min),
                fresh.iter().cloned().fold(0.0, f64::max)
            )
        }
    )?;
    for (r, kernel, why) in serialized {
        outln!(
            "ptxas serialized the wgmma instructions of `{kernel}` in {} ({}): {why}",
            r.hash,
            r.spec
        )?;
    }
    for r in failed {
        eprintln!(
            "--- {} ({}) failed to compile:\n{}",
            r.genome,
            r.spec,
            r.compiled.log.trim_end()
        );
    }
    Ok(())
}
