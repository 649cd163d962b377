//! Where a run gets its results: the gates on this host's GPUs (render, then compiles
//! running ahead on CPU threads, then one GPU slot per worker), or a recorded landscape
//! (the replay evaluator).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use evo_core::{Gate, Genome, ShapeMeasurement, Status, Target, Vars};
use evo_eval::landscape::Landscape;
use evo_eval::pipeline::{family_candidates, Evaluator, GateSettings, Verdict};
use evo_eval::profile::SanitizerVerdict;
use evo_eval::protocol::ShapeResult;
use evo_gpu::device::DriverInfo;
use evo_gpu::Compiler;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::context::Context;
use crate::error::{refuse, MissingComponent, Result, ResultExt, UsageError};
use crate::scoring::times_on;
use crate::usage;
use evo_core::fitness::{is_regressed, slow_shapes};

/// The outcome of one genome over every specialization.
#[derive(Clone, Debug)]
pub struct GenomeResult {
    pub status: Status,
    pub gate: Option<Gate>,
    pub detail: String,
    /// One measurement per shape, as the database stores them.
    pub shapes: Vec<ShapeMeasurement>,
    pub resources: serde_json::Value,
    pub source_key: Option<String>,
    /// Wall time of the whole evaluation (compile included), ms.
    pub eval_ms: f64,
    /// Time the GPU worker spent on it, ms.
    pub gpu_ms: f64,
    /// Where its time went, ms per stage: `compile` (NVRTC, cache misses), then the
    /// worker's stages (`evo_eval`'s `JobResult::stages_ms`).
    pub stages_ms: BTreeMap<String, f64>,
    /// Why its timing stopped before every shape was timed: the [`RegressionRule`] already
    /// held (it is then `regressed`, with no fitness: none comes from a partial set).
    pub timing_stopped: Option<String>,
}

/// `[search]`'s regression rule against the run's baseline, applied between a genome's
/// specializations: once the shapes timed so far make it regressed, more shapes can only
/// keep it so (the rule counts slow shapes), and its other specializations are checked for
/// correctness but not timed.
#[derive(Clone, Debug)]
pub struct RegressionRule {
    /// The configured shapes' keys and the baseline's median on each, µs.
    pub keys: Vec<String>,
    pub baseline: Vec<f64>,
    /// Slower than the baseline by more than this fraction on a shape counts it.
    pub tolerance: f64,
    /// This many slow shapes make a genome regressed.
    pub shapes: usize,
}

impl RegressionRule {
    /// Why `measured` is already regressed (the slow shapes), if it is.
    fn regressed(&self, measured: &[ShapeMeasurement], timed: usize) -> Option<String> {
        let times = times_on(measured, &self.keys);
        // The rule the final score applies.
        if !is_regressed(&self.baseline, &times, self.tolerance, self.shapes) {
            return None;
        }
        let slow: Vec<&str> = slow_shapes(&self.baseline, &times, self.tolerance)
            .into_iter()
            .map(|i| self.keys[i].as_str())
            .collect();
        Some(format!(
            "regressed: more than {:.0}% slower than the baseline on {} (the rule needs {}); timing stopped after {timed} of {} shapes, so no fitness",
            100.0 * self.tolerance,
            slow.join(" and "),
            self.shapes,
            self.keys.len()
        ))
    }
}

/// The slowest elite's median on each configured shape, once the population holds its
/// elites: a genome whose first samples on a shape are all clearly slower than that is out of
/// contention there and is sampled no further on it (`evo_eval::timing::out_of_contention`).
/// The baseline is never given one, so it keeps its full timing.
#[derive(Clone, Debug, PartialEq)]
pub struct Contention {
    /// Shape keys and the slowest elite's median on each, µs.
    pub times: BTreeMap<String, f64>,
}

