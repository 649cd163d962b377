//! The correctness trials of one shape: fresh inputs of every kind, each trial a call as a
//! caller may make it (its own layouts and scalars), outputs prefilled with NaN or with
//! stale finite values, guards around every buffer, the output's padding untouched,
//! inputs untouched, and a repeat launch that must match bit for bit.

use evo_core::{Value, Vars};
use evo_gpu::runtime::{DeviceBuffer, Function, KernelArg};
use evo_kernels::harness::{
    normal_values, tensor_seed, Call, ElemType, Fill, HostTensor, InputFill, InputKind, Layout,
    Tolerance,
};
use evo_kernels::Problem;
use sha2::{Digest, Sha256};

use super::buffers::{self, CallBuffers, Guarded, SCRATCH_LARGE, SCRATCH_NAN};
use super::gpu_checks::{CompareJob, DifferJob, FillJob, PatternJob};
use super::kept::{reference_key, Reference};
use super::{argument_lists, describe, launch_sequence, Stop, Worker};
use crate::compare;
use crate::protocol::{
    CheckFailure, CorrectnessPlan, ErrorStats, Job, Prefill, ShapeJob, ShapeResult, TrialReport,
};

/// One trial: what inputs, which call, what the output holds before the launch.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Trial {
    pub kind: InputKind,
    pub seed: u64,
    pub call: Call,
    pub prefill: Prefill,
}

/// `seed` mixed with the shape, so every shape of a variant draws inputs of its own.
pub(crate) fn shape_seed(seed: u64, vars: &Vars) -> u64 {
    let d = Sha256::digest(format!("{seed}:{}", describe(vars)).as_bytes());
    u64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
}

/// The trials of a shape: a random trial per seed, then the adversarial kinds. The first
/// trial is the plain call (contiguous tensors, default scalars); every other trial draws
/// a call of its own (layouts and scalars, `contiguous[i]` keeping tensor i contiguous).
/// Odd trials start from a stale finite output instead of NaN.
pub(crate) fn trial_plan(
    problem: &dyn Problem,
    vars: &Vars,
    plan: &CorrectnessPlan,
    contiguous: &[bool],
) -> Vec<Trial> {
    let mut kinds: Vec<(InputKind, u64)> = plan
        .seeds
        .iter()
        .map(|s| (InputKind::Random, shape_seed(*s, vars)))
        .collect();
    if plan.adversarial {
        let base = plan.seeds.first().copied().unwrap_or(0);
        kinds.extend(
            InputKind::ADVERSARIAL
                .iter()
                .enumerate()
                .map(|(i, k)| (*k, shape_seed(base ^ (0xad00 + i as u64), vars))),
        );
    }
    kinds
        .into_iter()
        .enumerate()
        .map(|(t, (kind, seed))| Trial {
            kind,
            seed,
            call: if t == 0 {
                problem.default_call(vars)
            } else {
                problem.varied_call(vars, seed ^ 0xca11, contiguous)
            },
            prefill: if t % 2 == 1 {
                Prefill::Finite
            } else {
                Prefill::Nan
            },
        })
        .collect()
}

/// The generator key of a stale output's values: (trial seed ^ this, tensor `STALE_TENSOR`).
const STALE_SEED: u64 = 0x57a1e;
const STALE_TENSOR: usize = 99;

/// The output buffer's bytes before a launch: NaN everywhere, or finite values that are
/// not the answer in every element (NaN in the padding either way).
fn prefilled(problem: &dyn Problem, vars: &Vars, trial: &Trial) -> Vec<u8> {
    let spec = problem.output(vars);
    let layout = trial.call.output();
    let nan = spec.elem.nan_bytes();
    let values: Vec<f32> = match trial.prefill {
        Prefill::Nan => return nan.repeat(layout.len),
        Prefill::Finite => normal_values(trial.seed ^ STALE_SEED, STALE_TENSOR, spec.len, 1.0)
            .into_iter()
            .map(|x| match spec.elem {
                ElemType::U8 => (x * 40.0 + 128.0).clamp(0.0, 255.0),
                _ => x,
            })
            .collect(),
    };
    layout
        .scatter(&HostTensor::from_f32(spec.elem, &values), &nan)
        .bytes
}

