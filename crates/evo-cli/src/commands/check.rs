//! `evo check`: every gate on hand-written kernels, with a verdict per gate.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use evo_core::config::{
    inherit_spec, CorrectnessConfig, SearchConfig, StaticConfig, TimeoutConfig, TimingConfig,
};
use evo_core::{Target, Vars};
use evo_eval::pipeline::{self, Candidate, CandidateShape, Evaluator, GateSettings, Verdict};
use evo_eval::Status;
use evo_gpu::Compiler;
use evo_kernels::handwritten;
use serde::Serialize;

use crate::cli::CheckArgs;
use crate::output::{closed_ok, exit_code, outln, print_json, table};
use crate::{setup, UsageError};

#[derive(Serialize)]
struct FileVerdict {
    file: String,
    expected: Option<String>,
    why: Option<String>,
    matched: Option<bool>,
    /// False when the kernel passed every gate this machine could run and the rest
    /// needs a GPU.
    decided: bool,
    /// compute-sanitizer's report, when the sanitizer gate ran.
    sanitizer: Option<evo_eval::profile::SanitizerReport>,
    verdict: Verdict,
    #[serde(skip)]
    candidate: Option<Candidate>,
}

pub fn run(args: &CheckArgs, json: bool) -> Result<ExitCode> {
    if let Some(arch) = &args.arch {
        evo_run::check_arch_flag(arch)?;
    }
    let problem = evo_kernels::problem(&args.problem).ok_or_else(|| {
        let known: Vec<&str> = evo_kernels::problems().iter().map(|p| p.name()).collect();
        UsageError(format!(
            "unknown problem `{}`; known: {known:?}",
            args.problem
        ))
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
                let shape = evo_run::parse_flag_list("--shape", s)?;
                shapes.push(inherit_spec(&c.spec, shape.as_vars()));
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
                .map(|s| Ok(evo_run::parse_flag_list("--shape", s)?.as_vars().clone()))
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
        // A config always has shapes: neither was given.
        crate::usage!(
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

    // With a GPU: its architecture and every gate. Without one: the gates that need none
    // (compile, static, ABI), then exit 3 for the rest.
    let gpu = match evo_gpu::device::probe() {
        Ok(info) if !info.devices.is_empty() => Some(setup::gpus(&args.gpus.gpus)?),
        _ => None,
    };
    let device = gpu
        .as_ref()
        .map(|(g, info)| info.devices[g[0] as usize].clone());
    let mut target = match &device {
        Some(d) => Target::from_arch(&Target::arch_for_capability(
            d.compute_capability.0,
            d.compute_capability.1,
        ))?,
        None => Target::from_arch(
            args.arch
                .as_deref()
                .or(Some(compile.arch.as_str()))
                .filter(|a| *a != "auto")
                .unwrap_or(evo_core::target::DEFAULT_ARCH),
        )?,
    };
    if let Some(d) = &device {
        target.max_smem_per_block = d.max_smem_per_block_optin;
    }
    let arch = target.arch.clone();
    let compiler = Compiler::for_config(&arch, &compile)?;
    let timing_plan = (timing.enabled && !args.no_timing).then(|| timing.clone());
    let gates = GateSettings {
        target,
        static_rules,
        correctness,
        timing: timing_plan,
    };

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
        let tensors: Vec<String> = problem
            .inputs(&complete[0].0)
            .into_iter()
            .chain([problem.output(&complete[0].0)])
            .map(|t| t.name)
            .collect();
        if let Some(bad) = header.contiguous.iter().find(|n| !tensors.contains(n)) {
            bail!(
                "{}: `// evo-contiguous:` names `{bad}`, which is not a tensor of problem `{}` ({tensors:?})",
                file.display(),
                problem.name()
            );
        }
        let mut cshapes = Vec::new();
        for (vars, timed) in &complete {
            let dims = rule
                .eval(vars)
                .map_err(|e| anyhow!("{}: {e}", file.display()))?;
            cshapes.push(CandidateShape {
                vars: vars.clone(),
                launches: vec![dims],
                timed: *timed,
                contend_us: None,
                args: vec![],
                scratch: vec![],
            });
        }
        let candidate = Candidate {
            label: file.display().to_string(),
            source,
            kernels: vec![rule.kernel.clone()],
            shapes: cshapes,
            contiguous: header.contiguous.clone(),
        };
        jobs.push((file.display().to_string(), header, candidate));
    }

    let salt: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let verdicts = match &gpu {
        None => static_only(problem, &compiler, &gates, jobs),
        Some((gpus, _)) => {
            let evaluator = Arc::new(Evaluator::on_gpus(
                problem, compiler, gpus, timeouts, gates,
            )?);
            let mut verdicts = evaluate_all(&evaluator, jobs, salt)?;
            if !args.no_sanitize {
                sanitize_all(problem, &mut verdicts, gpus[0]);
            }
            verdicts
        }
    };

    let printed = if json {
        print_json(&verdicts)
    } else {
        print_human(problem, &verdicts, device.as_ref(), &arch)
    };
    let undecided = verdicts.iter().filter(|v| !v.decided).count();
    if undecided > 0 {
        closed_ok(printed)?;
        return Err(crate::MissingComponent(format!(
            "{undecided} kernel(s) passed compile, static and ABI checks for {arch}; correctness, timing and the sanitizers need a GPU (the CUDA driver sees none here)"
        ))
        .into());
    }
    let ok = verdicts.iter().all(|v| match v.matched {
        Some(m) => m,
        None => v.verdict.status == Status::Evaluated,
    });
    let code = if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    exit_code(printed, code)
}

/// A file's candidate, with what its header says.
type Job = (String, handwritten::Header, Candidate);

fn file_verdict(
    file: String,
    header: handwritten::Header,
    verdict: Verdict,
    decided: bool,
) -> FileVerdict {
    let matched = decided
        .then(|| header.expect.as_ref().map(|e| e == verdict.status.name()))
        .flatten();
    FileVerdict {
        file,
        expected: header.expect,
        why: header.why,
        matched,
        decided,
        sanitizer: None,
        verdict,
        candidate: None,
    }
}

/// The gates that need no GPU: compile, static, ABI. A kernel that passes them is
/// undecided.
fn static_only(
    problem: &'static dyn evo_kernels::Problem,
    compiler: &Compiler,
    gates: &GateSettings,
    jobs: Vec<Job>,
) -> Vec<FileVerdict> {
    jobs.into_iter()
        .map(|(file, header, c)| {
            let mut v = Verdict {
                label: c.label.clone(),
                status: Status::Evaluated,
                gate: None,
                detail: String::new(),
                compile: None,
                static_kernels: vec![],
                result: None,
                seeds: vec![],
            };
            let compiled = match pipeline::compile(compiler, &c) {
                Ok(c) => c,
                Err(e) => {
                    v.status = Status::CompileFailed;
                    v.gate = Some(evo_eval::Gate::Compile);
                    v.detail = e.to_string();
                    return file_verdict(file, header, v, true);
                }
            };
            v.compile = Some(pipeline::CompileSummary {
                key: compiled.key.clone(),
                ms: compiled.compile_ms,
                cached: compiled.cached,
                nvrtc_version: compiled.nvrtc_version.clone(),
                arch: compiled.arch.clone(),
            });
            let sass = pipeline::sass_of(compiler, &compiled);
            match pipeline::static_checks(problem, gates, &c, &compiled, sass.as_ref()) {
                Ok((_, kernels)) => {
                    v.static_kernels = kernels;
                    v.detail =
                        "passed compile, static and ABI checks; correctness and timing need a GPU"
                            .into();
                    file_verdict(file, header, v, false)
                }
                Err(f) => {
                    v.status = f.status;
                    v.gate = Some(f.gate);
                    v.detail = f.detail;
                    file_verdict(file, header, v, true)
                }
            }
        })
        .collect()
}

/// Every gate on every file, as many at a time as there are workers.
fn evaluate_all(evaluator: &Arc<Evaluator>, jobs: Vec<Job>, salt: u64) -> Result<Vec<FileVerdict>> {
    let rt = setup::runtime()?;
    Ok(rt.block_on(async {
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
                    Ok(compiled) => {
                        ev.evaluate(candidate.clone(), compiled, id as u64, salt)
                            .await
                    }
                    Err(e) => Verdict::compile_failed(&candidate.label, e.to_string()),
                };
                let mut fv = file_verdict(file, header, verdict, true);
                fv.candidate = Some(candidate);
                fv
            }));
        }
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.expect("check task"));
        }
        evaluator.pool.shutdown().await;
        out
    }))
}