impl Contention {
    /// From the elites' measurements; `None` for fewer than `elites` of them (the search is
    /// still filling its population: every genome may become one). A shape an elite was not
    /// timed on has no contention time.
    pub fn of(keys: &[String], elites: &[Vec<ShapeMeasurement>], wanted: usize) -> Option<Self> {
        if wanted == 0 || elites.len() < wanted {
            return None;
        }
        let times = keys
            .iter()
            .filter_map(|k| {
                let slowest = elites
                    .iter()
                    .map(|m| evo_core::median_on(m, k))
                    .try_fold(0.0f64, |acc, t| t.map(|t| acc.max(t)))?;
                Some((k.clone(), slowest))
            })
            .collect();
        Some(Contention { times })
    }

    fn time_for(&self, vars: &Vars) -> Option<f64> {
        self.times.get(&evo_core::shape_key(vars)).copied()
    }
}

impl GenomeResult {
    fn failed(status: Status, gate: Option<Gate>, detail: String, started: Instant) -> Self {
        GenomeResult {
            status,
            gate,
            detail,
            shapes: vec![],
            resources: serde_json::Value::Null,
            source_key: None,
            eval_ms: started.elapsed().as_secs_f64() * 1e3,
            gpu_ms: 0.0,
            stages_ms: BTreeMap::new(),
            timing_stopped: None,
        }
    }
}

/// The GPU evaluator of a run.
pub struct GpuBackend {
    pub evaluator: Arc<Evaluator>,
    pub context: Arc<Context>,
    pub edges: Arc<Vec<Vars>>,
    /// Compilations in flight at once (CPU threads), handed to genomes in turn.
    pub compiles: Arc<CompileQueue>,
    /// One permit per GPU worker: taken after compiling, before evaluating.
    pub gpu_slots: Arc<Semaphore>,
    /// The run's seed: correctness inputs are a function of it and the variant.
    pub salt: u64,
}

/// The host's compile slots (CPU threads), taken by one caller at a time: a caller takes
/// a slot for each of its items, each as one frees, before the next caller takes any.
/// Handed out one by one in arrival order instead, the specializations of a generation's
/// genomes interleaved, every genome finished compiling at about the same time, and the
/// GPU waited for the whole generation's compiles (69% busy on an H100 with the Hopper
/// config, docs/RESULTS.md session 12).
pub struct CompileQueue {
    slots: Arc<Semaphore>,
    size: usize,
    turn: tokio::sync::Mutex<()>,
}