/// What the output holds before a checked launch, written by the worker's kernels where
/// they can (everything but a stale byte output). The scratch is poisoned to match
/// ([`OutputPrefill::scratch_poison`]).
enum OutputPrefill {
    /// Every slot (elements and padding) this pattern.
    Pattern(Vec<u8>),
    /// NaN in every slot, then these values at the elements.
    Values(InputFill),
    /// These bytes, uploaded.
    Host(Vec<u8>),
}

impl OutputPrefill {
    /// The scratch bytes before the launch: NaN with a NaN output, large finite values with
    /// a stale one.
    fn scratch_poison(&self) -> u8 {
        match self {
            OutputPrefill::Pattern(_) => SCRATCH_NAN,
            OutputPrefill::Values(_) | OutputPrefill::Host(_) => SCRATCH_LARGE,
        }
    }
}

/// The prefill of `trial`'s output: the bytes of [`prefilled`], made on the GPU.
fn output_prefill(problem: &dyn Problem, vars: &Vars, trial: &Trial) -> OutputPrefill {
    let elem = problem.output(vars).elem;
    match (trial.prefill, elem) {
        (Prefill::Nan, _) => OutputPrefill::Pattern(elem.nan_bytes()),
        (Prefill::Finite, ElemType::U8) => OutputPrefill::Host(prefilled(problem, vars, trial)),
        (Prefill::Finite, _) => OutputPrefill::Values(InputFill::Counter {
            seed: tensor_seed(trial.seed ^ STALE_SEED, STALE_TENSOR),
            fill: Fill::Normal(1.0),
        }),
    }
}

impl Worker {
    /// Writes `prefill` into `buffers`' output, poisons the scratch, launches every kernel
    /// in order and waits.
    fn launch_checked(
        &self,
        functions: &[Function],
        shape: &ShapeJob,
        args: &[Vec<KernelArg>],
        buffers: &CallBuffers,
        layout: &Layout,
        prefill: &OutputPrefill,
    ) -> Result<(), Stop> {
        {
            let _t = self.stages.timer("prefill");
            let gate = self.gate();
            // Every slot of the output, padding included.
            let whole = |pattern: Vec<u8>| PatternJob {
                ptr: buffers.output.ptr(),
                n: layout.len as u64,
                pattern,
                layout: None,
            };
            match prefill {
                OutputPrefill::Pattern(p) => gate.pattern(&self.gpu, &[whole(p.clone())])?,
                OutputPrefill::Values(fill) => {
                    let elem = buffers.output_elem;
                    gate.pattern(&self.gpu, &[whole(elem.nan_bytes())])?;
                    gate.fill(
                        &self.gpu,
                        &[FillJob {
                            ptr: buffers.output.ptr(),
                            n: layout.elements() as u64,
                            elem,
                            fill: *fill,
                            layout: Some(layout),
                        }],
                    )?;
                }
                OutputPrefill::Host(bytes) => buffers.output.upload(&self.gpu, bytes)?,
            }
            buffers.poison_scratch(&self.gpu, prefill.scratch_poison())?;
            self.gpu.synchronize()?;
        }
        let _t = self.stages.timer("launch");
        launch_sequence(&self.gpu, functions, &shape.launches, args)?;
        self.gpu.synchronize()?;
        Ok(())
    }

    /// A trial's inputs in `buffers`, in the call's layouts with NaN in their padding:
    /// written on the GPU where the problem gives them as fills, else generated on the
    /// host and uploaded.
    fn write_inputs(
        &self,
        problem: &dyn Problem,
        vars: &Vars,
        trial: &Trial,
        buffers: &CallBuffers,
    ) -> Result<(), Stop> {
        let _t = self.stages.timer("inputs");
        let call = &trial.call;
        let specs = problem.inputs(vars);
        let Some(fills) = problem.input_fills(vars, call, trial.kind, trial.seed) else {
            let laid: Vec<HostTensor> = problem
                .generate(vars, call, trial.kind, trial.seed)
                .iter()
                .zip(&call.layouts)
                .map(|(h, l)| l.scatter(h, &h.elem.nan_bytes()))
                .collect();
            for (b, h) in buffers.inputs.iter().zip(&laid) {
                b.upload(&self.gpu, &h.bytes)?;
            }
            self.gpu.synchronize()?;
            return Ok(());
        };
        if fills.len() != specs.len() {
            return Err(Stop::Setup(format!(
                "problem `{}` gives {} input fills for {} inputs",
                problem.name(),
                fills.len(),
                specs.len()
            )));
        }
        let gate = self.gate();
        let padded: Vec<PatternJob> = buffers
            .inputs
            .iter()
            .zip(&call.layouts)
            .zip(&specs)
            .filter(|((_, l), _)| l.len > l.elements())
            .map(|((b, l), spec)| PatternJob {
                ptr: b.ptr(),
                n: l.len as u64,
                pattern: spec.elem.nan_bytes(),
                layout: None,
            })
            .collect();
        gate.pattern(&self.gpu, &padded)?;
        let jobs: Vec<FillJob> = buffers
            .inputs
            .iter()
            .zip(&call.layouts)
            .zip(specs.iter().zip(&fills))
            .map(|((b, l), (spec, fill))| FillJob {
                ptr: b.ptr(),
                n: l.elements() as u64,
                elem: spec.elem,
                fill: *fill,
                layout: Some(l),
            })
            .collect();
        gate.fill(&self.gpu, &jobs)?;
        Ok(())
    }

