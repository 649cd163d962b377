//! The GPU worker: the process that holds one GPU's CUDA context and runs the
//! correctness and timing gates on CUBINs sent by the orchestrator (see `protocol`).
//!
//! A kernel that faults leaves the context unusable, so on a sticky CUDA error the
//! worker answers `crashed` and exits; the orchestrator starts a new one. A kernel that
//! never returns blocks the worker, and the orchestrator's watchdog kills it.
//!
//! * `buffers`: guarded device buffers of a call, argument binding.
//! * `trials`: the correctness trials of a shape (varied calls, adversarial inputs,
//!   poisoned or stale outputs, guards, padding, untouched inputs, a repeat launch).
//! * `timed`: the timing gate, which verifies every replay it times.
//! * `gpu_checks`: the worker's own kernels (fill, compare, byte checks, checksums).
//! * `kept`: references kept for the jobs of a batch, checksummed.

mod buffers;
mod gpu_checks;
mod kept;
mod timed;
mod trials;

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::time::Instant;

use evo_core::{LaunchDims, Vars};
use evo_gpu::runtime::{CudaError, Function, Gpu, KernelArg, Module};
use evo_gpu::{CompileCache, CompileRequest, Compiler};
use evo_kernels::harness::{ArgSlot, Call, ReferenceKernel};
use evo_kernels::Problem;

pub use buffers::{bind_args, tensor_map_spec, CallPointers};
pub use timed::measure;

use crate::protocol::{Job, JobResult, KernelReport, Request, Response, ShapeJob};
use crate::{Gate, Status};

/// Why a job stopped early.
#[derive(Debug)]
enum Stop {
    Cuda(CudaError),
    Check(String),
    /// A time that cannot be a measurement of the work (below the roofline floor).
    Timing(String),
    /// The evaluator itself could not proceed (no reference, reference not finite, ...).
    Setup(String),
}

impl From<CudaError> for Stop {
    fn from(e: CudaError) -> Self {
        Stop::Cuda(e)
    }
}

impl From<gpu_checks::GateError> for Stop {
    fn from(e: gpu_checks::GateError) -> Self {
        match e {
            gpu_checks::GateError::Cuda(e) => Stop::Cuda(e),
            gpu_checks::GateError::Job(why) => Stop::Setup(why),
        }
    }
}

/// Serves requests until `Shutdown`, end of input, or a sticky CUDA error.
pub fn serve(ordinal: i32, input: impl BufRead, mut output: impl Write) -> std::io::Result<()> {
    let gpu = match Gpu::open(ordinal) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("evo worker: cannot open GPU {ordinal}: {e}");
            std::process::exit(3);
        }
    };
    let kept = kept::KeptReferences::new(gpu.info.memory_bytes);
    let mut worker = Worker {
        gpu,
        references: HashMap::new(),
        compiler: None,
        gate: None,
        stages: Stages::default(),
        kept: std::cell::RefCell::new(kept),
        last_job: None,
    };
    let ready = Response::Ready {
        pid: std::process::id(),
        device: Some(worker.gpu.info.clone()),
    };
    writeln!(output, "{}", serde_json::to_string(&ready)?)?;
    output.flush()?;
    for line in input.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let request: Request = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("evo worker: bad request: {e}");
                std::process::exit(2);
            }
        };
        match request {
            Request::Shutdown => break,
            Request::Evaluate(job) => {
                let (result, fatal) = worker.evaluate(&job);
                writeln!(
                    output,
                    "{}",
                    serde_json::to_string(&Response::Result(Box::new(result)))?
                )?;
                output.flush()?;
                if fatal {
                    // The context is dead: leave, so a fresh process takes over.
                    std::process::exit(4);
                }
            }
        }
    }
    Ok(())
}

struct Worker {
    gpu: Gpu,
    /// Compiled reference kernels by entry name.
    references: HashMap<String, (Module, Function)>,
    compiler: Option<Compiler>,
    /// The worker's own check kernels, loaded on first use.
    gate: Option<gpu_checks::GateKernels>,
    /// Time per stage of the job in hand (`JobResult::stages_ms`).
    stages: Stages,
    /// References of the current batch's contents, shared by its jobs.
    kept: std::cell::RefCell<kept::KeptReferences>,
    /// When the previous job began and ended.
    last_job: Option<(Instant, Instant)>,
}