impl CompileQueue {
    pub fn new(slots: usize) -> Self {
        let size = slots.max(1);
        CompileQueue {
            slots: Arc::new(Semaphore::new(size)),
            size,
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// How many compilations run at once.
    pub fn slots(&self) -> usize {
        self.size
    }

    /// Starts `work` on a blocking thread for every item, each holding one slot; returns
    /// once all have started (their results come through the handles, in item order).
    pub async fn run_all<I, T, F>(&self, items: Vec<I>, work: F) -> Vec<JoinHandle<T>>
    where
        I: Send + 'static,
        T: Send + 'static,
        F: Fn(I) -> T + Clone + Send + 'static,
    {
        let _turn = self.turn.lock().await;
        let mut started = Vec::with_capacity(items.len());
        for item in items {
            let slot = self
                .slots
                .clone()
                .acquire_owned()
                .await
                .expect("semaphore open");
            let work = work.clone();
            started.push(tokio::task::spawn_blocking(move || {
                let _slot = slot;
                work(item)
            }));
        }
        started
    }
}

pub enum Backend {
    Gpu(GpuBackend),
    Replay {
        landscape: Landscape,
        file: String,
        /// The SHA-256 of the landscape's JSON text ([`Landscape::load_with_digest`]).
        sha256: String,
    },
}

/// The GPUs a `--gpus` list (`0,1`, or `all`) names, in its order without repeats (empty
/// for `all`), from its text alone: a list of another form is a [`UsageError`], whatever
/// this machine has and whatever evaluator the run uses.
pub fn parse_gpus(list: &str) -> Result<Vec<u32>> {
    let mut named: Vec<u32> = Vec::new();
    if list.trim() == "all" {
        return Ok(named);
    }
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let g: u32 = part.parse().map_err(|_| {
            UsageError(format!(
                "--gpus: `{part}` is not a GPU number (give e.g. 0,1 or all)"
            ))
        })?;
        if !named.contains(&g) {
            named.push(g);
        }
    }
    if named.is_empty() {
        usage!("--gpus names no GPU (give e.g. 0,1 or all)");
    }
    Ok(named)
}

/// The GPUs named by `--gpus` (`0,1`, or `all`), checked against what the driver sees:
/// they must exist and be the same model (their timings are compared). No GPU at all is
/// a [`MissingComponent`].
pub fn select_gpus(list: &str) -> Result<(Vec<u32>, DriverInfo)> {
    // The list's own form first: a usage error, whatever this machine has.
    let named = parse_gpus(list)?;
    let info = evo_gpu::device::probe()
        .map_err(|e| MissingComponent(format!("this command runs kernels and needs a GPU: {e}")))?;
    if info.devices.is_empty() {
        return Err(MissingComponent(
            "this command runs kernels and needs a GPU: the driver sees none".into(),
        )
        .into());
    }
    let out: Vec<u32> = if named.is_empty() {
        (0..info.devices.len() as u32).collect()
    } else {
        named
    };
    if let Some(g) = out.iter().find(|g| **g as usize >= info.devices.len()) {
        refuse!(
            "--gpus: GPU {g} does not exist (the driver sees {} GPU(s))",
            info.devices.len()
        );
    }
    let first = &info.devices[out[0] as usize];
    for g in &out[1..] {
        let d = &info.devices[*g as usize];
        if d.name != first.name {
            refuse!(
                "--gpus mixes {} and {}: their timings would not compare",
                first.name,
                d.name
            );
        }
    }
    Ok((out, info))
}

/// The target of GPU `gpu`: its architecture and its shared-memory limit.
pub fn gpu_target(info: &DriverInfo, gpu: u32) -> Result<Target> {
    let d = &info.devices[gpu as usize];
    let mut t = Target::from_arch(&Target::arch_for_capability(
        d.compute_capability.0,
        d.compute_capability.1,
    ))?;
    t.max_smem_per_block = d.max_smem_per_block_optin;
    Ok(t)
}

impl GpuBackend {
    /// Every gate of the context's config on `gpus`, one worker per GPU, with as many
    /// compiles in flight as this host has CPUs.
    pub fn new(context: Arc<Context>, gpus: &[u32], salt: u64) -> Result<GpuBackend> {
        let config = &context.config;
        let target = context.target.target.clone();
        let compiler = Compiler::for_config(&target.arch, &config.compile)?;
        let evaluator = Evaluator::on_gpus(
            context.family.problem,
            compiler,
            gpus,
            config.timeouts.clone(),
            GateSettings {
                target,
                static_rules: context.family.static_rules(config.static_rules.clone()),
                correctness: config.correctness.clone(),
                timing: Some(config.timing.clone()),
            },
        )
        .context(|| "starting the GPU workers".into())?;
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        Ok(GpuBackend {
            evaluator: Arc::new(evaluator),
            edges: Arc::new(context.edge_shapes()),
            context,
            compiles: Arc::new(CompileQueue::new(cpus)),
            gpu_slots: Arc::new(Semaphore::new(gpus.len())),
            salt,
        })
    }

