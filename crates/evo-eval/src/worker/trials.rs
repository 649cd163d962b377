//! The correctness trials of one shape: fresh inputs of every kind, each trial a call as a
//! caller may make it (its own layouts and scalars), outputs prefilled with NaN or with
//! stale finite values, guards around every buffer, the output's padding untouched,
//! inputs untouched, and a repeat launch that must match bit for bit.

use evo_core::{Value, Vars};
use evo_kernels::harness::{normal_values, Call, ElemType, HostTensor, InputKind, Tolerance};
use evo_kernels::Problem;
use sha2::{Digest, Sha256};

use super::buffers::CallBuffers;
use super::{argument_lists, describe, launch_sequence, Stop, Worker};
use crate::compare;
use crate::protocol::{
    CheckFailure, CorrectnessPlan, Job, Prefill, ShapeJob, ShapeResult, TrialReport,
};
use evo_gpu::runtime::{Function, KernelArg};

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

/// The output buffer's bytes before a launch: NaN everywhere, or finite values that are
/// not the answer in every element (NaN in the padding either way).
fn prefilled(problem: &dyn Problem, vars: &Vars, trial: &Trial) -> Vec<u8> {
    let spec = problem.output(vars);
    let layout = trial.call.output();
    let nan = spec.elem.nan_bytes();
    let values: Vec<f32> = match trial.prefill {
        Prefill::Nan => return nan.repeat(layout.len),
        Prefill::Finite => normal_values(trial.seed ^ 0x57a1e, 99, spec.len, 1.0)
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

impl Worker {
    /// Output bytes after one checked call: the output prefilled, scratch poisoned, every
    /// kernel in order.
    fn launch_checked(
        &self,
        functions: &[Function],
        shape: &ShapeJob,
        args: &[Vec<KernelArg>],
        buffers: &CallBuffers,
        prefill: &[u8],
    ) -> Result<Vec<u8>, Stop> {
        {
            let _t = self.stages.timer("upload");
            buffers.output.upload(&self.gpu, prefill)?;
            buffers.poison_scratch(&self.gpu)?;
            self.gpu.synchronize()?;
        }
        {
            let _t = self.stages.timer("launch");
            launch_sequence(&self.gpu, functions, &shape.launches, args)?;
            self.gpu.synchronize()?;
        }
        let _t = self.stages.timer("download");
        Ok(buffers.output.download(&self.gpu)?)
    }

    /// The first input whose buffer (elements and padding) differs from what was uploaded.
    fn changed_input(
        &self,
        buffers: &CallBuffers,
        uploaded: &[HostTensor],
    ) -> Result<Option<CheckFailure>, Stop> {
        let _t = self.stages.timer("inputs_unchanged");
        for (i, (b, h)) in buffers.inputs.iter().zip(uploaded).enumerate() {
            if b.download(&self.gpu)? != h.bytes {
                return Ok(Some(CheckFailure::InputModified {
                    input: buffers.names[i].clone(),
                }));
            }
        }
        Ok(None)
    }

    /// The float32 reference of a call on inputs laid out as `laid` (logical order).
    fn reference_values(
        &mut self,
        problem: &dyn Problem,
        vars: &Vars,
        call: &Call,
        laid: &[HostTensor],
        what: &str,
    ) -> Result<Vec<f32>, Stop> {
        let reference = self.reference(problem, vars, call)?;
        self.reference_on(&reference, laid, problem.output(vars).len, what)
    }

    fn reference_on(
        &mut self,
        reference: &evo_kernels::harness::ReferenceKernel,
        inputs: &[HostTensor],
        out_len: usize,
        what: &str,
    ) -> Result<Vec<f32>, Stop> {
        let _t = self.stages.timer("reference");
        let buffers = inputs
            .iter()
            .map(|h| {
                let b = self.gpu.alloc(h.bytes.len())?;
                self.gpu.upload(&b, &h.bytes)?;
                Ok(b)
            })
            .collect::<Result<Vec<_>, evo_gpu::runtime::CudaError>>()?;
        let out = self.gpu.alloc(out_len * 4)?;
        let ptrs: Vec<u64> = buffers.iter().map(|b| b.ptr()).collect();
        self.launch_reference(reference, &ptrs, out.ptr())?;
        self.gpu.synchronize()?;
        let values: Vec<f32> = self
            .gpu
            .download(&out)?
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
            let laid: Vec<HostTensor> = {
                let _t = self.stages.timer("inputs");
                problem
                    .generate(vars, call, kind, seed)
                    .iter()
                    .zip(&call.layouts)
                    .map(|(h, l)| l.scatter(h, &h.elem.nan_bytes()))
                    .collect()
            };
            let ref_values = self.reference_values(problem, vars, call, &laid, &what)?;

            let cand = {
                let _t = self.stages.timer("alloc");
                call_buffers(self, problem, vars, call, shape, plan.guard_bytes)?
            };
            {
                let _t = self.stages.timer("upload");
                for (b, h) in cand.inputs.iter().zip(&laid) {
                    b.upload(&self.gpu, &h.bytes)?;
                }
            }
            let lists = argument_lists(problem, shape, call, functions.len())?;
            let args = cand.kernel_args(&lists).map_err(Stop::Setup)?;
            let out_layout = call.output();
            let nan = out_spec.elem.nan_bytes();
            let first = self.launch_checked(
                functions,
                shape,
                &args,
                &cand,
                &prefilled(problem, vars, &trial),
            )?;
            let got = out_layout.gather(out_spec.elem, &first);
            let stats = compare::compare(&got, &ref_values, &tol);
            let mut failure = cand.check_guards(&self.gpu)?;
            if failure.is_none() {
                failure = out_layout.padding_changed(&first, &nan).map(|element| {
                    CheckFailure::PaddingModified {
                        tensor: out_spec.name.clone(),
                        element,
                    }
                });
            }
            if failure.is_none() {
                failure = self.changed_input(&cand, &laid)?;
            }
            if failure.is_none() {
                failure = compare::verdict(&stats, &tol);
            }
            // Encoded inputs (FP8): the error against the exact answer on the originals.
            let mut end_to_end = None;
            if failure.is_none() {
                if let Some(e2e) = problem.end_to_end(vars, call, kind, seed) {
                    self.load_reference(problem, &e2e.reference)?;
                    let exact = self.reference_on(
                        &e2e.reference,
                        &e2e.inputs,
                        out_spec.len,
                        &format!("{what} (original inputs)"),
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
            // A second launch on the same inputs, from NaN again: the same bits, the inputs
            // and every guard still untouched.
            if failure.is_none() && plan.repeat_check && t == 0 {
                let second = self.launch_checked(
                    functions,
                    shape,
                    &args,
                    &cand,
                    &nan.repeat(out_layout.len),
                )?;
                failure = compare::differences(&first, &second, out_spec.elem.size())
                    .map(|(differing, first)| CheckFailure::Nondeterministic { differing, first });
                if failure.is_none() {
                    failure = cand.check_guards(&self.gpu)?;
                }
                if failure.is_none() {
                    failure = self.changed_input(&cand, &laid)?;
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
