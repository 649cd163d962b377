//! `evo check`: every gate on hand-written kernels, with a verdict per gate.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use evo_core::config::{
    CorrectnessConfig, SearchConfig, StaticConfig, TimeoutConfig, TimingConfig,
};
use evo_core::{Genome, Target, Vars};
use evo_eval::pipeline::{Candidate, CandidateShape, Evaluator, GateSettings, Verdict};
use evo_eval::Status;
use evo_gpu::Compiler;
use evo_kernels::handwritten;
use serde::Serialize;

use crate::cli::CheckArgs;
use crate::output::{print_json, table};
use crate::setup;

#[derive(Serialize)]
struct FileVerdict {
    file: String,
    expected: Option<String>,
    why: Option<String>,
    matched: Option<bool>,
    verdict: Verdict,
}

pub fn run(args: &CheckArgs, json: bool) -> Result<ExitCode> {
    let problem = evo_kernels::problem(&args.problem).ok_or_else(|| {
        let known: Vec<&str> = evo_kernels::problems().iter().map(|p| p.name()).collect();
        anyhow!("unknown problem `{}`; known: {known:?}", args.problem)
    })?;
    // Shapes and gate settings: from a config, or defaults with --shape.
    let (shapes, compile, correctness, timing, static_rules, timeouts) = match &args.config {
        Some(path) => {
            let c = SearchConfig::load(path)?;
            if c.problem != problem.name() {
                bail!(
                    "config {} is for problem `{}`, not `{}`",
                    path.display(),
                    c.problem,
                    problem.name()
                );
            }
            let mut shapes = c.shapes.clone();
            for s in &args.shape {
                shapes.push(Genome::parse(s).context("--shape")?.as_vars().clone());
            }
            (
                shapes,
                c.compile,
                c.correctness,
                c.timing,
                c.static_rules,
                c.timeouts,
            )
        }
        None => {
            let shapes: Vec<Vars> = args
                .shape
                .iter()
                .map(|s| {
                    Genome::parse(s)
                        .map(|g| g.as_vars().clone())
                        .context("--shape")
                })
                .collect::<Result<_>>()?;
            (
                shapes,
                Default::default(),
                CorrectnessConfig::default(),
                TimingConfig::default(),
                StaticConfig::default(),
                TimeoutConfig::default(),
            )
        }
    };
    if shapes.is_empty() {
        bail!(
            "no shapes: give --config CFG or --shape NAME=value,... (problem `{}` has {:?})",
            problem.name(),
            problem
                .shape_vars()
                .iter()
                .map(|v| v.name)
                .collect::<Vec<_>>()
        );
    }
    let mut complete: Vec<(Vars, bool)> = Vec::new();
    for (i, s) in shapes.iter().enumerate() {
        let full = problem
            .complete_shape(s)
            .map_err(|e| anyhow!("shape #{}: {e}", i + 1))?;
        complete.push((full, true));
    }
    if correctness.edge_shapes {
        let configured: Vec<Vars> = complete.iter().map(|(v, _)| v.clone()).collect();
        complete.extend(
            problem
                .edge_shapes(&configured)
                .into_iter()
                .map(|v| (v, false)),
        );
    }

    let (gpus, info) = setup::gpus(&args.gpus.gpus)?;
    let device = &info.devices[gpus[0] as usize];
    let arch =
        Target::arch_for_capability(device.compute_capability.0, device.compute_capability.1);
    let mut target = Target::from_arch(&arch)?;
    target.max_smem_per_block = device.max_smem_per_block_optin;
    let timing_plan = (timing.enabled && !args.no_timing).then(|| timing.clone());
    let evaluator = Arc::new(Evaluator::on_gpus(
        problem,
        Compiler::for_config(&arch, &compile)?,
        &gpus,
        timeouts,
        GateSettings {
            target,
            static_rules,
            correctness,
            timing: timing_plan,
        },
    )?);

    // Candidates from the files.
    let mut jobs = Vec::new();
    for file in &args.files {
        let source =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let header = handwritten::header(&source);
        let launch_text = args.launch.clone().or(header.launch.clone()).ok_or_else(|| {
            anyhow!("{}: no launch rule; add a `// evo-launch: grid = ...; block = ...; shared_bytes = ...` line or pass --launch", file.display())
        })?;
        let rule = handwritten::parse_launch(problem, &launch_text)
            .map_err(|e| anyhow!("{}: launch rule: {e}", file.display()))?;
        let mut cshapes = Vec::new();
        for (vars, timed) in &complete {
            let dims = rule
                .eval(vars)
                .map_err(|e| anyhow!("{}: {e}", file.display()))?;
            cshapes.push(CandidateShape {
                vars: vars.clone(),
                launches: vec![dims],
                timed: *timed,
                args: vec![],
                scratch: vec![],
            });
        }
        let candidate = Candidate {
            label: file.display().to_string(),
            source,
            kernels: vec![rule.kernel.clone()],
            shapes: cshapes,
        };
        jobs.push((file.display().to_string(), header, candidate));
    }

    let rt = setup::runtime()?;
    let salt: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let verdicts: Vec<FileVerdict> = rt.block_on(async {
        let limit = Arc::new(tokio::sync::Semaphore::new(evaluator.pool.size()));
        let mut handles = Vec::new();
        for (id, (file, header, candidate)) in jobs.into_iter().enumerate() {
            let ev = evaluator.clone();
            let permit = limit.clone().acquire_owned().await.expect("semaphore open");
            handles.push(tokio::spawn(async move {
                let _permit = permit;
                let ev2 = ev.clone();
                let c2 = candidate.clone();
                let compiled = tokio::task::spawn_blocking(move || ev2.compile(&c2))
                    .await
                    .expect("compile task");
                let verdict = match compiled {
                    Ok(compiled) => ev.evaluate(candidate, compiled, id as u64, salt).await,
                    Err(e) => Verdict {
                        label: candidate.label.clone(),
                        status: Status::CompileFailed,
                        gate: Some(evo_eval::Gate::Compile),
                        detail: e.to_string(),
                        compile: None,
                        static_kernels: vec![],
                        result: None,
                        seeds: vec![],
                    },
                };
                let matched = header.expect.as_ref().map(|e| e == verdict.status.name());
                FileVerdict {
                    file,
                    expected: header.expect,
                    why: header.why,
                    matched,
                    verdict,
                }
            }));
        }
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.expect("check task"));
        }
        evaluator.pool.shutdown().await;
        out
    });

    if json {
        print_json(&verdicts)?;
    } else {
        print_human(problem, &verdicts, device);
    }
    let ok = verdicts.iter().all(|v| match v.matched {
        Some(m) => m,
        None => v.verdict.status == Status::Evaluated,
    });
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The run-time variables of a shape in the problem's order, e.g. `M=77 N=130 K=264`.
pub fn shape_text(problem: &dyn evo_kernels::Problem, v: &Vars) -> String {
    problem
        .shape_vars()
        .iter()
        .filter_map(|d| v.get(d.name).map(|x| format!("{}={x}", d.name)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn print_human(
    problem: &dyn evo_kernels::Problem,
    verdicts: &[FileVerdict],
    device: &evo_gpu::device::DeviceInfo,
) {
    println!(
        "device: {} (sm_{}{})",
        device.name, device.compute_capability.0, device.compute_capability.1
    );
    if verdicts.len() == 1 {
        let v = &verdicts[0].verdict;
        println!("{}", v.label);
        let gate = |name: &str, state: String| println!("  {name:<12} {state}");
        match &v.compile {
            Some(c) if v.status != Status::CompileFailed => gate(
                "compile",
                format!(
                    "ok ({:.0} ms{}, {})",
                    c.ms,
                    if c.cached { ", cached" } else { "" },
                    c.arch
                ),
            ),
            _ => gate("compile", format!("FAILED\n{}", v.detail)),
        }
        if v.status == Status::CompileFailed {
            return;
        }
        if v.status == Status::RejectedStatic {
            gate("static", format!("REJECTED: {}", v.detail));
            return;
        }
        for k in &v.static_kernels {
            gate(
                "static",
                format!(
                    "ok: `{}` {} registers, {} B static + {} B dynamic shared, {} spill bytes, {} blocks/SM{}",
                    k.name,
                    k.registers,
                    k.static_smem_bytes,
                    k.dynamic_smem_bytes,
                    k.spill_bytes,
                    k.blocks_per_sm,
                    k.tensor_ops.as_ref().map(|t| format!(", tensor ops {t:?}")).unwrap_or_default()
                ),
            );
        }
        match v.status {
            Status::Evaluated => {
                let r = v.result.as_ref().expect("evaluated has a result");
                let trials: usize = r.shapes.iter().map(|s| s.trials.len()).sum();
                gate(
                    "correctness",
                    format!(
                        "ok: {} shapes, {trials} trials, seeds {:?}",
                        r.shapes.len(),
                        v.seeds
                    ),
                );
                let mut t = table(&[
                    "shape",
                    "max abs err",
                    "rel L2",
                    "median µs",
                    "p20-p80 µs",
                    "TFLOP/s",
                    "of peak",
                ]);
                for s in &r.shapes {
                    let w = s.worst().cloned().unwrap_or_default();
                    let (m, spread, tf, peak) = match &s.timing {
                        Some(t) => (
                            format!("{:.2}", t.median_us),
                            format!("{:.2}-{:.2}", t.p20_us, t.p80_us),
                            format!("{:.1}", t.tflops),
                            t.peak_fraction
                                .map(|p| format!("{:.1}%", p * 100.0))
                                .unwrap_or_else(|| "-".into()),
                        ),
                        None => ("-".into(), "-".into(), "-".into(), "-".into()),
                    };
                    t.add_row(vec![
                        shape_text(problem, &s.vars),
                        format!("{:.2e}", w.max_abs),
                        s.rel_l2_text(),
                        m,
                        spread,
                        tf,
                        peak,
                    ]);
                }
                println!("{t}");
                gate(
                    "timing",
                    if r.shapes.iter().any(|s| s.timing.is_some()) {
                        "ok".into()
                    } else {
                        "skipped".into()
                    },
                );
            }
            status => gate(
                "correctness",
                format!(
                    "{} ({}): {}",
                    status.name().to_uppercase(),
                    v.gate.map(|g| format!("{g:?}")).unwrap_or_default(),
                    v.detail
                ),
            ),
        }
        return;
    }
    let mut t = table(&["file", "expected", "got", "", "detail"]);
    for f in verdicts {
        let mark = match f.matched {
            Some(true) => "ok",
            Some(false) => "MISMATCH",
            None => "",
        };
        let detail: String = f
            .verdict
            .detail
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(110)
            .collect();
        t.add_row(vec![
            std::path::Path::new(&f.file)
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default(),
            f.expected.clone().unwrap_or_else(|| "-".into()),
            f.verdict.status.name().to_string(),
            mark.to_string(),
            detail,
        ]);
    }
    println!("{t}");
    let with = verdicts.iter().filter(|f| f.matched.is_some()).count();
    let matched = verdicts.iter().filter(|f| f.matched == Some(true)).count();
    if with > 0 {
        println!("{matched} of {with} verdicts as expected");
    }
}