    /// Renders and compiles every specialization (ahead, on CPU threads), then evaluates
    /// them back to back under one GPU slot, stopping at the first that fails. Holding the
    /// slot for the whole genome makes genomes finish in the order they reached a GPU:
    /// handed out per specialization, the slots interleaved every genome in flight, none
    /// finished until all nearly had, and a time budget ended with a whole wave of
    /// half-evaluated genomes thrown away (2 results in a 110 s search on an H100).
    /// `None`: `stop` was set before a GPU took it. With `regression`, a specialization
    /// after the genome is known to be regressed is checked but not timed.
    async fn evaluate(
        &self,
        id: u64,
        genome: &Genome,
        stop: &AtomicBool,
        regression: Option<&RegressionRule>,
        contention: Option<&Contention>,
    ) -> Option<GenomeResult> {
        let started = Instant::now();
        let c = &self.context;
        let candidates = match family_candidates(&c.family, &c.space, &c.specs, genome, &self.edges)
        {
            Ok(c) => c,
            Err(e) => {
                return Some(GenomeResult::failed(
                    Status::RenderFailed,
                    Some(Gate::Render),
                    e,
                    started,
                ))
            }
        };
        // Every specialization compiles at once, each holding one of the host's compile
        // permits; a genome takes its permits before the next genome takes any, so the
        // first genome of a generation reaches a GPU after one compile.
        let ev = self.evaluator.clone();
        let compiling = self
            .compiles
            .run_all(candidates, move |c| {
                // Compile and read the SASS before taking a GPU slot: on an H200 the
                // cuobjdump run inside the slot left the GPU idle half the time.
                let compiled = ev.compile(&c);
                let sass = compiled.as_ref().ok().and_then(|c| ev.sass_of(c));
                (c, compiled, sass)
            })
            .await;
        let mut compiled = Vec::new();
        for task in compiling {
            let (c, result, sass) = task.await.expect("compile task");
            match result {
                Ok(result) => compiled.push((c, result, sass)),
                Err(e) => {
                    // The genome has failed; its other specializations need no GPU time.
                    let failed = Verdict::compile_failed(&c.label, e.to_string());
                    return Some(from_verdicts(vec![failed], started));
                }
            }
        }
        let _slot = self.gpu_slots.acquire().await.expect("semaphore open");
        if stop.load(Ordering::SeqCst) {
            return None;
        }
        let mut verdicts: Vec<Verdict> = Vec::new();
        let mut timing_stopped = None;
        for (i, (mut c, result, sass)) in compiled.into_iter().enumerate() {
            if timing_stopped.is_none() {
                if let Some(rule) = regression {
                    let measured: Vec<ShapeMeasurement> = verdicts
                        .iter()
                        .filter_map(|v| v.result.as_ref())
                        .flat_map(|r| r.shapes.iter().map(measurement))
                        .collect();
                    let timed = measured.iter().filter(|m| m.median_us.is_some()).count();
                    timing_stopped = rule.regressed(&measured, timed);
                }
            }
            if timing_stopped.is_some() {
                c.shapes.iter_mut().for_each(|s| s.timed = false);
            }
            for s in &mut c.shapes {
                s.contend_us = contention.and_then(|k| k.time_for(&s.vars));
            }
            let v = self
                .evaluator
                .evaluate_with_sass(c, result, sass, id * 16 + i as u64, self.salt)
                .await;
            let failed = v.status != Status::Evaluated;
            verdicts.push(v);
            if failed {
                break; // the genome has failed; its other specializations need no GPU time
            }
        }
        let mut r = from_verdicts(verdicts, started);
        if r.status == Status::Evaluated {
            r.timing_stopped = timing_stopped;
        }
        Some(r)
    }
}

impl GpuBackend {
    /// The sanitizer gate on `genome` (every specialization, on its smallest shape of some
    /// size), on a GPU no worker is using meanwhile.
    pub async fn sanitize(&self, genome: &Genome) -> SanitizerVerdict {
        let c = &self.context;
        let candidates = match family_candidates(&c.family, &c.space, &c.specs, genome, &self.edges)
        {
            Ok(c) => c,
            Err(e) => {
                return SanitizerVerdict::NotRun {
                    reason: format!("the genome does not render: {e}"),
                }
            }
        };
        let problem = c.family.problem;
        self.evaluator
            .pool
            .with_idle_gpu(move |gpu, exe| SanitizerVerdict::of(&exe, problem, &candidates, gpu))
            .await
    }
}

/// A shape's record from the worker's report: the timing, and the worst error of any
/// trial.
fn measurement(s: &ShapeResult) -> ShapeMeasurement {
    let worst = s.worst().cloned().unwrap_or_default();
    let t = s.timing.as_ref();
    ShapeMeasurement {
        shape: s.vars.clone(),
        median_us: t.map(|t| t.median_us),
        p20_us: t.map(|t| t.p20_us),
        p80_us: t.map(|t| t.p80_us),
        samples: t.map(|t| t.samples_us.clone()).unwrap_or_default(),
        tflops: t.map(|t| t.tflops),
        peak_fraction: t.and_then(|t| t.peak_fraction),
        max_abs_err: Some(worst.max_abs),
        rel_l2: Some(worst.rel_l2),
    }
}

fn from_verdicts(verdicts: Vec<Verdict>, started: Instant) -> GenomeResult {
    let failed = verdicts.iter().find(|v| v.status != Status::Evaluated);
    let (status, gate, detail) = match failed {
        Some(v) => (
            v.status,
            v.gate,
            format!("{}: {}", v.label.split('@').nth(1).unwrap_or(""), v.detail),
        ),
        None => (Status::Evaluated, None, String::new()),
    };
    let mut shapes = Vec::new();
    let mut gpu_ms = 0.0;
    let mut stages_ms: BTreeMap<String, f64> = BTreeMap::new();
    for c in verdicts.iter().filter_map(|v| v.compile.as_ref()) {
        if !c.cached {
            *stages_ms.entry("compile".into()).or_default() += c.ms;
        }
    }
    for r in verdicts.iter().filter_map(|v| v.result.as_ref()) {
        gpu_ms += r.elapsed_ms;
        shapes.extend(r.shapes.iter().map(measurement));
        for (stage, ms) in &r.stages_ms {
            *stages_ms.entry(stage.clone()).or_default() += ms;
        }
    }
    let resources = serde_json::json!(verdicts
        .iter()
        .map(|v| serde_json::json!({
            "specialization": v.label.split('@').nth(1).unwrap_or(""),
            "kernels": v.static_kernels,
            "compile": v.compile,
            "seeds": v.seeds,
        }))
        .collect::<Vec<_>>());
    GenomeResult {
        status,
        gate,
        detail,
        shapes,
        resources,
        source_key: verdicts
            .iter()
            .find_map(|v| v.compile.as_ref().map(|c| c.key.clone())),
        eval_ms: started.elapsed().as_secs_f64() * 1e3,
        gpu_ms,
        stages_ms,
        timing_stopped: None,
    }
}

impl Backend {
    /// `gpu`, or `replay:FILE`: what the run stores as its evaluator.
    pub fn label(&self) -> String {
        match self {
            Backend::Gpu(_) => "gpu".into(),
            Backend::Replay { file, .. } => format!("replay:{file}"),
        }
    }