/// The sanitizer gate on every kernel that passed the others: a finding makes it
/// `incorrect` with the tool's report. Without compute-sanitizer it says so and changes
/// nothing.
fn sanitize_all(
    problem: &'static dyn evo_kernels::Problem,
    verdicts: &mut [FileVerdict],
    gpu: u32,
) {
    let Ok(exe) = std::env::current_exe() else {
        eprintln!("sanitizers skipped: cannot find the evo executable");
        return;
    };
    for v in verdicts.iter_mut() {
        if v.verdict.status != Status::Evaluated {
            continue;
        }
        let Some(c) = &v.candidate else { continue };
        match evo_eval::profile::sanitize(&exe, problem, c, gpu) {
            Err(e) => eprintln!("{}: sanitizers not run: {e}", v.file),
            Ok(report) if report.skipped() => {
                eprintln!("sanitizers skipped: compute-sanitizer was not found (install the CUDA toolkit's compute-sanitizer, or pass --no-sanitize)");
                return;
            }
            Ok(report) => {
                if let Some(finding) = report.finding() {
                    v.verdict.status = Status::Incorrect;
                    v.verdict.gate = Some(evo_eval::Gate::Sanitizer);
                    v.verdict.detail = finding;
                    v.matched = v.expected.as_ref().map(|e| e == v.verdict.status.name());
                }
                v.sanitizer = Some(report);
            }
        }
    }
}