    /// The first input whose buffer (elements and padding) differs from its pristine copy.
    fn changed_input(
        &self,
        buffers: &CallBuffers,
        pristine: &[DeviceBuffer],
    ) -> Result<Option<CheckFailure>, Stop> {
        let _t = self.stages.timer("inputs_unchanged");
        let jobs: Vec<DifferJob> = buffers
            .inputs
            .iter()
            .zip(pristine)
            .map(|(b, p)| DifferJob::bytes(b.ptr(), p.ptr(), b.len() as u64))
            .collect();
        let diffs = self.gate().differ(&self.gpu, &jobs)?;
        Ok(diffs
            .iter()
            .position(|d| d.count > 0)
            .map(|i| CheckFailure::InputModified {
                input: buffers.names[i].clone(),
            }))
    }

    /// The first changed guard region of `buffers`.
    fn changed_guard(&self, buffers: &[&CallBuffers]) -> Result<Option<CheckFailure>, Stop> {
        let _t = self.stages.timer("guards");
        let gate = self.gate();
        Ok(buffers::changed_guard(&self.gpu, gate, buffers)?)
    }

    /// The first padding slot of the output (a slot between its elements) that no longer
    /// holds NaN: checked on a copy whose elements are overwritten with NaN, so the copy
    /// must equal NaN everywhere.
    fn changed_padding(
        &self,
        buffers: &CallBuffers,
        layout: &Layout,
        elem: ElemType,
    ) -> Result<Option<usize>, Stop> {
        if layout.len == layout.elements() {
            return Ok(None);
        }
        let _t = self.stages.timer("padding");
        let probe = self.gpu.alloc(buffers.output.len())?;
        self.gpu.copy_at(
            &probe,
            0,
            buffers.output.buffer(),
            buffers.output.offset(),
            buffers.output.len(),
        )?;
        let gate = self.gate();
        gate.pattern(
            &self.gpu,
            &[PatternJob {
                ptr: probe.ptr(),
                n: layout.elements() as u64,
                pattern: elem.nan_bytes(),
                layout: Some(layout),
            }],
        )?;
        let diffs = gate.differ_from_pattern(
            &self.gpu,
            &[(probe.ptr(), probe.bytes() as u64)],
            &elem.nan_bytes(),
            elem.size() as u64,
        )?;
        Ok((diffs[0].count > 0).then_some(diffs[0].first as usize))
    }

    /// Device copies of the candidate's inputs, made before it runs: what the reference
    /// reads and what the inputs must still equal afterwards.
    fn pristine_copies(&self, buffers: &CallBuffers) -> Result<Vec<DeviceBuffer>, Stop> {
        let _t = self.stages.timer("copies");
        let copies = buffers
            .inputs
            .iter()
            .map(|b| self.copy_of(b))
            .collect::<Result<Vec<_>, evo_gpu::runtime::CudaError>>()?;
        self.gpu.synchronize()?;
        Ok(copies)
    }

    /// A device copy of a guarded buffer's payload.
    fn copy_of(&self, b: &Guarded) -> Result<DeviceBuffer, evo_gpu::runtime::CudaError> {
        let c = self.gpu.alloc(b.len())?;
        self.gpu.copy_at(&c, 0, b.buffer(), b.offset(), b.len())?;
        Ok(c)
    }

