//! The GPU worker: the process that holds one GPU's CUDA context and runs the
//! correctness and timing gates on CUBINs sent by the orchestrator (see `protocol`).
//!
//! A kernel that faults leaves the context unusable, so on a sticky CUDA error the
//! worker answers `crashed` and exits; the orchestrator starts a new one. A kernel that
//! never returns blocks the worker, and the orchestrator's watchdog kills it.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::time::Instant;

use evo_core::{LaunchDims, Value, Vars};
use evo_gpu::runtime::{CudaError, DeviceBuffer, Function, Gpu, KernelArg, Module};
use evo_gpu::{CompileCache, CompileRequest, Compiler};
use evo_kernels::harness::{ArgSlot, HostTensor, InputKind, TensorSpec, Tolerance};
use evo_kernels::Problem;

use crate::compare;
use crate::protocol::{
    CheckFailure, Job, JobResult, KernelReport, Request, Response, ShapeJob, ShapeResult,
    TimingPlan, TimingReport, TrialReport,
};
use crate::timing;
use crate::{Gate, Status};

/// Why a job stopped early.
#[derive(Debug)]
enum Stop {
    Cuda(CudaError),
    Check(String),
    /// The evaluator itself could not proceed (no reference, reference not finite, ...).
    Setup(String),
}

