//! `evo eval`: every gate on chosen genomes of a family, without a search. Compilation
//! runs ahead on CPU threads while the GPU workers evaluate.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Result};
use evo_core::{Genome, Target};
use evo_eval::pipeline::{family_candidates, Evaluator, GateSettings, Verdict};
use evo_eval::{Gate, Status};
use evo_gpu::Compiler;
use serde::Serialize;

use crate::cli::TargetArgs;
use crate::output::{exit_code, outln, print_json, table};
use crate::setup::{self, Picking};

pub struct Options<'a> {
    pub target: &'a TargetArgs,
    pub genomes: &'a [String],
    pub random: Option<usize>,
    pub cover: bool,
    pub pairwise: bool,
    pub seed: u64,
    pub no_timing: bool,
    pub gpus: &'a str,
    pub json: bool,
}

#[derive(Serialize)]
pub struct GenomeVerdict {
    pub genome: String,
    pub hash: String,
    /// One verdict per specialization.
    pub verdicts: Vec<Verdict>,
}

impl GenomeVerdict {
    /// The genome's status: the first failure over its specializations.
    pub fn status(&self) -> Status {
        self.verdicts
            .iter()
            .map(|v| v.status)
            .find(|s| *s != Status::Evaluated)
            .unwrap_or(Status::Evaluated)
    }
}

fn failed(label: String, status: Status, gate: Gate, detail: String) -> Verdict {
    Verdict {
        label,
        status,
        gate: Some(gate),
        detail,
        compile: None,
        static_kernels: vec![],
        result: None,
        seeds: vec![],
    }
}

pub fn run(templates: Option<&Path>, o: Options) -> Result<ExitCode> {
    let (gpus, info) = setup::gpus(o.gpus)?;
    let device = info.devices[gpus[0] as usize].clone();
    let loaded = setup::load(templates, o.target)?;
    let arch =
        Target::arch_for_capability(device.compute_capability.0, device.compute_capability.1);
    if loaded.target.target.arch != arch {
        bail!(
            "the target is {} but GPU {} is {arch}: evaluate for the GPU's own architecture (drop --arch or set arch = \"auto\")",
            loaded.target.target.arch,
            gpus[0]
        );
    }
    let genomes: Vec<Genome> = if o.cover || o.pairwise {
        loaded.covering_genomes(o.pairwise)
    } else if !o.genomes.is_empty() {
        let mut v = Vec::new();
        for g in o.genomes {
            let pick = crate::cli::GenomeArgs {
                genome: Some(g.clone()),
                random: None,
                seed: 0,
            };
            v.extend(loaded.pick_genomes(&pick, None)?);
        }
        v
    } else if let Some(n) = o.random {
        let pick = crate::cli::GenomeArgs {
            genome: None,
            random: Some(n),
            seed: o.seed,
        };
        loaded.pick_genomes(&pick, None)?
    } else {
        crate::usage!("choose genomes with --genome, --random N, --cover or --pairwise");
    };
    let problem = loaded.family.problem;
    let configured: Vec<evo_core::Vars> =
        loaded.specs.shapes.iter().map(|(_, v)| v.clone()).collect();
    let edges = if loaded.config.correctness.edge_shapes {
        problem.edge_shapes(&configured)
    } else {
        Vec::new()
    };
    let cfg = &loaded.config;
    let mut target = loaded.target.target.clone();
    target.max_smem_per_block = device.max_smem_per_block_optin;
    let evaluator = Arc::new(Evaluator::on_gpus(
        problem,
        Compiler::for_config(&arch, &cfg.compile)?,
        &gpus,
        cfg.timeouts.clone(),
        GateSettings {
            target,
            static_rules: loaded.family.static_rules(cfg.static_rules.clone()),
            correctness: cfg.correctness.clone(),
            timing: (cfg.timing.enabled && !o.no_timing).then(|| cfg.timing.clone()),
        },
    )?);
    // Candidates: one per (genome, specialization).
    let mut jobs = Vec::new();
    for g in &genomes {
        match family_candidates(&loaded.family, &loaded.space, &loaded.specs, g, &edges) {
            Ok(cs) => jobs.push((g.clone(), Ok(cs))),
            Err(e) => jobs.push((g.clone(), Err(e))),
        }
    }
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let rt = setup::runtime()?;
    let compile_slots = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let results: Vec<GenomeVerdict> = rt.block_on(async {
        let compile_limit = Arc::new(tokio::sync::Semaphore::new(compile_slots));
        let mut handles = Vec::new();
        let mut id = 0u64;
        for (genome, candidates) in jobs {
            let mut spec_handles = Vec::new();
            match candidates {
                Err(e) => {
                    let label = genome.canonical();
                    spec_handles.push(tokio::spawn(async move {
                        failed(label, Status::RenderFailed, Gate::Render, e)
                    }));
                }
                Ok(cs) => {
                    for c in cs {
                        id += 1;
                        let (ev, limit) = (evaluator.clone(), compile_limit.clone());
                        spec_handles.push(tokio::spawn(async move {
                            let permit = limit.acquire_owned().await.expect("open");
                            let (ev2, c2) = (ev.clone(), c.clone());
                            let compiled = tokio::task::spawn_blocking(move || ev2.compile(&c2))
                                .await
                                .expect("compile task");
                            drop(permit);
                            match compiled {
                                Ok(compiled) => ev.evaluate(c, compiled, id, salt).await,
                                Err(e) => failed(
                                    c.label.clone(),
                                    Status::CompileFailed,
                                    Gate::Compile,
                                    e.to_string(),
                                ),
                            }
                        }));
                    }
                }
            }
            handles.push((genome, spec_handles));
        }
        let mut out = Vec::new();
        for (genome, hs) in handles {
            let mut verdicts = Vec::new();
            for h in hs {
                verdicts.push(h.await.expect("evaluation task"));
            }
            out.push(GenomeVerdict {
                genome: genome.canonical(),
                hash: genome.hash().0,
                verdicts,
            });
        }
        evaluator.pool.shutdown().await;
        out
    });
    let printed = if o.json {
        print_json(&results)
    } else {
        print_human(&device, &arch, problem, &results)
    };
    let all_ok = results.iter().all(|r| r.status() == Status::Evaluated);
    let code = if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    exit_code(printed, code)
}