    /// How many of a generation's genomes may still be in evaluation when the next is
    /// proposed: `per_gpu` for each GPU; none for a replay (its runs stay a function of
    /// the seed alone), unless tests ask for it with `EVO_REPLAY_OVERLAP`.
    pub fn overlap(&self, per_gpu: usize) -> usize {
        match self {
            Backend::Gpu(b) => per_gpu * b.evaluator.pool.size(),
            Backend::Replay { .. } => std::env::var("EVO_REPLAY_OVERLAP")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        }
    }

    /// Evaluations in flight at once: every GPU busy plus compilation running ahead.
    pub fn parallelism(&self) -> usize {
        match self {
            Backend::Gpu(b) => b.evaluator.pool.size() + b.compiles.slots(),
            Backend::Replay { .. } => 1,
        }
    }

    /// Evaluates one genome; `None` when `stop` was set before it reached the GPU (it
    /// stays pending). Compilation runs ahead; a GPU slot is taken only after it, and
    /// `stop` is checked then, so Ctrl-C waits for the evaluations on the GPUs, not for
    /// everything compiled ahead.
    pub async fn evaluate(
        &self,
        id: u64,
        genome: &Genome,
        stop: &AtomicBool,
        regression: Option<&RegressionRule>,
        contention: Option<&Contention>,
    ) -> Option<GenomeResult> {
        match self {
            Backend::Replay { landscape, .. } => {
                let started = Instant::now();
                // Tests slow the replay down to kill a search mid-generation.
                if let Some(ms) = std::env::var("EVO_REPLAY_DELAY_MS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                {
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                }
                if stop.load(Ordering::SeqCst) {
                    return None;
                }
                Some(replay(landscape, genome, started))
            }
            Backend::Gpu(b) => b.evaluate(id, genome, stop, regression, contention).await,
        }
    }