fn print_human(
    problem: &dyn evo_kernels::Problem,
    verdicts: &[FileVerdict],
    device: Option<&evo_gpu::device::DeviceInfo>,
    arch: &str,
) -> Result<()> {
    match device {
        Some(d) => outln!(
            "device: {} (sm_{}{})",
            d.name,
            d.compute_capability.0,
            d.compute_capability.1
        )?,
        None => outln!("device: none (compile, static and ABI checks only, for {arch})")?,
    }
    if verdicts.len() == 1 {
        let f = &verdicts[0];
        let v = &f.verdict;
        outln!("{}", v.label)?;
        let gate = |name: &str, state: String| outln!("  {name:<12} {state}");
        match &v.compile {
            Some(c) if v.status != Status::CompileFailed => gate(
                "compile",
                format!(
                    "ok ({:.0} ms{}, {})",
                    c.ms,
                    if c.cached { ", cached" } else { "" },
                    c.arch
                ),
            )?,
            _ => gate("compile", format!("FAILED\n{}", v.detail))?,
        }
        if v.status == Status::CompileFailed {
            return Ok(());
        }
        if v.status == Status::RejectedStatic {
            gate("static", format!("REJECTED: {}", v.detail))?;
            return Ok(());
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
            )?;
        }
        if !f.decided {
            gate("correctness", "needs a GPU".into())?;
            return Ok(());
        }
        if let Some(r) = &f.sanitizer {
            let counts: Vec<String> = r
                .tools
                .iter()
                .map(|(t, rep)| match rep {
                    evo_eval::profile::ToolReport::Sanitizer { errors, .. } => {
                        format!("{t} {errors}")
                    }
                    _ => format!("{t} ?"),
                })
                .collect();
            gate(
                "sanitizer",
                match r.finding() {
                    None => format!("ok: {} errors ({:.1} s)", counts.join(", "), r.seconds),
                    Some(x) => format!("FINDING: {x}"),
                },
            )?;
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
                )?;
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
                        problem.shape_text(&s.vars),
                        format!("{:.2e}", w.max_abs),
                        s.rel_l2_text(),
                        m,
                        spread,
                        tf,
                        peak,
                    ]);
                }
                outln!("{t}")?;
                gate(
                    "timing",
                    if r.shapes.iter().any(|s| s.timing.is_some()) {
                        "ok".into()
                    } else {
                        "skipped".into()
                    },
                )?;
            }
            status => gate(
                "correctness",
                format!(
                    "{} ({}): {}",
                    status.name().to_uppercase(),
                    v.gate.map(|g| format!("{g:?}")).unwrap_or_default(),
                    v.detail
                ),
            )?,
        }
        return Ok(());
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
            if f.decided {
                f.verdict.status.name().to_string()
            } else {
                "needs GPU".into()
            },
            mark.to_string(),
            detail,
        ]);
    }
    outln!("{t}")?;
    let with = verdicts.iter().filter(|f| f.matched.is_some()).count();
    let matched = verdicts.iter().filter(|f| f.matched == Some(true)).count();
    if with > 0 {
        outln!("{matched} of {with} verdicts as expected")?;
    }
    Ok(())
}