    /// The output's error against a float32 reference on the GPU; a reference that is not
    /// finite is the evaluator's failure, not the candidate's.
    fn compare_output(
        &self,
        buffers: &CallBuffers,
        layout: &Layout,
        reference: &Reference,
        tolerance: Tolerance,
        what: &str,
    ) -> Result<ErrorStats, Stop> {
        let _t = self.stages.timer("compare");
        let mut compared = self.gate().compare(
            &self.gpu,
            &[CompareJob {
                got: buffers.output.ptr(),
                reference: reference.ptr,
                n: layout.elements() as u64,
                elem: buffers.output_elem,
                tolerance,
                layout: Some(layout),
            }],
        )?;
        let compared = compared.pop().expect("one result per job");
        if compared.reference_not_finite > 0 {
            self.kept.borrow_mut().forget(&reference.key);
            return Err(Stop::Setup(format!(
                "the reference output is not finite in {} elements for {what}",
                compared.reference_not_finite
            )));
        }
        Ok(compared.stats)
    }

    /// A trial's second reference, on inputs the problem gives as host tensors (the FP8
    /// problems' codes or originals): `reference` loaded, its output kept for the batch
    /// under `contents` (the inputs uploaded only when it is not kept yet).
    #[allow(clippy::too_many_arguments)]
    fn host_reference(
        &mut self,
        problem: &dyn Problem,
        vars: &Vars,
        call: &Call,
        reference: &evo_kernels::harness::ReferenceKernel,
        contents: &str,
        inputs: &[HostTensor],
        out_len: usize,
    ) -> Result<Reference, Stop> {
        self.load_reference(problem, reference)?;
        let key = reference_key(problem.name(), vars, call, reference, contents);
        self.kept_reference(key, reference, out_len, || {
            let held = inputs
                .iter()
                .map(|h| {
                    let b = self.gpu.alloc(h.bytes.len())?;
                    self.gpu.upload(&b, &h.bytes)?;
                    Ok(b)
                })
                .collect::<Result<Vec<_>, evo_gpu::runtime::CudaError>>()?;
            Ok((held.iter().map(DeviceBuffer::ptr).collect(), held))
        })
    }

