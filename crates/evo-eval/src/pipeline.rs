//! The gates in order for one candidate: compile, static, then correctness and timing
//! in a worker. The first failure is the verdict.

use std::collections::BTreeMap;

use evo_core::config::{CorrectnessConfig, StaticConfig, TimeoutConfig};
use evo_core::{LaunchDims, Target, Value, Vars};
use evo_gpu::nvrtc::NvrtcError;
use evo_gpu::{CompileRequest, Compiled, Compiler, SassCounts};
use evo_kernels::harness::{ArgSlot, TensorSpec, Tolerance};
use evo_kernels::Problem;
use serde::Serialize;

use crate::pool::{Pool, WorkerCommand};
use crate::protocol::{CorrectnessPlan, Cubin, Job, JobResult, ShapeJob, TimingPlan};
use crate::static_gate::{self, StaticKernel};
use crate::{Gate, Status};

/// One variant to evaluate: its source and how to launch it on each shape.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub label: String,
    pub source: String,
    /// Kernel symbols in launch order.
    pub kernels: Vec<String>,
    pub shapes: Vec<CandidateShape>,
    /// Tensors the variant needs contiguous (a family's `contiguous`).
    pub contiguous: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct CandidateShape {
    /// Complete shape (specialization and run-time variables).
    pub vars: Vars,
    /// Launch geometry per kernel, in `Candidate::kernels` order.
    pub launches: Vec<LaunchDims>,
    pub timed: bool,
    /// Out of contention (µs): the timing of this shape may stop after a few samples once
    /// every one is more than [`crate::timing::CONTENTION_MARGIN`] slower than this (the
    /// slowest elite's median here); `None`: sampled to the timing rule's end.
    pub contend_us: Option<f64>,
    /// Each kernel's own arguments (empty: every kernel gets the problem's ABI).
    pub args: Vec<Vec<ArgSlot>>,
    /// Scratch buffers of the variant on this shape.
    pub scratch: Vec<TensorSpec>,
}

/// Settings of the gates, from a config.
#[derive(Clone, Debug)]
pub struct GateSettings {
    pub target: Target,
    pub static_rules: StaticConfig,
    pub correctness: CorrectnessConfig,
    pub timing: Option<TimingPlan>,
}

/// Compile facts kept with a verdict.
#[derive(Clone, Debug, Serialize)]
pub struct CompileSummary {
    pub key: String,
    pub ms: f64,
    pub cached: bool,
    pub nvrtc_version: String,
    pub arch: String,
}

/// The outcome of every gate a candidate reached.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub label: String,
    pub status: Status,
    pub gate: Option<Gate>,
    pub detail: String,
    pub compile: Option<CompileSummary>,
    pub static_kernels: Vec<StaticKernel>,
    /// Correctness and timing from the worker, when the candidate got that far.
    pub result: Option<JobResult>,
    pub seeds: Vec<u64>,
}

impl Verdict {
    /// The verdict of a candidate NVRTC could not compile: `detail` says why.
    pub fn compile_failed(label: &str, detail: String) -> Verdict {
        Verdict {
            label: label.to_string(),
            status: Status::CompileFailed,
            gate: Some(Gate::Compile),
            detail,
            compile: None,
            static_kernels: vec![],
            result: None,
            seeds: vec![],
        }
    }
}

pub struct Evaluator {
    pub problem: &'static dyn Problem,
    pub compiler: Compiler,
    pub pool: Pool,
    pub gates: GateSettings,
}

impl Evaluator {
    /// The one way to build an evaluator: the gates of `gates` with one worker process per
    /// GPU of `gpus` (this executable's `evo worker --gpu N`), compiling with `compiler`.
    /// Fails only when this executable's path cannot be read.
    pub fn on_gpus(
        problem: &'static dyn Problem,
        compiler: Compiler,
        gpus: &[u32],
        timeouts: TimeoutConfig,
        gates: GateSettings,
    ) -> std::io::Result<Evaluator> {
        let workers = gpus
            .iter()
            .map(|g| Ok((*g, WorkerCommand::evo_worker(*g)?)))
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Evaluator {
            problem,
            compiler,
            pool: Pool::new(workers, timeouts),
            gates,
        })
    }
}

/// Genomes evaluated together draw their inputs from the same seeds, so a reference is
/// computed once per batch: the job ids of 32 consecutive candidates (a default
/// generation; `id` is a candidate's id × 16 + its specialization) and the run's salt give
/// one seed. Each variant still sees every input for the first time (the argument is in
/// ARCHITECTURE.md's invariants).
pub const BATCH_CANDIDATES: u64 = 32;

fn batch_seed(salt: u64, id: u64) -> u64 {
    let batch = (id / 16) / BATCH_CANDIDATES;
    evo_kernels::harness::mix(salt ^ evo_kernels::harness::mix(batch ^ 0xb47c_5eed))
}