/// A stage being timed (see [`Stages::timer`]).
struct StageTimer<'a> {
    stages: &'a Stages,
    stage: &'static str,
    since: Instant,
}

impl Drop for StageTimer<'_> {
    fn drop(&mut self) {
        self.stages.add(self.stage, self.since);
    }
}

/// Milliseconds per stage, added up over a job.
#[derive(Default)]
struct Stages(std::cell::RefCell<std::collections::BTreeMap<String, f64>>);

impl Stages {
    /// Adds the time since `since` to `stage`.
    fn add(&self, stage: &str, since: Instant) {
        self.add_ms(stage, since.elapsed().as_secs_f64() * 1e3);
    }

    fn add_ms(&self, stage: &str, ms: f64) {
        *self.0.borrow_mut().entry(stage.to_string()).or_default() += ms;
    }

    /// The time counted so far against `stages`.
    fn sum_of(&self, stages: &[&str]) -> f64 {
        let map = self.0.borrow();
        stages.iter().filter_map(|s| map.get(*s)).sum()
    }

    /// Counts the time until the returned timer is dropped against `stage`.
    fn timer<'a>(&'a self, stage: &'static str) -> StageTimer<'a> {
        StageTimer {
            stages: self,
            stage,
            since: Instant::now(),
        }
    }

    fn take(&self) -> std::collections::BTreeMap<String, f64> {
        std::mem::take(&mut *self.0.borrow_mut())
    }
}

/// Each kernel's argument list for one call of a shape: its own where the job gives them
/// (the problem's arguments in them bound to this call), else the call's ABI for every
/// kernel.
fn argument_lists(
    problem: &dyn Problem,
    shape: &ShapeJob,
    call: &Call,
    kernels: usize,
) -> Result<Vec<Vec<ArgSlot>>, Stop> {
    let abi = problem.call_args(&shape.vars, call);
    if shape.args.is_empty() {
        return Ok(vec![abi; kernels]);
    }
    if shape.args.len() != kernels || shape.launches.len() != kernels {
        return Err(Stop::Setup(format!(
            "the job has {kernels} kernels but {} argument lists and {} launches for {}",
            shape.args.len(),
            shape.launches.len(),
            describe(&shape.vars)
        )));
    }
    shape
        .args
        .iter()
        .map(|l| evo_kernels::bind_abi(l, &abi).map_err(Stop::Setup))
        .collect()
}

/// Launches a variant's kernels in order on `gpu`'s stream, kernel i with `args[i]`.
fn launch_sequence(
    gpu: &Gpu,
    functions: &[Function],
    launches: &[LaunchDims],
    args: &[Vec<KernelArg>],
) -> Result<(), CudaError> {
    for ((f, dims), a) in functions.iter().zip(launches).zip(args) {
        gpu.launch(f, dims, a)?;
    }
    Ok(())
}