    /// The sanitizer gate on `genome`; the replay evaluator has no kernels to run.
    pub async fn sanitize(&self, genome: &Genome) -> SanitizerVerdict {
        match self {
            Backend::Gpu(b) => b.sanitize(genome).await,
            Backend::Replay { .. } => SanitizerVerdict::NotRun {
                reason: "the replay evaluator runs no kernels".into(),
            },
        }
    }

    /// Each GPU's time on jobs as a fraction of `wall_s`; stops the workers.
    pub async fn shut_down(&self, wall_s: f64) -> Vec<(u32, f64)> {
        match self {
            Backend::Gpu(b) => {
                let busy = b.evaluator.pool.busy().await;
                b.evaluator.pool.shutdown().await;
                busy.into_iter()
                    .map(|(g, d)| (g, d.as_secs_f64() / wall_s.max(1e-9)))
                    .collect()
            }
            Backend::Replay { .. } => Vec::new(),
        }
    }
}

fn replay(landscape: &Landscape, genome: &Genome, started: Instant) -> GenomeResult {
    let Some(p) = landscape.get(&genome.canonical()) else {
        return GenomeResult::failed(
            Status::NotRecorded,
            None,
            "replay: this genome is not in the recorded landscape".into(),
            started,
        );
    };
    GenomeResult {
        status: p.status,
        gate: p.gate,
        detail: if p.detail.is_empty() {
            "replay".into()
        } else {
            format!("replay: {}", p.detail)
        },
        shapes: p.shapes.clone(),
        resources: serde_json::json!({"replayed": true}),
        source_key: None,
        eval_ms: started.elapsed().as_secs_f64() * 1e3,
        gpu_ms: p.eval_ms.unwrap_or(0.0),
        stages_ms: BTreeMap::new(),
        timing_stopped: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A caller's items take slots before the next caller's. Two slots, three callers of
    /// two items: a takes both slots; b, then c, queue while a's items hold them. Handed
    /// out in arrival order, b1 and c1 would take the slots a frees and b2 would wait for
    /// them; in turn, b takes both and c waits for b. Nothing here rests on a sleep being
    /// long enough: a's items hold their slots until the test opens a gate, and each
    /// item keeps its slot until its partner has started (or 2 s have passed, which only
    /// an arrival-order queue lets happen).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn compile_slots_go_to_one_genome_at_a_time() {
        use std::sync::{Condvar, Mutex};
        let queue = Arc::new(CompileQueue::new(2));
        let started = Arc::new((Mutex::new(Vec::<String>::new()), Condvar::new()));
        let gate = Arc::new(tokio::sync::RwLock::new(()));
        let closed = gate.clone().write_owned().await;
        let work = |name: &'static str| {
            let (started, gate) = (started.clone(), gate.clone());
            move |i: i32| {
                let (list, changed) = &*started;
                let mut list = list.lock().unwrap();
                list.push(format!("{name}{i}"));
                changed.notify_all();
                let partner_missing =
                    |l: &mut Vec<String>| l.iter().filter(|s| s.starts_with(name)).count() < 2;
                let two_s = std::time::Duration::from_secs(2);
                drop(
                    changed
                        .wait_timeout_while(list, two_s, partner_missing)
                        .unwrap(),
                );
                drop(gate.blocking_read());
                i * 10
            }
        };
        let results = |handles: Vec<JoinHandle<i32>>| async move {
            let mut results = Vec::new();
            for h in handles {
                results.push(h.await.unwrap());
            }
            results
        };
        let a = queue.run_all(vec![1, 2], work("a")).await;
        let queued = |name: &'static str| {
            let (queue, work) = (queue.clone(), work(name));
            tokio::spawn(async move { results(queue.run_all(vec![1, 2], work).await).await })
        };
        let b = queued("b");
        // b holds the turn while it waits for a slot; c queues behind it. (The bound
        // lets a queue without turns reach the asserts, which it fails.)
        let waited = Instant::now();
        while queue.turn.try_lock().is_ok() && waited.elapsed().as_secs() < 5 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let c = queued("c");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        drop(closed);
        assert_eq!(results(a).await, vec![10, 20], "results in item order");
        for caller in [b, c] {
            assert_eq!(caller.await.unwrap(), vec![10, 20], "results in item order");
        }
        let started = started.0.lock().unwrap().clone();
        let at = |item: &str| started.iter().position(|s| s == item).unwrap();
        for (first, then) in [("a", "b"), ("b", "c")] {
            for i in 1..=2 {
                for j in 1..=2 {
                    assert!(
                        at(&format!("{first}{i}")) < at(&format!("{then}{j}")),
                        "{first}'s items start before {then}'s: {started:?}"
                    );
                }
            }
        }
    }

    fn timed(seq: i64, median_us: Option<f64>) -> ShapeMeasurement {
        ShapeMeasurement {
            shape: [("SEQ".to_string(), seq.into())].into_iter().collect(),
            median_us,
            p20_us: None,
            p80_us: None,
            samples: vec![],
            tflops: None,
            peak_fraction: None,
            max_abs_err: None,
            rel_l2: None,
        }
    }

    /// Timing stops once the shapes timed so far already make the genome regressed (the
    /// rule of `score`), and only then; untimed shapes count as not slow.
    #[test]
    fn regression_rule_stops_timing_only_when_already_regressed() {
        let keys: Vec<String> = [1, 2, 3, 4].iter().map(|s| format!("SEQ={s}")).collect();
        let rule = RegressionRule {
            keys,
            baseline: vec![10.0; 4],
            tolerance: 0.10,
            shapes: 2,
        };
        let one_slow = [timed(1, Some(12.0)), timed(2, Some(10.5))];
        assert_eq!(rule.regressed(&one_slow, 2), None);
        let untimed = [timed(1, Some(12.0)), timed(2, None), timed(3, None)];
        assert_eq!(rule.regressed(&untimed, 1), None);
        let two_slow = [
            timed(1, Some(12.0)),
            timed(2, Some(9.0)),
            timed(3, Some(11.5)),
        ];
        let why = rule
            .regressed(&two_slow, 3)
            .expect("regressed on two shapes");
        assert!(
            why.contains("SEQ=1 and SEQ=3")
                && why.contains("after 3 of 4 shapes")
                && why.contains("no fitness"),
            "{why}"
        );
        // What the final score would say on the same times.
        let times = times_on(&two_slow, &rule.keys);
        assert!(is_regressed(&rule.baseline, &times, 0.10, 2));
        // `regression_shapes = 0`: never regressed, so timing goes on.
        let off = RegressionRule { shapes: 0, ..rule };
        assert_eq!(off.regressed(&two_slow, 3), None);
    }

    /// The contention time of a shape is the slowest elite's median there, once the
    /// population holds its elites; a shape not every elite was timed on has none.
    #[test]
    fn contention_is_the_slowest_elite_per_shape() {
        let keys: Vec<String> = [1, 2, 3].iter().map(|s| format!("SEQ={s}")).collect();
        let elites = vec![
            vec![timed(1, Some(10.0)), timed(2, Some(30.0)), timed(3, None)],
            vec![
                timed(1, Some(12.0)),
                timed(2, Some(20.0)),
                timed(3, Some(5.0)),
            ],
        ];
        assert_eq!(
            Contention::of(&keys, &elites, 3),
            None,
            "population not full"
        );
        assert_eq!(Contention::of(&keys, &elites, 0), None);
        let c = Contention::of(&keys, &elites, 2).expect("two elites");
        assert_eq!(c.times.get("SEQ=1"), Some(&12.0));
        assert_eq!(c.times.get("SEQ=2"), Some(&30.0));
        assert_eq!(c.times.get("SEQ=3"), None, "one elite untimed there");
        assert_eq!(c.time_for(&timed(2, None).shape), Some(30.0));
    }
}