impl From<CudaError> for Stop {
    fn from(e: CudaError) -> Self {
        Stop::Cuda(e)
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
    let mut worker = Worker {
        gpu,
        references: HashMap::new(),
        compiler: None,
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

/// Times `launch` (one call on input set `set`) by the method of [`crate::timing`]:
/// warm-up, then replays of a CUDA graph of R calls rotating over `sets` input sets,
/// each replay timed with CUDA events. Returns per-call times in µs and R.
pub fn measure(
    gpu: &Gpu,
    plan: &TimingPlan,
    sets: usize,
    launch: impl Fn(&Gpu, usize) -> Result<(), CudaError>,
) -> Result<(Vec<f64>, usize), CudaError> {
    let sets = sets.max(1);
    let warm = Instant::now();
    let mut warm_launches = 0usize;
    loop {
        for set in 0..sets {
            launch(gpu, set)?;
        }
        gpu.synchronize()?;
        warm_launches += sets;
        if warm.elapsed().as_secs_f64() * 1e3 >= plan.warmup_ms {
            break;
        }
    }
    // Host-side estimate (includes launch gaps), only to size the graph.
    let est_ms = warm.elapsed().as_secs_f64() * 1e3 / warm_launches as f64;
    let per_graph = ((plan.sample_ms / est_ms.max(1e-4)).ceil() as usize).clamp(sets, 20_000);
    let per_graph = per_graph.div_ceil(sets) * sets;
    let graph = gpu.capture(|g| {
        for r in 0..per_graph {
            launch(g, r % sets)?;
        }
        Ok(())
    })?;
    let (start, end) = (gpu.event()?, gpu.event()?);
    // One untimed replay: the first launch of a graph pays its upload.
    gpu.launch_graph(&graph)?;
    gpu.synchronize()?;
    let mut samples = Vec::new();
    let begun = Instant::now();
    loop {
        gpu.record(&start)?;
        gpu.launch_graph(&graph)?;
        gpu.record(&end)?;
        end.synchronize()?;
        samples.push(start.elapsed_ms(&end)? as f64 * 1e3 / per_graph as f64);
        if timing::settled(&samples, plan) || begun.elapsed().as_secs_f64() * 1e3 > plan.budget_ms {
            break;
        }
    }
    Ok((samples, per_graph))
}

struct Worker {
    gpu: Gpu,
    /// Compiled reference kernels by entry name.
    references: HashMap<String, (Module, Function)>,
    compiler: Option<Compiler>,
}

/// Device buffers of one call: inputs, the guarded output and the variant's scratch.
struct CallBuffers {
    inputs: Vec<DeviceBuffer>,
    output: DeviceBuffer,
    guard: usize,
    scratch: Vec<DeviceBuffer>,
}

impl CallBuffers {
    fn pointers(&self) -> (Vec<u64>, u64, Vec<u64>) {
        (
            self.inputs.iter().map(DeviceBuffer::ptr).collect(),
            self.output.ptr() + self.guard as u64,
            self.scratch.iter().map(DeviceBuffer::ptr).collect(),
        )
    }

    fn args(&self, slots: &[ArgSlot]) -> Result<Vec<KernelArg>, Stop> {
        let (inputs, output, scratch) = self.pointers();
        bind_args(
            slots,
            &CallPointers {
                inputs: &inputs,
                output,
                scratch: &scratch,
            },
        )
        .map_err(Stop::Setup)
    }

    /// Each kernel's arguments: its own list, else the problem's ABI.
    fn kernel_args(&self, lists: &[Vec<ArgSlot>]) -> Result<Vec<Vec<KernelArg>>, Stop> {
        lists.iter().map(|l| self.args(l)).collect()
    }

    /// Fills every scratch buffer with 0xFF bytes: NaN in f16, bf16, f32 and e4m3, so a
    /// kernel that reads scratch no earlier kernel wrote yields NaN.
    fn poison_scratch(&self, gpu: &Gpu) -> Result<(), CudaError> {
        for b in &self.scratch {
            gpu.memset_u8(b, 0xff)?;
        }
        Ok(())
    }
}

/// Device addresses of one call's buffers, for [`bind_args`].
pub struct CallPointers<'a> {
    pub inputs: &'a [u64],
    /// The output's first element (after any guard region).
    pub output: u64,
    pub scratch: &'a [u64],
}

/// An argument list with its tensors bound to device addresses; an index past the
/// buffers of the call is an error (a job whose arguments do not match its problem).
pub fn bind_args(slots: &[ArgSlot], p: &CallPointers) -> Result<Vec<KernelArg>, String> {
    let ptr = |what: &str, list: &[u64], i: usize| {
        list.get(i).copied().map(KernelArg::Ptr).ok_or_else(|| {
            format!(
                "argument names {what} {i}, but the call has {} {what} buffers",
                list.len()
            )
        })
    };
    slots
        .iter()
        .map(|s| match *s {
            ArgSlot::Input(i) => ptr("input", p.inputs, i),
            ArgSlot::Output => Ok(KernelArg::Ptr(p.output)),
            ArgSlot::Scratch(i) => ptr("scratch", p.scratch, i),
            ArgSlot::I32(v) => Ok(KernelArg::I32(v)),
            ArgSlot::I64(v) => Ok(KernelArg::I64(v)),
            ArgSlot::F32(v) => Ok(KernelArg::F32(v)),
            ArgSlot::TensorMap(m) => {
                let address = p.inputs.get(m.input).copied().ok_or_else(|| {
                    format!(
                        "tensor map names input {}, but the call has {} input buffers",
                        m.input,
                        p.inputs.len()
                    )
                })?;
                tensor_map_spec(&m, address)
                    .and_then(|spec| evo_gpu::runtime::encode_tensor_map_tiled(&spec))
                    .map(KernelArg::TensorMap)
                    .map_err(|e| format!("tensor map over input {}: {e}", m.input))
            }
        })
        .collect()
}

/// The evo-gpu description of a problem's tensor-map slot at a device address.
pub fn tensor_map_spec(
    m: &evo_kernels::harness::TensorMapSlot,
    address: u64,
) -> Result<evo_gpu::tensor_map::TiledSpec, evo_gpu::tensor_map::TensorMapError> {
    use evo_gpu::tensor_map::{Swizzle, TensorDtype, TiledSpec};
    use evo_kernels::harness::ElemType;
    let rank = m.rank as usize;
    let dtype = match m.elem {
        ElemType::F16 => TensorDtype::F16,
        ElemType::Bf16 => TensorDtype::Bf16,
        ElemType::F32 => TensorDtype::F32,
        ElemType::E4m3 | ElemType::U8 => TensorDtype::U8,
    };
    Ok(TiledSpec {
        dtype,
        address,
        dims: m.dims.iter().take(rank).copied().collect(),
        strides_bytes: m
            .strides_bytes
            .iter()
            .take(rank.saturating_sub(1))
            .copied()
            .collect(),
        box_dims: m.box_dims.iter().take(rank).copied().collect(),
        swizzle: Swizzle::from_bytes(m.swizzle_bytes)?,
    })
}

/// Each kernel's argument list for one shape: its own where the job gives them, else
/// the problem's ABI for every kernel.
fn argument_lists(
    problem: &dyn Problem,
    shape: &ShapeJob,
    kernels: usize,
) -> Result<Vec<Vec<ArgSlot>>, Stop> {
    if shape.args.is_empty() {
        return Ok(vec![problem.args(&shape.vars); kernels]);
    }
    if shape.args.len() != kernels || shape.launches.len() != kernels {
        return Err(Stop::Setup(format!(
            "the job has {kernels} kernels but {} argument lists and {} launches for {}",
            shape.args.len(),
            shape.launches.len(),
            describe(&shape.vars)
        )));
    }
    Ok(shape.args.clone())
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
        let outcome = self.run_job(job, &mut result);
        result.elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
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

    fn run_job(&mut self, job: &Job, result: &mut JobResult) -> Result<(), Stop> {
        let problem = evo_kernels::problem(&job.problem)
            .ok_or_else(|| Stop::Setup(format!("unknown problem `{}`", job.problem)))?;
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
            for (i, shape) in job.shapes.iter().enumerate() {
                if shape.timed {
                    let t = self.time_shape(job, problem, &functions, shape, plan)?;
                    result.shapes[i].timing = Some(t);
                }
            }
        }
        result.timing_ms = timings.elapsed().as_secs_f64() * 1e3;
        Ok(())
    }

    fn reference(
        &mut self,
        problem: &dyn Problem,
        vars: &Vars,
    ) -> Result<(evo_kernels::harness::ReferenceKernel, usize), Stop> {
        let reference = problem.reference(vars).ok_or_else(|| {
            Stop::Setup(format!(
                "problem `{}` has no GPU reference kernel yet",
                problem.name()
            ))
        })?;
        self.load_reference(problem, &reference)?;
        Ok((reference, 0))
    }

    /// Compiles and loads a reference kernel once (by entry name).
    fn load_reference(
        &mut self,
        problem: &dyn Problem,
        reference: &evo_kernels::harness::ReferenceKernel,
    ) -> Result<(), Stop> {
        if !self.references.contains_key(&reference.entry) {
            if self.compiler.is_none() {
                let (major, minor) = self.gpu.info.compute_capability;
                let arch = evo_core::Target::arch_for_capability(major, minor);
                let cache = CompileCache::new(CompileCache::default_dir());
                self.compiler = Some(
                    Compiler::new(&arch, &["-std=c++17".to_string()], 0, Some(cache))
                        .map_err(|e| Stop::Setup(format!("cannot compile the reference: {e}")))?,
                );
            }
            let compiled = self
                .compiler
                .as_ref()
                .expect("set above")
                .compile(&CompileRequest {
                    name: format!("{}_reference.cu", problem.name()),
                    source: reference.source.to_string(),
                })
                .map_err(|e| Stop::Setup(format!("cannot compile the reference: {e}")))?;
            let cubin = compiled.cubin.filter(|_| compiled.success).ok_or_else(|| {
                Stop::Setup(format!(
                    "the reference kernel does not compile:\n{}",
                    compiled.log
                ))
            })?;
            let module = self.gpu.load_module(&cubin)?;
            let function = module.function(&reference.entry)?;
            self.references
                .insert(reference.entry.clone(), (module, function));
        }
        Ok(())
    }

    /// The float32 output of a reference kernel on `inputs` (uploaded to `buffers`),
    /// written to `out`; refuses a non-finite reference.
    fn run_reference(
        &self,
        reference: &evo_kernels::harness::ReferenceKernel,
        buffers: &[DeviceBuffer],
        out: &DeviceBuffer,
        what: &str,
    ) -> Result<Vec<f32>, Stop> {
        let inputs: Vec<u64> = buffers.iter().map(DeviceBuffer::ptr).collect();
        let args = bind_args(
            &reference.args,
            &CallPointers {
                inputs: &inputs,
                output: out.ptr(),
                scratch: &[],
            },
        )
        .map_err(Stop::Setup)?;
        let (_, f) = &self.references[&reference.entry];
        self.gpu.launch(f, &reference.launch, &args)?;
        self.gpu.synchronize()?;
        let values: Vec<f32> = self
            .gpu
            .download(out)?
            .chunks(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(Stop::Setup(format!(
                "the reference output is not finite at {i} for {what}"
            )));
        }
        Ok(values)
    }

    fn alloc_call(
        &self,
        problem: &dyn Problem,
        vars: &Vars,
        guard: usize,
        scratch: &[TensorSpec],
    ) -> Result<CallBuffers, CudaError> {
        let inputs = problem
            .inputs(vars)
            .iter()
            .map(|t| self.gpu.alloc(t.len * t.elem.size()))
            .collect::<Result<Vec<_>, _>>()?;
        let out = problem.output(vars);
        let output = self.gpu.alloc(2 * guard + out.len * out.elem.size())?;
        let scratch = scratch
            .iter()
            .map(|t| self.gpu.alloc(t.len * t.elem.size()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CallBuffers {
            inputs,
            output,
            guard,
            scratch,
        })
    }

    /// One call of the variant: every kernel in order on the worker's stream, each with
    /// its own arguments.
    fn launch_all(
        &self,
        functions: &[Function],
        launches: &[LaunchDims],
        args: &[Vec<KernelArg>],
    ) -> Result<(), CudaError> {
        launch_sequence(&self.gpu, functions, launches, args)
    }

    fn check_shape(
        &mut self,
        job: &Job,
        problem: &dyn Problem,
        functions: &[Function],
        shape: &ShapeJob,
    ) -> Result<ShapeResult, Stop> {
        let (vars, launches) = (&shape.vars, &shape.launches[..]);
        let arg_lists = argument_lists(problem, shape, functions.len())?;
        let plan = &job.correctness;
        let out_spec = problem.output(vars);
        let dtype = vars
            .get("DTYPE")
            .and_then(Value::as_str)
            .unwrap_or("f16")
            .to_string();
        let tol: Tolerance = plan
            .tolerance
            .iter()
            .find(|(d, _)| *d == dtype)
            .map(|(_, t)| *t)
            .unwrap_or_else(|| problem.tolerance(vars));
        let (reference, _) = self.reference(problem, vars)?;
        let cand = self.alloc_call(problem, vars, plan.guard_bytes, &shape.scratch)?;
        let refb = self.alloc_call(problem, vars, 0, &[])?;
        // The reference writes float32.
        let ref_out = self.gpu.alloc(out_spec.len * 4)?;
        let mut ref_args = refb.args(&reference.args)?;
        for (slot, arg) in reference.args.iter().zip(ref_args.iter_mut()) {
            if *slot == ArgSlot::Output {
                *arg = KernelArg::Ptr(ref_out.ptr());
            }
        }
        let cand_args = cand.kernel_args(&arg_lists)?;
        let input_names: Vec<String> = problem.inputs(vars).into_iter().map(|t| t.name).collect();

        let mut trials: Vec<(InputKind, u64)> =
            plan.seeds.iter().map(|s| (InputKind::Random, *s)).collect();
        if plan.adversarial {
            let base = plan.seeds.first().copied().unwrap_or(0);
            trials.extend(
                InputKind::ADVERSARIAL
                    .iter()
                    .enumerate()
                    .map(|(i, k)| (*k, base ^ (0xad00 + i as u64))),
            );
        }
        let poison = compare::poisoned_output(out_spec.elem, out_spec.len, plan.guard_bytes);
        let mut reports = Vec::new();
        for (t, (kind, seed)) in trials.iter().enumerate() {
            let host = problem.generate(vars, *kind, *seed);
            for ((h, c), r) in host.iter().zip(&cand.inputs).zip(&refb.inputs) {
                self.gpu.upload(c, &h.bytes)?;
                self.gpu.upload(r, &h.bytes)?;
            }
            // Reference.
            let (_, ref_fn) = &self.references[&reference.entry];
            self.gpu.launch(ref_fn, &reference.launch, &ref_args)?;
            self.gpu.synchronize()?;
            let ref_bytes = self.gpu.download(&ref_out)?;
            let ref_values: Vec<f32> = ref_bytes
                .chunks(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            if let Some(i) = ref_values.iter().position(|v| !v.is_finite()) {
                return Err(Stop::Setup(format!(
                    "the reference output is not finite at {i} for {kind:?} inputs on {}",
                    describe(vars)
                )));
            }
            // Candidate, on a poisoned output.
            self.gpu.upload(&cand.output, &poison)?;
            cand.poison_scratch(&self.gpu)?;
            self.launch_all(functions, launches, &cand_args)?;
            self.gpu.synchronize()?;
            let first = self.gpu.download(&cand.output)?;
            let got = HostTensor {
                elem: out_spec.elem,
                bytes: compare::output_part(&first, plan.guard_bytes).to_vec(),
            };
            let stats = compare::compare(&got, &ref_values, &tol);
            let mut failure = compare::check_guards(&first, plan.guard_bytes);
            if failure.is_none() {
                for (i, buf) in cand.inputs.iter().enumerate() {
                    if self.gpu.download(buf)? != host[i].bytes {
                        failure = Some(CheckFailure::InputModified {
                            input: input_names[i].clone(),
                        });
                        break;
                    }
                }
            }
            if failure.is_none() {
                failure = compare::verdict(&stats, &tol);
            }
            // Encoded inputs (FP8): the error against the exact answer on the originals.
            let mut end_to_end = None;
            if failure.is_none() {
                if let Some(e2e) = problem.end_to_end(vars, *kind, *seed) {
                    self.load_reference(problem, &e2e.reference)?;
                    let buffers = e2e
                        .inputs
                        .iter()
                        .map(|h| {
                            let b = self.gpu.alloc(h.bytes.len())?;
                            self.gpu.upload(&b, &h.bytes)?;
                            Ok(b)
                        })
                        .collect::<Result<Vec<_>, CudaError>>()?;
                    let exact = self.run_reference(
                        &e2e.reference,
                        &buffers,
                        &ref_out,
                        &format!("{kind:?} original inputs on {}", describe(vars)),
                    )?;
                    let mut e_tol = e2e.tolerance;
                    if let Some(o) = &plan.end_to_end {
                        e_tol.rtol = o.rtol.unwrap_or(e_tol.rtol);
                        e_tol.atol_of_max = o.atol_of_max.unwrap_or(e_tol.atol_of_max);
                        e_tol.atol_floor = o.atol_floor.unwrap_or(e_tol.atol_floor);
                        e_tol.rel_l2 = o.rel_l2.unwrap_or(e_tol.rel_l2);
                    }
                    let e_stats = compare::compare(&got, &exact, &e_tol);
                    failure = compare::verdict(&e_stats, &e_tol).map(|f| CheckFailure::EndToEnd {
                        failure: Box::new(f),
                    });
                    end_to_end = Some(e_stats);
                }
            }
            if failure.is_none() && plan.repeat_check && t == 0 {
                self.gpu.upload(&cand.output, &poison)?;
                cand.poison_scratch(&self.gpu)?;
                self.launch_all(functions, launches, &cand_args)?;
                self.gpu.synchronize()?;
                let second = self.gpu.download(&cand.output)?;
                if let Some((differing, first_index)) = compare::differences(
                    compare::output_part(&first, plan.guard_bytes),
                    compare::output_part(&second, plan.guard_bytes),
                    out_spec.elem.size(),
                ) {
                    failure = Some(CheckFailure::Nondeterministic {
                        differing,
                        first: first_index,
                    });
                }
            }
            let failed = failure.clone();
            reports.push(TrialReport {
                kind: *kind,
                seed: *seed,
                stats,
                failure,
                end_to_end,
            });
            if let Some(f) = failed {
                return Err(Stop::Check(format!(
                    "{}: {kind:?} inputs (seed {seed}): {f}; max abs error {:.3e}, relative L2 {:.3e}",
                    describe(vars),
                    reports.last().map_or(0.0, |r| r.stats.max_abs),
                    reports.last().map_or(0.0, |r| r.stats.rel_l2)
                )));
            }
        }
        Ok(ShapeResult {
            vars: vars.clone(),
            trials: reports,
            timing: None,
            check_ms: 0.0,
        })
    }

    fn time_shape(
        &mut self,
        job: &Job,
        problem: &dyn Problem,
        functions: &[Function],
        shape: &ShapeJob,
        plan: &TimingPlan,
    ) -> Result<TimingReport, Stop> {
        let (vars, launches) = (&shape.vars, &shape.launches[..]);
        let arg_lists = argument_lists(problem, shape, functions.len())?;
        let bytes_per_set: usize = problem
            .inputs(vars)
            .iter()
            .map(|t| t.len * t.elem.size())
            .sum::<usize>()
            + problem.output(vars).len * problem.output(vars).elem.size()
            + shape
                .scratch
                .iter()
                .map(|t| t.len * t.elem.size())
                .sum::<usize>();
        let sets =
            timing::input_sets(bytes_per_set, self.gpu.info.l2_bytes as usize, plan) as usize;
        let host = problem.generate(
            vars,
            InputKind::Random,
            job.correctness.seeds.first().copied().unwrap_or(1),
        );
        let mut calls = Vec::with_capacity(sets);
        for _ in 0..sets {
            let call = self.alloc_call(problem, vars, 0, &shape.scratch)?;
            for (h, d) in host.iter().zip(&call.inputs) {
                self.gpu.upload(d, &h.bytes)?;
            }
            calls.push(call);
        }
        let args: Vec<Vec<Vec<KernelArg>>> = calls
            .iter()
            .map(|c| c.kernel_args(&arg_lists))
            .collect::<Result<_, _>>()?;
        // One call = the whole sequence: the graph captures every kernel of every call.
        let (samples, per_graph) = measure(&self.gpu, plan, sets, |g, set| {
            launch_sequence(g, functions, launches, &args[set])
        })?;
        let (median, p20, p80) = timing::summary(&samples);
        let tflops = problem.flops(vars) / (median * 1e-6) / 1e12;
        let elem = evo_kernels::harness::ElemType::from_dtype(
            vars.get("DTYPE").and_then(Value::as_str).unwrap_or("f16"),
        )
        .unwrap_or(evo_kernels::harness::ElemType::F16);
        let info = &self.gpu.info;
        let peak = timing::dense_peak_tflops(
            info.compute_capability,
            info.multiprocessors,
            info.clock_mhz,
            elem,
        );
        Ok(TimingReport {
            median_us: median,
            p20_us: p20,
            p80_us: p80,
            samples_us: samples,
            launches_per_sample: per_graph as u32,
            input_sets: sets as u32,
            tflops,
            peak_fraction: peak.map(|p| tflops / p),
            gb_per_s: problem.min_bytes(vars) / (median * 1e-6) / 1e9,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use evo_kernels::harness::ElemType;

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
    }

    #[test]
    fn kernels_without_their_own_lists_get_the_abi() {
        let gemm = evo_kernels::problem("gemm").unwrap();
        let s = shape_job(vec![], 2);
        let lists = argument_lists(gemm, &s, 2).unwrap();
        assert_eq!(lists, vec![gemm.args(&s.vars); 2]);
        let own = vec![
            vec![ArgSlot::Input(0), ArgSlot::Scratch(0)],
            vec![ArgSlot::Scratch(0), ArgSlot::Output],
        ];
        let s = shape_job(own.clone(), 2);
        assert_eq!(argument_lists(gemm, &s, 2).unwrap(), own);
        // A job whose lists do not match its kernels is refused, not launched.
        let s = shape_job(own, 3);
        let Err(Stop::Setup(why)) = argument_lists(gemm, &s, 3) else {
            panic!("accepted a job with 3 kernels and 2 argument lists")
        };
        assert!(why.contains("3 kernels but 2 argument lists"), "{why}");
    }
}