fn describe(vars: &Vars) -> String {
    vars.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl Worker {
    fn evaluate(&mut self, job: &Job) -> (JobResult, bool) {
        let start = Instant::now();
        let mut result = JobResult::failed(job.id, Status::Evaluated, None, "");
        self.stages.take();
        self.kept.get_mut().start_job(job.batch_seed);
        let outcome = self
            .run_job(job, start, &mut result)
            .and_then(|()| self.kept_unchanged());
        self.last_job = Some((start, Instant::now()));
        result.elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
        result.stages_ms = self.stages.take();
        let fatal = match outcome {
            Ok(()) => {
                result.status = Status::Evaluated;
                result.detail = format!("correct on {} shapes", result.shapes.len());
                false
            }
            Err(Stop::Check(detail)) => {
                result.status = Status::Incorrect;
                result.gate = Some(Gate::Correctness);
                result.detail = detail;
                false
            }
            Err(Stop::Timing(detail)) => {
                result.status = Status::Incorrect;
                result.gate = Some(Gate::Timing);
                result.detail = detail;
                false
            }
            Err(Stop::Setup(detail)) => {
                result.status = Status::LaunchFailed;
                result.detail = format!("evaluator could not check this variant: {detail}");
                false
            }
            Err(Stop::Cuda(e)) => {
                let sticky = e.is_sticky();
                result.status = if sticky {
                    Status::Crashed
                } else {
                    Status::LaunchFailed
                };
                result.detail = e.to_string();
                sticky
            }
        };
        (result, fatal)
    }

    /// After a job that passed: the references kept for the batch hold what they held (only
    /// this job's variant ran since the last look), else the variant wrote into them.
    fn kept_unchanged(&mut self) -> Result<(), Stop> {
        let Some(gate) = self.gate.as_ref() else {
            return Ok(());
        };
        let changed = self.kept.get_mut().changed(&self.gpu, gate)?;
        match changed.first() {
            None => Ok(()),
            Some(_) => Err(Stop::Check(format!(
                "wrote outside its buffers: {} reference output(s) the evaluator keeps for this batch changed during its launches",
                changed.len()
            ))),
        }
    }

    fn run_job(&mut self, job: &Job, started: Instant, result: &mut JobResult) -> Result<(), Stop> {
        let problem = evo_kernels::problem(&job.problem)
            .ok_or_else(|| Stop::Setup(format!("unknown problem `{}`", job.problem)))?;
        let load = Instant::now();
        let module = self.gpu.load_module(&job.cubin.0)?;
        let mut functions = Vec::new();
        for name in &job.kernels {
            let f = module.function(name)?;
            // A kernel launched several times in a call (the FP8 quantizer on q, k, v) is
            // one function: its dynamic shared memory limit covers every one of its launches.
            let same: Vec<usize> = (0..job.kernels.len())
                .filter(|&j| job.kernels[j] == *name)
                .collect();
            let dims = || {
                job.shapes
                    .iter()
                    .flat_map(|s| same.iter().filter_map(|&j| s.launches.get(j)))
            };
            let dyn_smem = dims().map(|d| d.shared_bytes).max().unwrap_or(0);
            let threads = dims().map(|d| d.threads_per_block()).max().unwrap_or(1);
            f.set_max_dynamic_smem(dyn_smem)?;
            let attributes = f.attributes()?;
            let blocks_per_sm = f.occupancy(threads, dyn_smem)?;
            // One report per kernel, however often it is launched.
            if !result.kernels.iter().any(|k| k.name == *name) {
                result.kernels.push(KernelReport {
                    name: name.clone(),
                    attributes,
                    blocks_per_sm,
                });
            }
            if blocks_per_sm == 0 {
                return Err(Stop::Cuda(CudaError {
                    call: "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                    code: -1,
                    name: "NOT_LAUNCHABLE".into(),
                    description: format!("`{name}` fits 0 blocks per multiprocessor with {threads} threads and {dyn_smem} bytes of dynamic shared memory"),
                }));
            }
            functions.push(f);
        }
        self.stages.add("load", load);
        let checks = Instant::now();
        for shape in &job.shapes {
            let began = Instant::now();
            let mut r = self.check_shape(job, problem, &functions, shape)?;
            r.check_ms = began.elapsed().as_secs_f64() * 1e3;
            result.shapes.push(r);
        }
        result.check_ms = checks.elapsed().as_secs_f64() * 1e3;
        let timings = Instant::now();
        if let Some(plan) = &job.timing {
            // The job's first timed shape warms the GPU up for `warmup_ms`, unless this
            // worker's previous job lasted at least `warmup_ms` and ended less than
            // `warmup_ms` ago (the GPU has been busy since: its checks ran, then this job's);
            // the shapes after it follow on a GPU that has been running this module since,
            // so one pass over their sets (and the graph's untimed upload replay) is their
            // warm-up.
            let ms = |from: Instant, to: Instant| to.duration_since(from).as_secs_f64() * 1e3;
            let busy = self.last_job.is_some_and(|(began, ended)| {
                ms(began, ended) >= plan.warmup_ms && ms(ended, started) < plan.warmup_ms
            });
            let mut warmup_ms = if busy { 0.0 } else { plan.warmup_ms };
            for (i, shape) in job.shapes.iter().enumerate() {
                if shape.timed {
                    let t = self.time_shape(job, problem, &functions, shape, plan, warmup_ms)?;
                    result.shapes[i].timing = Some(t);
                    warmup_ms = 0.0;
                }
            }
        }
        result.timing_ms = timings.elapsed().as_secs_f64() * 1e3;
        Ok(())
    }

    /// A compiler for the worker's own kernels (references, checks), made on first use.
    fn compiler(&mut self) -> Result<&Compiler, Stop> {
        if self.compiler.is_none() {
            let (major, minor) = self.gpu.info.compute_capability;
            let arch = evo_core::Target::arch_for_capability(major, minor);
            let cache = CompileCache::new(CompileCache::default_dir());
            self.compiler = Some(
                Compiler::new(&arch, &["-std=c++17".to_string()], 0, Some(cache)).map_err(|e| {
                    Stop::Setup(format!("cannot compile the worker's kernels: {e}"))
                })?,
            );
        }
        Ok(self.compiler.as_ref().expect("set above"))
    }

    fn cubin_of(&mut self, name: &str, source: &str) -> Result<Vec<u8>, Stop> {
        let compiled = self
            .compiler()?
            .compile(&CompileRequest {
                name: name.to_string(),
                source: source.to_string(),
            })
            .map_err(|e| Stop::Setup(format!("cannot compile {name}: {e}")))?;
        compiled
            .cubin
            .filter(|_| compiled.success)
            .ok_or_else(|| Stop::Setup(format!("{name} does not compile:\n{}", compiled.log)))
    }

    /// The problem's reference kernel for `call`, compiled and loaded once (by entry name).
    fn reference(
        &mut self,
        problem: &dyn Problem,
        vars: &Vars,
        call: &Call,
    ) -> Result<ReferenceKernel, Stop> {
        let reference = problem.reference(vars, call).ok_or_else(|| {
            Stop::Setup(format!(
                "problem `{}` has no GPU reference kernel yet",
                problem.name()
            ))
        })?;
        self.load_reference(problem, &reference)?;
        Ok(reference)
    }

    fn load_reference(
        &mut self,
        problem: &dyn Problem,
        reference: &ReferenceKernel,
    ) -> Result<(), Stop> {
        if !self.references.contains_key(&reference.entry) {
            let cubin = self.cubin_of(
                &format!("{}_reference.cu", problem.name()),
                reference.source,
            )?;
            let module = self.gpu.load_module(&cubin)?;
            let function = module.function(&reference.entry)?;
            self.references
                .insert(reference.entry.clone(), (module, function));
        }
        Ok(())
    }

    /// The worker's check kernels, compiled and loaded once.
    fn gate_kernels(&mut self) -> Result<&gpu_checks::GateKernels, Stop> {
        if self.gate.is_none() {
            let cubin = self.cubin_of("evo_gate_kernels.cu", gpu_checks::SOURCE)?;
            self.gate = Some(gpu_checks::GateKernels::load(&self.gpu, &cubin)?);
        }
        Ok(self.gate.as_ref().expect("set above"))
    }

    /// The check kernels, once [`Worker::gate_kernels`] has loaded them (at the start of
    /// every check).
    fn gate(&self) -> &gpu_checks::GateKernels {
        self.gate
            .as_ref()
            .expect("gate kernels are loaded before any check")
    }

    /// Launches a reference kernel with inputs at `inputs` and its float32 output at
    /// `output` (queued, no wait).
    fn launch_reference(
        &self,
        reference: &ReferenceKernel,
        inputs: &[u64],
        output: u64,
    ) -> Result<(), Stop> {
        let args = bind_args(
            &reference.args,
            &CallPointers {
                inputs,
                output,
                scratch: &[],
            },
        )
        .map_err(Stop::Setup)?;
        let (_, f) = &self.references[&reference.entry];
        self.gpu.launch(f, &reference.launch, &args)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use evo_kernels::harness::{ElemType, TensorSpec};

    fn shape_job(args: Vec<Vec<ArgSlot>>, kernels: usize) -> ShapeJob {
        let vars = evo_kernels::problem("gemm")
            .unwrap()
            .complete_shape(
                &[("M", 4), ("N", 8), ("K", 16)]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.into()))
                    .collect(),
            )
            .unwrap();
        ShapeJob {
            vars,
            launches: vec![
                LaunchDims {
                    grid: [1, 1, 1],
                    block: [32, 1, 1],
                    shared_bytes: 0,
                };
                kernels
            ],
            timed: true,
            contend_us: None,
            args,
            scratch: vec![TensorSpec {
                name: "s".into(),
                elem: ElemType::F32,
                len: 64,
            }],
        }
    }

    #[test]
    fn each_kernel_binds_its_own_buffers() {
        let p = CallPointers {
            inputs: &[0x1000, 0x2000],
            output: 0x3000 + 64,
            scratch: &[0x4000, 0x5000],
        };
        let args = bind_args(
            &[
                ArgSlot::Input(1),
                ArgSlot::Scratch(1),
                ArgSlot::Output,
                ArgSlot::Scratch(0),
                ArgSlot::Input(0),
                ArgSlot::I32(-7),
                ArgSlot::I64(1 << 40),
                ArgSlot::F32(0.5),
            ],
            &p,
        )
        .unwrap();
        assert_eq!(
            args,
            vec![
                KernelArg::Ptr(0x2000),
                KernelArg::Ptr(0x5000),
                KernelArg::Ptr(0x3040),
                KernelArg::Ptr(0x4000),
                KernelArg::Ptr(0x1000),
                KernelArg::I32(-7),
                KernelArg::I64(1 << 40),
                KernelArg::F32(0.5),
            ]
        );
        let e = bind_args(&[ArgSlot::Scratch(2)], &p).unwrap_err();
        assert!(e.contains("scratch 2") && e.contains("2 scratch"), "{e}");
        let e = bind_args(&[ArgSlot::Input(5)], &p).unwrap_err();
        assert!(e.contains("input 5"), "{e}");
        let e = bind_args(&[ArgSlot::Abi(0)], &p).unwrap_err();
        assert!(e.contains("not bound"), "{e}");
        // A tensor map finds its buffer among the kind it names (encoding it needs a
        // driver; an index past the call's buffers of that kind is refused before).
        let mut map =
            evo_kernels::harness::TensorMapSlot::matrix(0, ElemType::E4m3, 8, 64, 64, 8, 64, 64);
        map.of = evo_kernels::harness::MappedBuffer::Scratch;
        map.buffer = 2;
        let e = bind_args(&[ArgSlot::TensorMap(map)], &p).unwrap_err();
        assert!(e.contains("scratch 2") && e.contains("2 scratch"), "{e}");
        map.of = evo_kernels::harness::MappedBuffer::Input;
        let e = bind_args(&[ArgSlot::TensorMap(map)], &p).unwrap_err();
        assert!(e.contains("input 2") && e.contains("2 input"), "{e}");
        // A map whose strides come from the call is refused until they are bound.
        map.buffer = 0;
        map.stride_abi[0] = Some(7);
        let e = bind_args(&[ArgSlot::TensorMap(map)], &p).unwrap_err();
        assert!(e.contains("not bound"), "{e}");
    }

    #[test]
    fn kernels_without_their_own_lists_get_the_calls_abi() {
        let gemm = evo_kernels::problem("gemm").unwrap();
        let s = shape_job(vec![], 2);
        let plain = gemm.default_call(&s.vars);
        let lists = argument_lists(gemm, &s, &plain, 2).unwrap();
        assert_eq!(lists, vec![gemm.args(&s.vars); 2]);
        // Another call: its own row strides.
        let varied = (0..16)
            .map(|seed| gemm.varied_call(&s.vars, seed, &[]))
            .find(|c| c.layouts != plain.layouts)
            .unwrap();
        let lists = argument_lists(gemm, &s, &varied, 1).unwrap();
        assert_eq!(lists[0], gemm.call_args(&s.vars, &varied));
        assert_ne!(lists[0], gemm.args(&s.vars));
        // Own lists: the ABI arguments in them are the call's.
        let own = vec![
            vec![ArgSlot::Input(0), ArgSlot::Scratch(0)],
            vec![ArgSlot::Scratch(0), ArgSlot::Output, ArgSlot::Abi(8)],
        ];
        let s = shape_job(own.clone(), 2);
        let bound = argument_lists(gemm, &s, &varied, 2).unwrap();
        assert_eq!(bound[0], own[0]);
        assert_eq!(bound[1][2], gemm.call_args(&s.vars, &varied)[8]);
        // A job whose lists do not match its kernels is refused, not launched.
        let s = shape_job(own, 3);
        let Err(Stop::Setup(why)) = argument_lists(gemm, &s, &plain, 3) else {
            panic!("accepted a job with 3 kernels and 2 argument lists")
        };
        assert!(why.contains("3 kernels but 2 argument lists"), "{why}");
    }
}