/// The seeds of a batch's random trials and timed contents: a function of its seed alone, so
/// a rerun of the run (same salt, same ids) sees the same inputs.
pub fn seeds(batch: u64, count: u32) -> Vec<u64> {
    use evo_kernels::harness::mix;
    (0..count as u64)
        .map(|i| mix(batch ^ mix(0x5eed_0000 + i)))
        .collect()
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Evaluator {
    /// NVRTC (blocking; call it from a blocking thread in async code).
    pub fn compile(&self, c: &Candidate) -> Result<Compiled, NvrtcError> {
        compile(&self.compiler, c)
    }

    /// Error bounds per dtype after config overrides.
    fn tolerances(&self, c: &Candidate) -> Vec<(String, Tolerance)> {
        let mut out: BTreeMap<String, Tolerance> = BTreeMap::new();
        for s in &c.shapes {
            let dtype = s
                .vars
                .get("DTYPE")
                .and_then(Value::as_str)
                .unwrap_or("f16")
                .to_string();
            let mut t = self.problem.tolerance(&s.vars);
            if let Some(o) = self.gates.correctness.tolerance.get(&dtype) {
                t.rtol = o.rtol.unwrap_or(t.rtol);
                t.atol_of_max = o.atol_of_max.unwrap_or(t.atol_of_max);
                t.atol_floor = o.atol_floor.unwrap_or(t.atol_floor);
                t.rel_l2 = o.rel_l2.unwrap_or(t.rel_l2);
            }
            out.insert(dtype, t);
        }
        out.into_iter().collect()
    }

    /// Runs the static gate and, if it passes, the worker's gates.
    /// SASS instruction counts of a compiled candidate (cuobjdump, for the static gate).
    /// CPU work that takes a few hundred ms: callers that hold a GPU slot run it before
    /// taking the slot and pass it to [`Evaluator::evaluate_with_sass`].
    pub fn sass_of(&self, compiled: &Compiled) -> Option<BTreeMap<String, SassCounts>> {
        sass_of(&self.compiler, compiled)
    }

    pub async fn evaluate(&self, c: Candidate, compiled: Compiled, id: u64, salt: u64) -> Verdict {
        let sass = self.sass_of(&compiled);
        self.evaluate_with_sass(c, compiled, sass, id, salt).await
    }

    /// [`Evaluator::evaluate`] with the SASS counts already taken ([`Evaluator::sass_of`]).
    pub async fn evaluate_with_sass(
        &self,
        c: Candidate,
        compiled: Compiled,
        sass: Option<BTreeMap<String, SassCounts>>,
        id: u64,
        salt: u64,
    ) -> Verdict {
        let batch = batch_seed(salt, id);
        let seeds = seeds(batch, self.gates.correctness.random_trials.max(1));
        let mut v = Verdict {
            label: c.label.clone(),
            status: Status::Evaluated,
            gate: None,
            detail: String::new(),
            compile: Some(CompileSummary {
                key: compiled.key.clone(),
                ms: compiled.compile_ms,
                cached: compiled.cached,
                nvrtc_version: compiled.nvrtc_version.clone(),
                arch: compiled.arch.clone(),
            }),
            static_kernels: Vec::new(),
            result: None,
            seeds: seeds.clone(),
        };
        let cubin = match static_checks(self.problem, &self.gates, &c, &compiled, sass.as_ref()) {
            Ok((cubin, kernels)) => {
                v.static_kernels = kernels;
                cubin
            }
            Err(f) => {
                v.status = f.status;
                v.gate = Some(f.gate);
                v.detail = f.detail;
                return v;
            }
        };
        let job = Job {
            id,
            problem: self.problem.name().to_string(),
            label: c.label.clone(),
            cubin: Cubin(cubin),
            kernels: c.kernels.clone(),
            shapes: c
                .shapes
                .iter()
                .map(|s| ShapeJob {
                    vars: s.vars.clone(),
                    launches: s.launches.clone(),
                    timed: s.timed,
                    contend_us: s.contend_us,
                    args: s.args.clone(),
                    scratch: s.scratch.clone(),
                })
                .collect(),
            correctness: CorrectnessPlan {
                seeds,
                adversarial: self.gates.correctness.adversarial,
                repeat_check: self.gates.correctness.repeat_check,
                guard_bytes: self.gates.correctness.guard_bytes,
                tolerance: self.tolerances(&c),
                end_to_end: self.gates.correctness.tolerance.get("end_to_end").copied(),
            },
            timing: self.gates.timing.clone(),
            batch_seed: Some(batch),
            contiguous: c.contiguous.clone(),
        };
        let r = self.pool.evaluate(job).await;
        v.status = r.status;
        v.gate = r.gate.or(match r.status {
            Status::Incorrect => Some(Gate::Correctness),
            Status::Crashed | Status::TimedOut | Status::LaunchFailed => Some(Gate::Correctness),
            _ => None,
        });
        v.detail = r.detail.clone();
        v.result = Some(r);
        v
    }
}

/// A candidate compiled with NVRTC (blocking), under a source name made from its label.
pub fn compile(compiler: &Compiler, c: &Candidate) -> Result<Compiled, NvrtcError> {
    compiler.compile(&CompileRequest {
        name: format!("{}.cu", c.label.replace(['/', ' '], "_")),
        source: c.source.clone(),
    })
}

/// SASS instruction counts of a compiled candidate (cuobjdump), where it can be read.
pub fn sass_of(compiler: &Compiler, compiled: &Compiled) -> Option<BTreeMap<String, SassCounts>> {
    let cubin = compiled.cubin.as_ref().filter(|_| compiled.success)?;
    compiler.sass_counts(cubin).and_then(|r| r.ok())
}

/// Why a candidate failed before any launch.
#[derive(Clone, Debug, PartialEq)]
pub struct StaticFailure {
    pub status: Status,
    pub gate: Gate,
    pub detail: String,
}

/// The gates that need no GPU, in order: the compile result, the static gate (resources,
/// launchability, required opcodes) and the ABI — every kernel's argument list on every
/// shape (its own, or the problem's ABI) against the kernel's `.entry` parameters in the
/// PTX (count, sizes, floats), for families, multi-kernel variants and hand-written
/// kernels alike. Returns the CUBIN and the static record.
pub fn static_checks(
    problem: &dyn Problem,
    gates: &GateSettings,
    c: &Candidate,
    compiled: &Compiled,
    sass: Option<&BTreeMap<String, SassCounts>>,
) -> Result<(Vec<u8>, Vec<StaticKernel>), StaticFailure> {
    let fail = |status, gate, detail: String| StaticFailure {
        status,
        gate,
        detail,
    };
    let Some(cubin) = compiled.cubin.clone().filter(|_| compiled.success) else {
        return Err(fail(
            Status::CompileFailed,
            Gate::Compile,
            last_lines(&compiled.log, 30),
        ));
    };
    let launches: Vec<Vec<(String, LaunchDims)>> = c
        .shapes
        .iter()
        .map(|s| {
            c.kernels
                .iter()
                .cloned()
                .zip(s.launches.iter().copied())
                .collect()
        })
        .collect();
    let kernels = static_gate::check(
        &gates.target,
        &gates.static_rules,
        &compiled.kernels,
        sass,
        &launches,
    )
    .map_err(|why| fail(Status::RejectedStatic, Gate::Static, why))?;
    let Some(ptx) = compiled.ptx.as_deref() else {
        return Err(fail(
            Status::RejectedStatic,
            Gate::Static,
            "the compiler gave no PTX, so the kernels' parameters cannot be checked against the ABI".into(),
        ));
    };
    let params = static_gate::ptx_params(ptx);
    for s in &c.shapes {
        let abi = problem.args(&s.vars);
        let lists: Vec<Vec<ArgSlot>> = if s.args.is_empty() {
            vec![abi; c.kernels.len()]
        } else {
            s.args
                .iter()
                .map(|l| evo_kernels::bind_abi(l, &abi))
                .collect::<Result<_, _>>()
                .map_err(|why| fail(Status::RejectedStatic, Gate::Static, why))?
        };
        static_gate::check_arguments(&params, &c.kernels, &lists).map_err(|why| {
            fail(
                Status::RejectedStatic,
                Gate::Static,
                format!(
                    "{why} (problem `{}`'s ABI: {})",
                    problem.name(),
                    problem.abi().lines().next().unwrap_or("")
                ),
            )
        })?;
    }
    Ok((cubin, kernels))
}

/// The candidates of one genome of a family: one per specialization, each with the
/// configured shapes of that specialization (timed) and its edge shapes (checked only).
pub fn family_candidates(
    family: &evo_kernels::Family,
    space: &evo_core::Space,
    specs: &evo_kernels::Specializations,
    genome: &evo_core::Genome,
    edge_shapes: &[Vars],
) -> Result<Vec<Candidate>, String> {
    let mut out = Vec::new();
    for (spec_index, spec) in specs.specs.iter().enumerate() {
        let source = family
            .render(space, genome, spec_index)
            .map_err(|e| e.to_string())?;
        let vars = space.vars(genome, spec_index).map_err(|e| e.to_string())?;
        let in_spec = |shape: &Vars| spec.iter().all(|(k, v)| shape.get(k) == Some(v));
        let configured = specs
            .shapes
            .iter()
            .filter(|(s, _)| *s == spec_index)
            .map(|(_, v)| (v, true));
        let edges = edge_shapes
            .iter()
            .filter(|v| in_spec(v))
            .map(|v| (v, false));
        let mut shapes = Vec::new();
        for (shape, timed) in configured.chain(edges) {
            let dims = family
                .launch_dims(&vars, shape)
                .map_err(|e| e.to_string())?;
            shapes.push(CandidateShape {
                vars: shape.clone(),
                launches: dims.into_iter().map(|(_, d)| d).collect(),
                timed,
                contend_us: None,
                args: family.launch_args(&vars, shape)?,
                scratch: family.scratch_specs(&vars, shape)?,
            });
        }
        out.push(Candidate {
            label: format!(
                "{}@{}",
                genome.canonical(),
                evo_core::Genome::from_vars(spec.clone()).canonical()
            ),
            source,
            kernels: family.launches.iter().map(|l| l.kernel.clone()).collect(),
            shapes,
            contiguous: family.contiguous.clone(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Candidates of a multi-kernel family carry each kernel's arguments and the scratch
    /// sizes per shape (edge shapes too); a single-kernel family's carry none, so its jobs
    /// are the same as before multi-kernel variants.
    #[test]
    fn family_candidates_carry_per_kernel_arguments_and_scratch() {
        use evo_kernels::{problem, Family, Specializations};
        let templates =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../templates");
        let shape: Vars = [
            ("BATCH", 2.into()),
            ("HEADS", 3.into()),
            ("SEQ_Q", 256.into()),
            ("SEQ_KV", 256.into()),
            ("HEAD_DIM", 64.into()),
        ]
        .into_iter()
        .map(|(k, v): (&str, Value)| (k.to_string(), v))
        .collect();
        for (p, f, multi) in [
            ("sdpa_fwd_fp8_e2e", "sdpa_fwd_fp8_e2e_mma", true),
            ("sdpa_fwd_fp8", "sdpa_fwd_fp8_mma", false),
        ] {
            let problem = problem(p).unwrap();
            let family = Family::load(&templates, p, f).unwrap();
            let shapes = vec![problem.complete_shape(&shape).unwrap()];
            let specs =
                Specializations::new(problem, Target::from_arch("sm_90a").unwrap(), &shapes)
                    .unwrap();
            let space = family.space(specs.contexts()).unwrap();
            let genome = space.iter_valid().next().unwrap();
            let edges = problem.edge_shapes(&shapes);
            let c = family_candidates(&family, &space, &specs, &genome, &edges).unwrap();
            assert_eq!(c.len(), 1);
            assert!(c[0].shapes.len() > 1, "edge shapes too");
            for s in &c[0].shapes {
                if multi {
                    assert_eq!(c[0].kernels.len(), 4);
                    assert_eq!(s.args.len(), 4);
                    assert_eq!(s.launches.len(), 4);
                    assert_eq!(s.scratch.len(), 6);
                    let int = |k: &str| s.vars[k].as_int().unwrap() as usize;
                    let seq_q = int("SEQ_Q");
                    assert_eq!(s.scratch[0].len, int("BATCH") * int("HEADS") * seq_q * 64);
                    assert_eq!(s.scratch[5].len, int("BATCH") * int("HEADS"));
                    assert_eq!(s.args[0][3], ArgSlot::I64(seq_q as i64 * 64));
                } else {
                    assert!(s.args.is_empty() && s.scratch.is_empty());
                }
            }
        }
    }

    #[test]
    fn batches_share_a_seed_within_and_not_across() {
        // Job ids are a candidate's id x 16 + its specialization.
        let job = |candidate: u64, spec: u64| candidate * 16 + spec;
        let first = batch_seed(7, job(0, 0));
        assert_eq!(
            batch_seed(7, job(BATCH_CANDIDATES - 1, 3)),
            first,
            "same batch of candidates"
        );
        assert_ne!(
            batch_seed(7, job(BATCH_CANDIDATES, 0)),
            first,
            "the next batch"
        );
        assert_ne!(batch_seed(8, job(0, 0)), first, "another run");
    }

    #[test]
    fn seeds_are_the_batch_s_and_differ_per_trial() {
        let a = seeds(batch_seed(1, 0), 3);
        assert_eq!(a.len(), 3);
        assert_eq!(
            a,
            seeds(batch_seed(1, 16 * (BATCH_CANDIDATES - 1)), 3),
            "same batch"
        );
        assert_ne!(
            a,
            seeds(batch_seed(1, 16 * BATCH_CANDIDATES), 3),
            "the next batch"
        );
        assert_ne!(a, seeds(batch_seed(2, 0), 3), "another run");
        assert!(a[0] != a[1] && a[1] != a[2]);
    }
}
