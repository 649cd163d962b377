//! The timing gate. What is timed is what was checked: before every replay each input set
//! gets fresh contents (generated on the GPU), its output and scratch are poisoned and the
//! L2 is flushed; after it, one input set chosen at random (the kernel cannot know which)
//! is checked against the reference of its contents and its inputs against a regenerated
//! copy; after the last replay every set is checked, and every guard region of every set
//! (nothing but a variant writes them, so a change in any replay is still there).
//! Each replay launches each set once, so no launch can reuse an earlier launch's output.
//! Every replay's contents come from the job's seeds, which the variants of a batch share
//! (`Job::batch_seed`): new to each variant, and their references computed once per batch
//! (`kept`).
//! A median below the device's roofline floor is rejected, never scored.

use std::time::Instant;

use evo_core::Value;
use evo_gpu::runtime::{CudaError, Function, Gpu, KernelArg};
use evo_kernels::harness::{Call, ElemType, Tolerance};
use evo_kernels::Problem;
use rand::{Rng, SeedableRng};

use super::buffers::{changed_guard, CallBuffers, SCRATCH_NAN};
use super::gpu_checks::{CompareJob, DifferJob, FillJob};
use super::kept::{reference_key, Kept};
use super::trials::shape_seed;
use super::{argument_lists, describe, launch_sequence, Stop, Worker};
use crate::compare;
use crate::protocol::{CheckFailure, Job, ShapeJob, TimingPlan, TimingReport};
use crate::timing;

/// Times one call per input set, `sets` sets per replay of a CUDA graph, by the method of
/// [`crate::timing`]: warm-up (passes over the sets for at least `warmup_ms`, at least one),
/// one untimed replay (the graph's upload), then replays timed with CUDA events until the
/// samples settle, the variant is out of contention (`contend_us`, see
/// [`timing::out_of_contention`]) or the budget ends, and then one more, flagged `last`.
/// `before` runs before each replay (fresh inputs, poison, L2 flush), `after` after each
/// timed one (its checks). Returns per-launch times in µs.
#[allow(clippy::too_many_arguments)]
pub fn measure<E: From<CudaError>>(
    gpu: &Gpu,
    plan: &TimingPlan,
    warmup_ms: f64,
    contend_us: Option<f64>,
    sets: usize,
    launch: impl Fn(&Gpu, usize) -> Result<(), CudaError>,
    mut before: impl FnMut(&Gpu, Replay) -> Result<(), E>,
    mut after: impl FnMut(&Gpu, Replay) -> Result<(), E>,
) -> Result<Vec<f64>, E> {
    let sets = sets.max(1);
    before(
        gpu,
        Replay {
            index: 0,
            last: false,
        },
    )?;
    let warm = Instant::now();
    loop {
        for set in 0..sets {
            launch(gpu, set)?;
        }
        gpu.synchronize()?;
        if warm.elapsed().as_secs_f64() * 1e3 >= warmup_ms {
            break;
        }
    }
    let graph = gpu.capture(|g| {
        for set in 0..sets {
            launch(g, set)?;
        }
        Ok(())
    })?;
    let (start, end) = (gpu.event()?, gpu.event()?);
    gpu.launch_graph(&graph)?;
    gpu.synchronize()?;
    let mut samples = Vec::new();
    let begun = Instant::now();
    let mut last = false;
    for index in 1.. {
        let replay = Replay { index, last };
        before(gpu, replay)?;
        gpu.synchronize()?;
        gpu.record(&start)?;
        gpu.launch_graph(&graph)?;
        gpu.record(&end)?;
        end.synchronize()?;
        samples.push(start.elapsed_ms(&end)? as f64 * 1e3 / sets as f64);
        after(gpu, replay)?;
        if last {
            break;
        }
        last = timing::settled(&samples, plan)
            || timing::out_of_contention(&samples, contend_us)
            || begun.elapsed().as_secs_f64() * 1e3 > plan.budget_ms;
    }
    Ok(samples)
}

/// A replay of the timing graph: its number (0: the warm-up) and whether it is the last,
/// which is timed like the others and then has every set checked.
#[derive(Clone, Copy, Debug)]
pub struct Replay {
    pub index: usize,
    pub last: bool,
}

/// Marks the seed of the last replay's contents apart from the others'.
const FINAL_REPLAY_TAG: u64 = 0xf1_4a1;

/// Device memory for checking timed sets at once (their references and regenerated
/// inputs): a few sets of a large shape, all sets of a small one.
const CHECK_BYTES: usize = 1 << 30;

/// The seed of input `tensor` of set `set` at replay `replay` of a job's shape.
fn content_seed(shape: u64, replay: usize, set: usize, tensor: usize) -> u64 {
    shape ^ ((replay as u64) << 40) ^ ((set as u64) << 20) ^ tensor as u64
}