    pub(super) fn check_shape(
        &mut self,
        job: &Job,
        problem: &dyn Problem,
        functions: &[Function],
        shape: &ShapeJob,
    ) -> Result<ShapeResult, Stop> {
        let vars = &shape.vars;
        let plan = &job.correctness;
        let out_spec = problem.output(vars);
        self.gate_kernels()?;
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
        let names: Vec<String> = problem
            .inputs(vars)
            .into_iter()
            .chain([out_spec.clone()])
            .map(|t| t.name)
            .collect();
        let contiguous: Vec<bool> = names.iter().map(|n| job.contiguous.contains(n)).collect();
        let mut reports = Vec::new();
        for (t, trial) in trial_plan(problem, vars, plan, &contiguous)
            .into_iter()
            .enumerate()
        {
            let (kind, seed, call) = (trial.kind, trial.seed, &trial.call);
            let what = format!(
                "{}: {kind:?} inputs (seed {seed}), {}, {} output",
                describe(vars),
                call.describe(&names),
                match trial.prefill {
                    Prefill::Nan => "NaN-poisoned",
                    Prefill::Finite => "stale finite",
                }
            );
            let cand = {
                let _t = self.stages.timer("alloc");
                call_buffers(self, problem, vars, call, shape, plan.guard_bytes)?
            };
            self.write_inputs(problem, vars, &trial, &cand)?;
            let pristine = self.pristine_copies(&cand)?;
            let reference = self.reference(problem, vars, call)?;
            // The batch's jobs share this trial's contents (their seeds are the batch's).
            let key = reference_key(
                problem.name(),
                vars,
                call,
                &reference,
                &format!("trial {kind:?} seed {seed}"),
            );
            let ref_out = self.kept_reference(key, &reference, out_spec.len, || {
                Ok((pristine.iter().map(DeviceBuffer::ptr).collect(), vec![]))
            })?;
            let lists = argument_lists(problem, shape, call, functions.len())?;
            let args = cand.kernel_args(&lists).map_err(Stop::Setup)?;
            let out_layout = call.output();
            self.launch_checked(
                functions,
                shape,
                &args,
                &cand,
                out_layout,
                &output_prefill(problem, vars, &trial),
            )?;
            let stats = self.compare_output(&cand, out_layout, &ref_out, tol, &what)?;
            drop(ref_out);
            // Inputs encoded inside the call (FP8 end to end): the output is held to the
            // FP8 kernels' tolerance of the answer on the rule's codes (the end-to-end bound
            // on the exact answer above is reported, not a way to pass: see
            // `compare::fp8_end_to_end_trials_are_judged_on_the_rule_s_codes`).
            let decoded = match problem.encoded(vars, call, kind, seed) {
                Some(enc) => {
                    let answer = self.host_reference(
                        problem,
                        vars,
                        call,
                        &enc.reference,
                        &format!("encoded {kind:?} seed {seed}"),
                        &enc.inputs,
                        out_spec.len,
                    )?;
                    let s = self.compare_output(
                        &cand,
                        out_layout,
                        &answer,
                        enc.kernel_tolerance,
                        &format!("{what} (the rule's codes)"),
                    )?;
                    Some((s, enc.kernel_tolerance))
                }
                None => None,
            };
            let mut failure = self.changed_guard(&[&cand])?;
            if failure.is_none() {
                failure = self
                    .changed_padding(&cand, out_layout, out_spec.elem)?
                    .map(|element| CheckFailure::PaddingModified {
                        tensor: out_spec.name.clone(),
                        element,
                    });
            }
            if failure.is_none() {
                failure = self.changed_input(&cand, &pristine)?;
            }
            if failure.is_none() {
                failure = match &decoded {
                    Some((d, kernel)) => compare::verdict(d, kernel),
                    None => compare::verdict(&stats, &tol),
                };
            }
            // Inputs encoded by the harness (FP8): the error against the exact answer on the
            // originals, reported. Not a verdict: the output passed within the kernel's
            // tolerance of the decoded answer above.
            let mut end_to_end = None;
            if failure.is_none() {
                if let Some(e2e) = problem.end_to_end(vars, call, kind, seed) {
                    let exact = self.host_reference(
                        problem,
                        vars,
                        call,
                        &e2e.reference,
                        &format!("end to end {kind:?} seed {seed}"),
                        &e2e.inputs,
                        out_spec.len,
                    )?;
                    let mut e_tol = e2e.tolerance;
                    if let Some(o) = &plan.end_to_end {
                        e_tol.rtol = o.rtol.unwrap_or(e_tol.rtol);
                        e_tol.atol_of_max = o.atol_of_max.unwrap_or(e_tol.atol_of_max);
                        e_tol.atol_floor = o.atol_floor.unwrap_or(e_tol.atol_floor);
                        e_tol.rel_l2 = o.rel_l2.unwrap_or(e_tol.rel_l2);
                    }
                    let e_stats = self.compare_output(
                        &cand,
                        out_layout,
                        &exact,
                        e_tol,
                        &format!("{what} (original inputs)"),
                    )?;
                    end_to_end = Some(e_stats);
                }
            }
            // A second launch on the same inputs, from NaN again: the same bits, the inputs
            // and every guard still untouched.
            if failure.is_none() && plan.repeat_check && t == 0 {
                let first = self.copy_of(&cand.output)?;
                self.launch_checked(
                    functions,
                    shape,
                    &args,
                    &cand,
                    out_layout,
                    &OutputPrefill::Pattern(out_spec.elem.nan_bytes()),
                )?;
                let _t = self.stages.timer("repeat");
                let size = out_spec.elem.size() as u64;
                let d = self.gate().differ(
                    &self.gpu,
                    &[DifferJob {
                        unit: size,
                        ..DifferJob::bytes(cand.output.ptr(), first.ptr(), first.bytes() as u64)
                    }],
                )?[0];
                drop(_t);
                failure = (d.count > 0).then_some(CheckFailure::Nondeterministic {
                    differing: d.count,
                    first: d.first as usize,
                });
                if failure.is_none() {
                    failure = self.changed_guard(&[&cand])?;
                }
                if failure.is_none() {
                    failure = self.changed_input(&cand, &pristine)?;
                }
            }
            let failed = failure.clone();
            reports.push(TrialReport {
                kind,
                seed,
                call: call.describe(&names),
                prefill: trial.prefill,
                stats,
                failure,
                end_to_end,
            });
            if let Some(f) = failed {
                let last = reports.last().expect("pushed above");
                return Err(Stop::Check(format!(
                    "{what}: {f}; max abs error {:.3e}, relative L2 {:.3e}",
                    last.stats.max_abs, last.stats.rel_l2
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
}

/// The candidate's buffers for one call of a shape.
fn call_buffers(
    w: &Worker,
    problem: &dyn Problem,
    vars: &Vars,
    call: &Call,
    shape: &ShapeJob,
    guard: usize,
) -> Result<CallBuffers, Stop> {
    Ok(CallBuffers::alloc(
        &w.gpu,
        problem,
        vars,
        &call.layouts,
        &shape.scratch,
        guard,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sdpa_vars(seq: i64) -> Vars {
        let p = evo_kernels::problem("sdpa_fwd").unwrap();
        p.complete_shape(
            &[
                ("BATCH", 1),
                ("HEADS", 2),
                ("SEQ_Q", seq),
                ("SEQ_KV", seq),
                ("HEAD_DIM", 64),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.into()))
            .collect(),
        )
        .unwrap()
    }

    fn plan() -> CorrectnessPlan {
        CorrectnessPlan {
            seeds: vec![11, 12, 13],
            adversarial: true,
            repeat_check: true,
            guard_bytes: 4096,
            tolerance: vec![],
            end_to_end: None,
        }
    }

    /// Every trial kind appears; the first call is the plain one and the others vary;
    /// stale and NaN outputs alternate; shapes draw inputs of their own; declared tensors
    /// stay contiguous.
    #[test]
    fn trials_vary_calls_outputs_and_inputs_per_shape() {
        let p = evo_kernels::problem("sdpa_fwd").unwrap();
        let (a, b) = (sdpa_vars(77), sdpa_vars(130));
        let trials = trial_plan(p, &a, &plan(), &[]);
        assert_eq!(trials.len(), 3 + InputKind::ADVERSARIAL.len());
        assert_eq!(trials[0].call, p.default_call(&a));
        assert!(trials[1..]
            .iter()
            .any(|t| t.call.layouts != p.default_call(&a).layouts));
        assert!(trials[1..]
            .iter()
            .any(|t| t.call.scalars != p.default_call(&a).scalars));
        assert_eq!(
            trials.iter().map(|t| t.prefill).collect::<Vec<_>>()[..4],
            [Prefill::Nan, Prefill::Finite, Prefill::Nan, Prefill::Finite]
        );
        for kind in InputKind::ADVERSARIAL {
            assert!(trials.iter().any(|t| t.kind == kind), "{kind:?}");
        }
        // Same seeds, another shape: other inputs.
        let other = trial_plan(p, &b, &plan(), &[]);
        assert!(trials.iter().zip(&other).all(|(x, y)| x.seed != y.seed));
        // Reproducible for a shape.
        assert_eq!(trials, trial_plan(p, &a, &plan(), &[]));
        // q, k, v declared contiguous: only o moves.
        let fixed = [true, true, true, false];
        for t in trial_plan(p, &a, &plan(), &fixed) {
            assert!(t.call.layouts[..3].iter().all(|l| l.is_contiguous()));
        }
    }

    /// A stale output is finite in every element and is not the answer; a NaN one is NaN
    /// in every element; both keep NaN in the padding.
    #[test]
    fn prefills() {
        let p = evo_kernels::problem("sdpa_fwd").unwrap();
        let v = sdpa_vars(77);
        let trials = trial_plan(p, &v, &plan(), &[]);
        let stale = trials
            .iter()
            .find(|t| {
                t.prefill == Prefill::Finite && t.call.output().len > t.call.output().elements()
            })
            .or_else(|| trials.iter().find(|t| t.prefill == Prefill::Finite))
            .unwrap();
        let bytes = prefilled(p, &v, stale);
        let layout = stale.call.output();
        let logical = layout.gather(ElemType::F16, &bytes).to_f64();
        assert!(logical.iter().all(|x| x.is_finite()));
        assert!(logical.iter().any(|x| *x != 0.0));
        assert_eq!(
            layout.padding_changed(&bytes, &ElemType::F16.nan_bytes()),
            None
        );
        let nan = prefilled(p, &v, &trials[0]);
        assert!(layout_of(&trials[0])
            .gather(ElemType::F16, &nan)
            .to_f64()
            .iter()
            .all(|x| x.is_nan()));
    }

    fn layout_of(t: &Trial) -> &evo_kernels::harness::Layout {
        t.call.output()
    }
}