fn print_human(
    device: &evo_gpu::device::DeviceInfo,
    arch: &str,
    problem: &dyn evo_kernels::Problem,
    results: &[GenomeVerdict],
) -> Result<()> {
    outln!(
        "device: {} ({arch}); {} genomes",
        device.name,
        results.len()
    )?;
    let mut t = table(&[
        "genome",
        "status",
        "shape",
        "max abs err",
        "rel L2",
        "median µs",
        "TFLOP/s",
    ]);
    for r in results {
        let mut first = true;
        for v in &r.verdicts {
            let label = if first { r.hash.clone() } else { String::new() };
            first = false;
            match &v.result {
                Some(res) if v.status == Status::Evaluated => {
                    for s in &res.shapes {
                        let w = s.worst().cloned().unwrap_or_default();
                        t.add_row(vec![
                            label.clone(),
                            v.status.name().to_string(),
                            problem.shape_text(&s.vars),
                            format!("{:.2e}", w.max_abs),
                            s.rel_l2_text(),
                            s.timing
                                .as_ref()
                                .map_or("-".into(), |t| format!("{:.2}", t.median_us)),
                            s.timing
                                .as_ref()
                                .map_or("-".into(), |t| format!("{:.1}", t.tflops)),
                        ]);
                    }
                }
                _ => {
                    t.add_row(vec![
                        label,
                        v.status.name().to_string(),
                        v.label.split('@').nth(1).unwrap_or("").to_string(),
                        v.detail
                            .lines()
                            .next()
                            .unwrap_or("")
                            .chars()
                            .take(90)
                            .collect(),
                        String::new(),
                        String::new(),
                        String::new(),
                    ]);
                }
            }
        }
    }
    outln!("{t}")?;
    for r in results {
        outln!("{}  {}  {}", r.hash, r.status().name(), r.genome)?;
    }
    Ok(())
}