impl Worker {
    /// A rough time of one call (µs, launch gap included): the least of three launches
    /// between events, on whatever the buffers hold. Only to size the timing sets.
    fn estimate_us(
        &self,
        functions: &[Function],
        shape: &ShapeJob,
        args: &[Vec<KernelArg>],
    ) -> Result<f64, Stop> {
        let (start, end) = (self.gpu.event()?, self.gpu.event()?);
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            self.gpu.record(&start)?;
            launch_sequence(&self.gpu, functions, &shape.launches, args)?;
            self.gpu.record(&end)?;
            end.synchronize()?;
            best = best.min(start.elapsed_ms(&end)? as f64 * 1e3);
        }
        Ok(best)
    }

    pub(super) fn time_shape(
        &mut self,
        job: &Job,
        problem: &dyn Problem,
        functions: &[Function],
        shape: &ShapeJob,
        plan: &TimingPlan,
        warmup_ms: f64,
    ) -> Result<TimingReport, Stop> {
        let vars = &shape.vars;
        let call: Call = problem.default_call(vars);
        let lists = argument_lists(problem, shape, &call, functions.len())?;
        let in_specs = problem.inputs(vars);
        let out_spec = problem.output(vars);
        let guard = job.correctness.guard_bytes;
        let setup = Instant::now();
        let bytes_per_set = in_specs
            .iter()
            .chain([&out_spec])
            .chain(&shape.scratch)
            .map(|t| t.len * t.elem.size())
            .sum::<usize>();
        let l2 = self.gpu.info.l2_bytes as usize;
        let alloc = |w: &Worker| -> Result<(CallBuffers, Vec<Vec<KernelArg>>), Stop> {
            let b =
                CallBuffers::alloc(&w.gpu, problem, vars, &call.layouts, &shape.scratch, guard)?;
            let a = b.kernel_args(&lists).map_err(Stop::Setup)?;
            Ok((b, a))
        };
        // Enough sets that their bytes pass the L2 several times, and that a replay (each
        // set once) lasts about `sample_ms`: a launch never meets an earlier launch's output.
        let first = alloc(self)?;
        let one_call_us = self.estimate_us(functions, shape, &first.1)?;
        let n_sets = timing::replay_sets(bytes_per_set, l2, one_call_us, plan) as usize;
        let mut sets = vec![first.0];
        let mut args = vec![first.1];
        for _ in 1..n_sets {
            let (b, a) = alloc(self)?;
            sets.push(b);
            args.push(a);
        }
        let reference = self.reference(problem, vars, &call)?;
        let dtype = vars.get("DTYPE").and_then(Value::as_str).unwrap_or("f16");
        let tol: Tolerance = job
            .correctness
            .tolerance
            .iter()
            .find(|(d, _)| d == dtype)
            .map(|(_, t)| *t)
            .unwrap_or_else(|| problem.tolerance(vars));
        self.gate_kernels()?;
        let own_seed = job.correctness.seeds.first().copied().unwrap_or(0);
        let gate = self.gate.as_ref().expect("loaded above");
        let gpu = &self.gpu;
        let stages = &self.stages;
        let kept = &self.kept;
        // Room to check `slots` sets at once: per set a reference output (where the batch
        // keeps none) and its inputs regenerated (to prove the kernel left them alone),
        // within CHECK_BYTES.
        let slot_bytes = out_spec.len * 4
            + in_specs
                .iter()
                .map(|t| t.len * t.elem.size())
                .sum::<usize>();
        let slots = (CHECK_BYTES / slot_bytes.max(1)).clamp(1, sets.len());
        let ref_outs = (0..slots)
            .map(|_| gpu.alloc(out_spec.len * 4))
            .collect::<Result<Vec<_>, _>>()?;
        let regenerated = (0..slots)
            .map(|_| {
                in_specs
                    .iter()
                    .map(|t| gpu.alloc(t.len * t.elem.size()))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let flush = gpu.alloc(2 * l2.max(1))?;
        let shape_key = shape_seed(own_seed, vars);
        let final_shape_key = shape_key ^ FINAL_REPLAY_TAG;
        let mut pick = rand_chacha::ChaCha8Rng::seed_from_u64(shape_key ^ 0x7173);
        // The generator key of the contents of `replay`'s sets.
        let contents = |replay: Replay| -> (u64, usize) {
            if replay.last {
                (final_shape_key, 0)
            } else {
                (shape_key, replay.index)
            }
        };
        // What the reference of `set`'s contents at `replay` is kept as for the batch.
        let kept_key = |replay: Replay, set: usize| -> String {
            let (key, index) = contents(replay);
            reference_key(
                problem.name(),
                vars,
                &call,
                &reference,
                &format!("timed contents {key:#x} replay {index} set {set}"),
            )
        };
        // The contents of every input of `set` at `replay`.
        let fills = |replay: Replay, set: usize, ptrs: &[u64]| -> Vec<FillJob> {
            let (key, index) = contents(replay);
            in_specs
                .iter()
                .enumerate()
                .map(|(t, spec)| {
                    FillJob::counter(
                        ptrs[t],
                        spec.len as u64,
                        spec.elem,
                        content_seed(key, index, set, t),
                        problem.random_fill(vars, t),
                    )
                })
                .collect()
        };
        let set_inputs =
            |s: &CallBuffers| -> Vec<u64> { s.inputs.iter().map(|b| b.ptr()).collect() };
        // Checks sets after `replay`, `slots` at a time: each set's inputs against a copy
        // regenerated from their seed, each output against the reference of those pristine
        // contents (kept for the batch); the first failure in set order.
        let check_sets = |replay: Replay, which: &[usize]| -> Result<Option<CheckFailure>, Stop> {
            for chunk in which.chunks(slots) {
                let regen: Vec<FillJob> = chunk
                    .iter()
                    .enumerate()
                    .flat_map(|(slot, &set)| {
                        let copies: Vec<u64> = regenerated[slot].iter().map(|b| b.ptr()).collect();
                        fills(replay, set, &copies)
                    })
                    .collect();
                gate.fill(gpu, &regen)?;
                let differs: Vec<DifferJob> = chunk
                    .iter()
                    .enumerate()
                    .flat_map(|(slot, &set)| {
                        sets[set]
                            .inputs
                            .iter()
                            .zip(&regenerated[slot])
                            .map(|(b, r)| DifferJob::bytes(b.ptr(), r.ptr(), b.len() as u64))
                    })
                    .collect();
                let diffs = gate.differ(gpu, &differs)?;
                let references = stages.timer("timing_reference");
                let keys: Vec<String> = chunk.iter().map(|&set| kept_key(replay, set)).collect();
                let wanted: Vec<(&str, usize)> = keys
                    .iter()
                    .map(|k| (k.as_str(), out_spec.len * 4))
                    .collect();
                let mut kept = kept.borrow_mut();
                let found = kept.lookup(gpu, gate, &wanted)?;
                let mut ref_ptrs = Vec::with_capacity(chunk.len());
                let mut computed = Vec::new();
                for (slot, (found, key)) in found.iter().zip(&keys).enumerate() {
                    let ptr = match *found {
                        Kept::Ready(ptr) => {
                            ref_ptrs.push(ptr);
                            continue;
                        }
                        Kept::Compute(ptr) => {
                            computed.push(key.as_str());
                            ptr
                        }
                        Kept::Full => ref_outs[slot].ptr(),
                    };
                    let inputs: Vec<u64> = regenerated[slot].iter().map(|b| b.ptr()).collect();
                    self.launch_reference(&reference, &inputs, ptr)?;
                    ref_ptrs.push(ptr);
                }
                kept.seal(gpu, gate, &computed)?;
                gpu.synchronize()?;
                drop(references);
                let compares: Vec<CompareJob> = chunk
                    .iter()
                    .zip(&ref_ptrs)
                    .map(|(&set, &r)| CompareJob {
                        got: sets[set].output.ptr(),
                        reference: r,
                        n: out_spec.len as u64,
                        elem: out_spec.elem,
                        tolerance: tol,
                        layout: None,
                    })
                    .collect();
                let compared = gate.compare(gpu, &compares)?;
                let inputs = in_specs.len();
                for (slot, &set) in chunk.iter().enumerate() {
                    let c = &compared[slot];
                    if c.reference_not_finite > 0 {
                        kept.forget(&keys[slot]);
                        return Err(Stop::Setup(format!(
                            "the reference output is not finite in {} elements for {} (timed replay {})",
                            c.reference_not_finite,
                            describe(vars),
                            replay.index
                        )));
                    }
                    let failure = diffs[slot * inputs..(slot + 1) * inputs]
                        .iter()
                        .position(|d| d.count > 0)
                        .map(|i| CheckFailure::InputModified {
                            input: sets[set].names[i].clone(),
                        })
                        .or_else(|| compare::verdict(&c.stats, &tol));
                    if let Some(f) = failure {
                        return Ok(Some(CheckFailure::Timed {
                            replay: replay.index as u32,
                            set: set as u32,
                            failure: Box::new(f),
                        }));
                    }
                }
            }
            Ok(None)
        };
        // Every guard region of every set, in one pass.
        let all_sets: Vec<&CallBuffers> = sets.iter().collect();
        let guards = || -> Result<Option<CheckFailure>, Stop> {
            let _t = stages.timer("timing_guards");
            Ok(changed_guard(gpu, gate, &all_sets)?)
        };
        // The checks' own stages, counted apart from the stage they run in.
        const CHECK_PARTS: [&str; 2] = ["timing_reference", "timing_guards"];
        let exclusive = |stage: &str, since: Instant, parts_before: f64| {
            let parts = stages.sum_of(&CHECK_PARTS) - parts_before;
            stages.add_ms(stage, since.elapsed().as_secs_f64() * 1e3 - parts);
        };
        stages.add("timing_setup", setup);
        let mut verified = 0u32;
        // The replays themselves (warm-up, capture, timed launches): the measurement's
        // time less its fills and checks, which count as their own stages.
        let inner = [
            "timing_fill",
            "timing_verify",
            "timing_verify_all",
            "timing_reference",
            "timing_guards",
        ];
        let (inner_before, replays) = (stages.sum_of(&inner), Instant::now());
        let samples = measure(
            gpu,
            plan,
            warmup_ms,
            shape.contend_us,
            sets.len(),
            |g, set| launch_sequence(g, functions, &shape.launches, &args[set]),
            |g, replay| -> Result<(), Stop> {
                let _t = stages.timer("timing_fill");
                let jobs: Vec<FillJob> = sets
                    .iter()
                    .enumerate()
                    .flat_map(|(i, s)| fills(replay, i, &set_inputs(s)))
                    .collect();
                gate.fill(g, &jobs)?;
                for s in &sets {
                    s.output.fill(g, 0xff)?;
                    s.poison_scratch(g, SCRATCH_NAN)?;
                }
                g.memset_at(&flush, 0, flush.bytes(), 0)?;
                Ok(())
            },
            |_, replay| -> Result<(), Stop> {
                let (since, parts) = (Instant::now(), stages.sum_of(&CHECK_PARTS));
                // After the last replay every set, else one chosen at random.
                let which: Vec<usize> = if replay.last {
                    (0..sets.len()).collect()
                } else {
                    vec![pick.random_range(0..sets.len())]
                };
                let failure = match check_sets(replay, &which)? {
                    Some(f) => Some(f),
                    // Nothing the worker does between replays writes a guard region (fills
                    // and poison write the payloads), so a change made in any replay is still
                    // there after the last: the guards are checked once, then.
                    None if replay.last => guards()?,
                    None => None,
                };
                if let Some(f) = failure {
                    return Err(Stop::Check(format!("{}: {f}", describe(vars))));
                }
                let stage = if replay.last {
                    "timing_verify_all"
                } else {
                    "timing_verify"
                };
                exclusive(stage, since, parts);
                verified += which.len() as u32;
                Ok(())
            },
        )?;
        self.stages.add_ms(
            "timing_replays",
            replays.elapsed().as_secs_f64() * 1e3 - (self.stages.sum_of(&inner) - inner_before),
        );
        // What the sets held last (the batch's contents, right if the variant is) is
        // poisoned before the memory goes back to the pool for the next variant.
        for s in &sets {
            s.output.fill(gpu, 0xff)?;
        }
        let (median, p20, p80) = timing::summary(&samples);
        let info = &gpu.info;
        let floor = timing::roofline_floor_us(
            problem.flops(vars),
            problem.min_bytes(vars),
            info,
            problem.compute_elem(vars),
        );
        if let Some(floor) = floor.filter(|f| median < *f) {
            return Err(Stop::Timing(format!(
                "{}: a median of {median:.3} µs per call is below the {floor:.3} µs this GPU needs at least for the work ({:.1} GFLOP at its dense tensor peak, {:.1} MB at its memory bandwidth): not a measurement of the work",
                describe(vars),
                problem.flops(vars) / 1e9,
                problem.min_bytes(vars) / 1e6
            )));
        }
        let tflops = problem.flops(vars) / (median * 1e-6) / 1e12;
        let elem = ElemType::from_dtype(dtype).unwrap_or(ElemType::F16);
        let peak = timing::dense_peak_tflops(
            info.compute_capability,
            info.multiprocessors,
            info.clock_mhz,
            elem,
        );
        let out_of_contention = timing::out_of_contention(&samples, shape.contend_us);
        Ok(TimingReport {
            median_us: median,
            p20_us: p20,
            p80_us: p80,
            samples_us: samples,
            launches_per_sample: sets.len() as u32,
            input_sets: sets.len() as u32,
            tflops,
            peak_fraction: peak.map(|p| tflops / p),
            gb_per_s: problem.min_bytes(vars) / (median * 1e-6) / 1e9,
            verified_launches: verified,
            floor_us: floor,
            out_of_contention,
        })
    }
}
