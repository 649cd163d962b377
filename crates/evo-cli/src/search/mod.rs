//! `evo search`: the main job. Generations of genomes proposed by a strategy
//! (evo-search), evaluated through the gates on the GPU workers (or answered from a
//! recorded landscape), stored in the population database (evo-store) as they finish.
//!
//! Survives anything: every result is committed when it arrives; a killed run leaves
//! its unevaluated candidates pending, and `--resume` evaluates those, then carries on
//! with the same strategy state (the strategy is a pure function of the seed and the
//! stored history, so nothing else needs saving).
//!
//! One loop serves one host and many (`evo join RUN --db postgres://...`): each host
//! claims pending candidates with a lease (extended by a heartbeat while it evaluates),
//! records results under its lease, and when no candidate is pending, whichever host
//! gets there first completes the generation and stores the next one's proposals in one
//! compare-and-set transaction ([`evo_store::Store::advance_generation`]). Proposals
//! depend only on the seed and the recorded results, so every host would propose the
//! same genomes, and the run equals a single-process run with the same seed and results.

pub mod backend;
pub mod baseline;
pub mod budget;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use evo_core::config::SearchConfig;
use evo_core::fitness::{geomean_speedup, is_regressed};
use evo_core::{Genome, Target, Vars};
use evo_eval::landscape::Landscape;
use evo_eval::pipeline::{Evaluator, GateSettings};
use evo_eval::pool::{Pool, WorkerCommand};
use evo_eval::Status;
use evo_gpu::{CompileCache, Compiler};
use evo_search::{History, Insights, Outcome, SearchParams, StrategyKind};
use evo_store::{
    Advance, CandidateResult, EliteEntry, GenerationRow, GpuBusy, HostStats, NewCandidate,
    NewMeasurement, NewRun, Origin, RunId, RunSettings, RunStatus, SearchState, Store,
};

use backend::{Backend, GenomeResult, GpuBackend};
use budget::Budget;

/// What `evo search` was asked to do.
pub struct Options {
    pub config: Option<PathBuf>,
    pub run: Option<String>,
    pub resume: Option<String>,
    /// `evo join RUN`: work on a run another host started.
    pub join: Option<String>,
    /// How long a claimed candidate stays this host's without a heartbeat (new runs;
    /// `--resume` may change it; joiners use the run's).
    pub lease: Option<Duration>,
    /// New runs: accept hosts whose GPUs differ from the first host's.
    pub allow_mixed_gpus: bool,
    pub db: String,
    pub budget: Option<Budget>,
    pub patience: Option<u32>,
    pub seed: Option<u64>,
    pub strategy: Option<String>,
    /// `gpu` or `replay:FILE`; `None`: `gpu` for a new run, the run's own otherwise.
    pub evaluator: Option<String>,
    pub gpus: String,
    pub templates: Option<PathBuf>,
    pub progress: bool,
}

/// Counters of one invocation.
#[derive(Default)]
struct Tally {
    evaluated: u64,
    by_status: BTreeMap<&'static str, u64>,
    gpu_ms: f64,
    /// Time spent waiting for the database (claims, results, advances, polls).
    db: Duration,
    /// Generations this host advanced.
    advanced: u32,
    /// Results refused because the lease had gone to another host.
    lost: u64,
}

/// Default lease: long enough for any evaluation's heartbeat gap, short enough that a
/// dead host's genomes come back soon.
const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// How long `evo join` waits for its run to be created and given a baseline.
const JOIN_WAIT: Duration = Duration::from_secs(600);

/// This host's name (for host ids and messages).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

/// Whether a process of this host is alive (`None`: cannot tell here).
fn pid_alive(pid: u32) -> Option<bool> {
    if !Path::new("/proc/self").exists() {
        return None;
    }
    Some(Path::new(&format!("/proc/{pid}")).exists())
}

/// Times a database call into `tally.db`.
macro_rules! db {
    ($tally:expr, $e:expr) => {{
        let t = Instant::now();
        let r = $e;
        $tally.db += t.elapsed();
        r
    }};
}

/// The config's strategy parameters, with `--seed` in place of the config's seed.
pub(crate) fn params(cfg: &SearchConfig, seed: Option<u64>) -> SearchParams {
    SearchParams {
        seed: seed.unwrap_or(cfg.search.params.seed),
        ..cfg.search.params.clone()
    }
}

fn origin(o: evo_search::Origin) -> Origin {
    match o {
        evo_search::Origin::Seed => Origin::Seed,
        evo_search::Origin::Random => Origin::Random,
        evo_search::Origin::Mutation => Origin::Mutation,
        evo_search::Origin::Crossover => Origin::Crossover,
        evo_search::Origin::Exhaustive => Origin::Exhaustive,
    }
}

/// The search outcome of a stored candidate.
fn outcome(c: &evo_store::Candidate) -> Outcome {
    match (c.status, c.fitness) {
        (None, _) => Outcome::Pending,
        (Some(s), Some(f)) if s.has_fitness() => Outcome::Evaluated { fitness: f },
        _ => Outcome::Failed,
    }
}

/// Log lines of the run go to `<db folder>/evo-logs/<run>.log` as well as stderr.
fn run_log_path(db: &str, run: &str) -> PathBuf {
    if db.contains("://") && !db.starts_with("sqlite:") {
        // A server: the log stays on this host, in the working directory.
        return Path::new("evo-logs").join(format!("{run}.log"));
    }
    let db_path = Path::new(
        db.strip_prefix("sqlite://")
            .or(db.strip_prefix("sqlite:"))
            .unwrap_or(db),
    );
    db_path
        .parent()
        .unwrap_or(Path::new("."))
        .join("evo-logs")
        .join(format!("{run}.log"))
}

pub fn run(o: Options) -> Result<std::process::ExitCode> {
    let rt = crate::setup::runtime()?;
    rt.block_on(run_async(o))
}

async fn run_async(o: Options) -> Result<std::process::ExitCode> {
    let store = Store::open(&o.db)
        .await
        .with_context(|| format!("opening the population database {}", o.db))?;

    // The run: a new one, or one to resume (its stored config is the truth).
    // A resumed run keeps its own seed and strategy (flags cannot change them).
    let mut stored_seed_and_strategy: Option<(u64, String)> = None;
    let mut existing: Option<evo_store::Run> = None;
    let (run_id, run_name, config) = match o.resume.as_ref().or(o.join.as_ref()) {
        Some(name) => {
            let mut run = store.run(name).await?;
            if run.is_none() && o.join.is_some() {
                // Hosts started together: the first may not have created the run yet.
                eprintln!("waiting for run `{name}` to be created (up to 10 minutes)");
                let waited = Instant::now();
                while run.is_none() && waited.elapsed() < JOIN_WAIT {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    run = store.run(name).await?;
                }
            }
            let run =
                run.ok_or_else(|| anyhow!("no run `{name}` in {}", evo_store::redact_url(&o.db)))?;
            let path = run
                .state()?
                .and_then(|s| s.config_path)
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(format!("{}.toml", run.name)));
            if let Some(given) = &o.config {
                let text = std::fs::read_to_string(given)
                    .with_context(|| format!("reading {}", given.display()))?;
                if text != run.config_toml {
                    bail!("{} differs from the config run `{}` started with; resume without -c (the stored config is used) or start a new run", given.display(), run.name);
                }
            }
            let config = SearchConfig::parse(&path, &run.config_toml)?;
            if run.status == RunStatus::Finished {
                if o.join.is_some() {
                    bail!("run `{}` has finished: there is nothing to join (continue it with evo search --resume {} --db ...)", run.name, run.name);
                }
                eprintln!("note: run `{}` had finished; continuing it", run.name);
            }
            if o.seed.is_some_and(|s| s != run.seed)
                || o.strategy.as_ref().is_some_and(|s| *s != run.strategy)
            {
                bail!("run `{}` uses seed {} and strategy {}; a resumed run keeps them (drop --seed/--strategy)", run.name, run.seed, run.strategy);
            }
            stored_seed_and_strategy = Some((run.seed, run.strategy.clone()));
            let out = (run.id, run.name.clone(), config);
            existing = Some(run);
            out
        }
        None => {
            let path = o
                .config
                .as_ref()
                .ok_or_else(|| anyhow!("give a config with -c (or --resume RUN)"))?;
            let config = SearchConfig::load(path)?;
            let name = o.run.clone().unwrap_or_else(|| {
                let secs = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                format!("{}-{secs}", config.family)
            });
            (RunId(0), name, config)
        }
    };
    let crate_templates = o.templates.clone();
    let root = crate::setup::templates_root(crate_templates.as_deref(), &config)?;
    let family = evo_kernels::Family::load(&root, &config.problem, &config.family)?;
    let problem = family.problem;

    // Evaluator: the GPU (its architecture decides the target) or a landscape. A run
    // keeps its evaluator: every host of it evaluates the same way.
    let evaluator = match (&o.evaluator, &existing) {
        (Some(e), Some(run)) if *e != run.evaluator => bail!(
            "run `{}` evaluates with `{}`, not `{e}`: every host of a run uses the same evaluator (drop --evaluator)",
            run.name,
            run.evaluator
        ),
        (Some(e), _) => e.clone(),
        (None, Some(run)) => run.evaluator.clone(),
        (None, None) => "gpu".into(),
    };
    let replay = evaluator.strip_prefix("replay:").map(PathBuf::from);
    let (target, device_name, gpus) = match &replay {
        Some(_) => {
            let arch = match config.compile.arch.as_str() {
                "auto" => evo_core::target::DEFAULT_ARCH.to_string(),
                a => a.to_string(),
            };
            (Target::from_arch(&arch)?, None, Vec::new())
        }
        None => {
            if evaluator != "gpu" {
                bail!("--evaluator must be `gpu` or `replay:FILE`, not `{evaluator}`");
            }
            let (gpus, info) = crate::setup::gpus(&o.gpus)?;
            let d = &info.devices[gpus[0] as usize];
            let mut t = Target::from_arch(&Target::arch_for_capability(
                d.compute_capability.0,
                d.compute_capability.1,
            ))?;
            t.max_smem_per_block = d.max_smem_per_block_optin;
            (t, Some((d.name.clone(), info.cuda_version)), gpus)
        }
    };
    let specs = evo_kernels::Specializations::new(problem, target.clone(), &config.shapes)
        .map_err(|e| anyhow!("config {}: {e}", config.path.display()))?;
    specs.check_family(&family).map_err(|e| anyhow!(e))?;
    let space = family.space(specs.contexts())?;
    let (seed, strategy_name) = match &stored_seed_and_strategy {
        Some((seed, name)) => (Some(*seed), name.clone()),
        None => (
            o.seed,
            o.strategy
                .clone()
                .unwrap_or_else(|| config.search.strategy.clone()),
        ),
    };
    let kind: StrategyKind = strategy_name.parse().map_err(|e: String| anyhow!(e))?;
    let params = params(&config, seed);
    let strategy = evo_search::build(kind, params.clone());
    let seeds: Vec<Genome> = config
        .search
        .seeds
        .iter()
        .map(|s| {
            let g = Genome::parse(s).with_context(|| format!("[search] seed `{s}`"))?;
            space
                .check_genome(&g)
                .with_context(|| format!("[search] seed `{s}`"))?;
            Ok(g)
        })
        .collect::<Result<_>>()?;

    let backend: Arc<Backend> = match &replay {
        Some(file) => {
            let landscape = Landscape::load(file)?;
            if landscape.family != family.name {
                bail!(
                    "landscape {} is for family {}, the config's is {}",
                    file.display(),
                    landscape.family,
                    family.name
                );
            }
            Arc::new(Backend::Replay {
                landscape,
                file: file.display().to_string(),
            })
        }
        None => {
            let compiler = Compiler::new(
                &target.arch,
                &config.compile.options,
                config.compile.max_registers,
                Some(CompileCache::new(CompileCache::default_dir())),
            )?;
            let workers = gpus
                .iter()
                .map(|g| Ok((*g, WorkerCommand::evo_worker(*g)?)))
                .collect::<std::io::Result<Vec<_>>>()?;
            let configured: Vec<Vars> = specs.shapes.iter().map(|(_, v)| v.clone()).collect();
            let edges = if config.correctness.edge_shapes {
                problem.edge_shapes(&configured)
            } else {
                Vec::new()
            };
            let cpus = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2);
            Arc::new(Backend::Gpu(GpuBackend {
                evaluator: Arc::new(Evaluator {
                    problem,
                    compiler,
                    pool: Pool::new(workers, config.timeouts.clone()),
                    gates: GateSettings {
                        target: target.clone(),
                        static_rules: family.static_rules(config.static_rules.clone()),
                        correctness: config.correctness.clone(),
                        timing: Some(config.timing.clone()),
                    },
                }),
                family: Arc::new(family),
                space: Arc::new(space.clone()),
                specs: Arc::new(specs.clone()),
                edges: Arc::new(edges),
                compile_limit: Arc::new(tokio::sync::Semaphore::new(cpus)),
                gpu_slots: Arc::new(tokio::sync::Semaphore::new(gpus.len())),
                salt: params.seed,
            }))
        }
    };

    // Create the run now that everything it needs has loaded.
    let run_id = if existing.is_some() {
        run_id
    } else {
        let nvrtc = evo_gpu::nvrtc::version()
            .ok()
            .map(|(a, b)| format!("{a}.{b}"));
        store
            .create_run(&NewRun {
                name: run_name.clone(),
                config_toml: config.text.clone(),
                problem: problem.name().into(),
                family: config.family.clone(),
                seed: params.seed,
                strategy: kind.name().into(),
                evaluator: backend.label(),
                device: device_name.as_ref().map(|d| d.0.clone()),
                driver: device_name
                    .as_ref()
                    .map(|d| format!("CUDA {}.{}", d.1 / 1000, (d.1 % 1000) / 10)),
                nvrtc_version: nvrtc,
                arch: Some(target.arch.clone()),
            })
            .await?
    };
    // Run-wide settings: set by the run's first host, changed only by --resume.
    let stored_settings = match &existing {
        Some(r) => r.run_settings()?,
        None => None,
    };
    let mut settings = stored_settings.unwrap_or(RunSettings {
        allow_mixed_devices: o.allow_mixed_gpus,
        lease_ms: DEFAULT_LEASE.as_millis() as u64,
        max_generations: None,
        patience: config.search.patience,
    });
    if o.join.is_none() {
        if let Some(l) = o.lease {
            settings.lease_ms = l.as_millis().max(1) as u64;
        }
        if let Some(Budget::Generations(n)) = o.budget {
            settings.max_generations = Some(n);
        }
        if let Some(p) = o.patience {
            settings.patience = p;
        }
        if existing.is_none() {
            settings.allow_mixed_devices = o.allow_mixed_gpus;
        }
        store
            .set_run_settings(run_id, &evo_store::to_stored_json(&settings))
            .await?;
    } else if matches!(o.budget, Some(Budget::Generations(_))) {
        bail!("the generation budget belongs to the run: set it with evo search --resume RUN --budget Ngen; a joining host takes time or evaluation budgets");
    }
    if let (Some(run), Some((ours, _))) = (&existing, &device_name) {
        if let Some(theirs) = run.device.as_ref().filter(|d| *d != ours) {
            if !settings.allow_mixed_devices {
                bail!(
                    "run `{}` runs on {theirs}; this host's GPU is {ours}: their timings would not compare. Join from hosts with {theirs}, or start the run with --allow-mixed-gpus",
                    run.name
                );
            }
            eprintln!("warning: run `{}` runs on {theirs}, this host on {ours} (the run allows mixed GPUs)", run.name);
        }
    }
    let lease = Duration::from_millis(settings.lease_ms);
    let me = evo_store::NewHost {
        id: format!(
            "{}:{}:{:04x}",
            hostname(),
            std::process::id(),
            evo_store::now_ms() as u16 ^ (std::process::id() as u16).rotate_left(7)
        ),
        hostname: hostname(),
        pid: std::process::id(),
        device: device_name.as_ref().map(|d| d.0.clone()),
        gpus: gpus.len() as u32,
        evaluator: backend.label(),
    };
    // Leases of processes of this host that died (SIGKILL, a crash) go back at once
    // instead of after their timeout.
    for h in store.hosts(run_id).await? {
        if h.hostname == me.hostname
            && h.finished_at.is_none()
            && h.pid != me.pid
            && pid_alive(h.pid) == Some(false)
        {
            let n = store.release_leases(&h.id).await?;
            if n > 0 {
                eprintln!("released {n} candidate(s) claimed by {}, which died", h.id);
            }
        }
    }
    store.register_host(run_id, &me).await?;
    if existing.is_some() {
        // Only now that every check passed: a refused host leaves the run as it was.
        store.set_run_status(run_id, RunStatus::Running).await?;
    }

    crate::set_run_log(&run_log_path(&o.db, &run_name));
    tracing::info!(run = %run_name, evaluator = %backend.label(), strategy = kind.name(), "search starts");

    // `stop`: Ctrl-C. `halt`: Ctrl-C or a spent time budget; evaluations that have not
    // reached a GPU yet see it and give their genome back (compiles run far ahead, so
    // without it a spent budget waited for every compiled genome: 40 s became 2.4 min
    // on an H200).
    let stop = Arc::new(AtomicBool::new(false));
    let halt = Arc::new(AtomicBool::new(false));
    {
        let (stop, halt) = (stop.clone(), halt.clone());
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\nCtrl-C: finishing the evaluations in flight, then saving (Ctrl-C again to abort)");
                stop.store(true, Ordering::SeqCst);
                halt.store(true, Ordering::SeqCst);
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        });
    }

    let started = Instant::now();
    let mut tally = Tally::default();
    let configured_shapes: Vec<Vars> = specs.shapes.iter().map(|(_, v)| v.clone()).collect();
    let state_base = SearchState {
        config_path: Some(config.path.display().to_string()),
        strategy: kind.name().into(),
        params: params.clone(),
        ..SearchState::default()
    };

    // The baseline: per-shape times every fitness is relative to.
    let mut baselines: BTreeMap<String, f64> = store
        .baselines(run_id)
        .await?
        .into_iter()
        .map(|b| (b.shape, b.median_us))
        .collect();
    let needed: Vec<String> = configured_shapes.iter().map(evo_store::shape_key).collect();
    if o.join.is_some() {
        // The run's first host sets the baseline; wait for it.
        let waited = Instant::now();
        while needed.iter().any(|k| !baselines.contains_key(k)) {
            if waited.elapsed() > JOIN_WAIT || stop.load(Ordering::SeqCst) {
                bail!("run `{run_name}` has no baseline after 10 minutes: is its first host (evo search) running?");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            baselines = store
                .baselines(run_id)
                .await?
                .into_iter()
                .map(|b| (b.shape, b.median_us))
                .collect();
        }
    }
    if needed.iter().any(|k| !baselines.contains_key(k)) {
        let spec = config.search.baseline.clone();
        match spec.as_deref() {
            Some(s) if s.starts_with("import:") => {
                let file = config
                    .path
                    .parent()
                    .unwrap_or(Path::new("."))
                    .join(&s["import:".len()..]);
                let imported = baseline::load(&file)?;
                let mut rows = Vec::new();
                for shape in &configured_shapes {
                    let key = evo_store::shape_key(shape);
                    let t = imported
                        .shapes
                        .iter()
                        .find(|(v, _)| {
                            evo_store::shape_key(&problem.complete_shape(v).unwrap_or_default())
                                == key
                        })
                        .map(|(_, t)| *t)
                        .ok_or_else(|| {
                            anyhow!("baseline {} has no time for shape {key}", file.display())
                        })?;
                    rows.push((key, t, imported.source.clone()));
                }
                if let (Some(d), Some((ours, _))) = (&imported.device, &device_name) {
                    if d != ours {
                        eprintln!("warning: the baseline was measured on {d}, this GPU is {ours}: fitness compares across GPUs");
                    }
                }
                store.set_baselines(run_id, &rows).await?;
            }
            other => {
                let text = match other {
                    Some(s) => s.strip_prefix("genome:").ok_or_else(|| anyhow!("[search] baseline must be `genome:K=V,...` or `import:FILE`, not `{s}`"))?.to_string(),
                    None => match seeds.first() {
                        Some(g) => g.canonical(),
                        None => space.iter_valid().next().ok_or_else(|| anyhow!("the space has no valid genome"))?.canonical(),
                    },
                };
                let genome = Genome::parse(&text).context("baseline genome")?;
                space.check_genome(&genome).context("baseline genome")?;
                if space.rejection(&genome).is_some() {
                    bail!("the baseline genome {text} violates a constraint");
                }
                let id = match store.candidate_by_hash(run_id, &genome.hash().0).await? {
                    Some(c) => c.id,
                    None => {
                        store
                            .insert_candidates(
                                run_id,
                                &[NewCandidate::new(genome.clone(), 0, Origin::Baseline)],
                            )
                            .await?[0]
                    }
                };
                eprintln!("evaluating the baseline genome {text}");
                let r = backend
                    .evaluate(0, &genome, &AtomicBool::new(false))
                    .await
                    .expect("not stopped");
                tally.gpu_ms += r.gpu_ms;
                if r.status != Status::Evaluated {
                    store
                        .record_result(id, &result_row(&r, None), &measurements(&r))
                        .await
                        .ok();
                    bail!(
                        "the baseline genome {text} is {}: {}",
                        r.status.name(),
                        r.detail
                    );
                }
                let mut rows = Vec::new();
                for shape in &configured_shapes {
                    let key = evo_store::shape_key(shape);
                    let t = r
                        .shapes
                        .iter()
                        .find(|s| evo_store::shape_key(&s.shape) == key)
                        .and_then(|s| s.median_us)
                        .ok_or_else(|| {
                            anyhow!("the baseline genome has no time for shape {key}")
                        })?;
                    rows.push((key, t, format!("genome:{}", genome.hash())));
                }
                store.set_baselines(run_id, &rows).await?;
                store
                    .record_result(id, &result_row(&r, Some(1.0)), &measurements(&r))
                    .await?;
            }
        }
        baselines = store
            .baselines(run_id)
            .await?
            .into_iter()
            .map(|b| (b.shape, b.median_us))
            .collect();
    }
    let baseline_times: Vec<f64> = needed.iter().map(|k| baselines[k]).collect();

    // Heartbeat: keeps this host alive in `hosts` and its leases held while it evaluates.
    let heartbeat = {
        let (store, id) = (store.clone(), me.id.clone());
        tokio::spawn(async move {
            let every = (lease / 4).max(Duration::from_millis(50));
            loop {
                tokio::time::sleep(every).await;
                if let Err(e) = store.heartbeat(&id, lease).await {
                    tracing::warn!("heartbeat: {e}");
                }
            }
        })
    };

    // Evaluations in flight at once: every GPU busy plus compilation running ahead.
    let limit = match &*backend {
        Backend::Gpu(b) => b.evaluator.pool.size() + b.compile_limit.available_permits(),
        Backend::Replay { .. } => 1,
    };
    let poll = (lease / 20).clamp(Duration::from_millis(20), Duration::from_millis(500));
    let progress = indicatif::ProgressBar::new_spinner();
    if !o.progress {
        progress.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    progress.enable_steady_tick(Duration::from_millis(250));
    let mut finished_reason = "interrupted";
    let mut run_finished = false;
    let mut stopping = false;
    let mut in_flight = tokio::task::JoinSet::new();
    let mut generation_now = 0u32;

    loop {
        if !stopping {
            if stop.load(Ordering::SeqCst) {
                stopping = true;
            }
            match o.budget {
                Some(Budget::Time(t)) if started.elapsed() >= t => {
                    finished_reason = "time budget spent";
                    stopping = true;
                    halt.store(true, Ordering::SeqCst);
                }
                Some(Budget::Evaluations(n)) if tally.evaluated + in_flight.len() as u64 >= n => {
                    finished_reason = "evaluation budget spent";
                    stopping = true;
                }
                _ => {}
            }
        }
        // Take work while there is room: pending candidates nobody holds, or whose
        // holder's lease expired.
        if !stopping && in_flight.len() < limit {
            let room = match o.budget {
                Some(Budget::Evaluations(n)) => (limit - in_flight.len())
                    .min((n - tally.evaluated - in_flight.len() as u64) as usize),
                _ => limit - in_flight.len(),
            };
            let claimed = db!(
                tally,
                store.claim_candidates(run_id, &me.id, room, lease).await
            )?;
            for c in claimed {
                generation_now = c.generation;
                let genome = Genome::parse(&c.genome)?;
                let (backend, halt, id) = (backend.clone(), halt.clone(), c.id);
                in_flight.spawn(async move {
                    // None: halted before reaching a GPU; the lease is released.
                    let r = backend.evaluate(id.0 as u64, &genome, &halt).await?;
                    Some((id, genome, r))
                });
            }
        }
        if let Some(joined) = in_flight.join_next().await {
            let Some((id, genome, r)) = joined.expect("evaluation task") else {
                continue;
            };
            let times: Vec<f64> = needed
                .iter()
                .map(|k| {
                    r.shapes
                        .iter()
                        .find(|s| &evo_store::shape_key(&s.shape) == k)
                        .and_then(|s| s.median_us)
                        .unwrap_or(f64::NAN)
                })
                .collect();
            let (status, fitness) = score(r.status, &baseline_times, &times, &config.search);
            let mut row = result_row(&r, fitness);
            row.status = status;
            match db!(
                tally,
                store
                    .record_claimed_result(id, &me.id, &row, &measurements(&r))
                    .await
            ) {
                Ok(()) => {}
                Err(e @ evo_store::StoreError::LeaseLost { .. }) => {
                    tally.lost += 1;
                    tracing::warn!("{e}");
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            tally.evaluated += 1;
            tally.gpu_ms += r.gpu_ms;
            *tally.by_status.entry(status.name()).or_default() += 1;
            let hours = started.elapsed().as_secs_f64() / 3600.0;
            let failures: Vec<String> = tally
                .by_status
                .iter()
                .filter(|(s, _)| **s != "evaluated")
                .map(|(s, n)| format!("{s} {n}"))
                .collect();
            progress.set_message(format!(
                "gen {generation_now} | {} evaluated here | {} | {:.0}/h",
                tally.evaluated,
                if failures.is_empty() {
                    "no failures".to_string()
                } else {
                    failures.join(", ")
                },
                tally.evaluated as f64 / hours.max(1e-9)
            ));
            tracing::info!(genome = %genome.canonical(), status = status.name(), fitness = ?fitness, "evaluated");
            continue;
        }
        // Nothing in flight and nothing to claim.
        if stopping {
            break;
        }
        let run = db!(tally, store.run_by_id(run_id).await)?
            .ok_or_else(|| anyhow!("run `{run_name}` was deleted"))?;
        if run.status == RunStatus::Finished {
            finished_reason = "the run finished";
            run_finished = true;
            break;
        }
        let candidates = db!(tally, store.candidates(run_id).await)?;
        if candidates.iter().any(|c| c.status.is_none()) {
            // Other hosts hold them; their results, or their expired leases, come soon.
            tokio::time::sleep(poll).await;
            continue;
        }

        // Every candidate has its result: complete the generation and propose the next,
        // unless another host does it first. Any host computes the same proposals: they
        // depend on the seed and the stored results only.
        let latest = db!(tally, store.latest_generation(run_id).await)?;
        let current = latest.as_ref().map_or(0, |g| g.generation + 1);
        let mut history = History::new();
        for c in &candidates {
            history.insert(Genome::parse(&c.genome)?, c.generation, outcome(c));
        }
        let proposed = candidates
            .iter()
            .any(|c| c.generation == current && c.origin != Origin::Baseline);
        let mut state = state_base.clone();
        let mut finish: Option<&'static str> = None;
        let (completed, next) = if proposed {
            let insights = Insights::compute(&space, &history, params.elites);
            let elites: Vec<EliteEntry> = history
                .elites(params.elites)
                .iter()
                .map(|r| EliteEntry {
                    genome: r.genome.canonical(),
                    hash: r.hash.0.clone(),
                    fitness: r.fitness(),
                })
                .collect();
            let best = history.best().and_then(|r| r.fitness());
            let previous_best = latest.as_ref().and_then(|g| g.best_fitness);
            let stale = if best > previous_best {
                0
            } else {
                let previous = match &latest {
                    Some(g) => g.search_state()?.stale_generations,
                    None => None,
                };
                previous.unwrap_or(0) + 1
            };
            let wall_ms = started.elapsed().as_secs_f64() * 1e3;
            state.generation = Some(current);
            state.stale_generations = Some(stale);
            state.advanced_by = Some(me.id.clone());
            state.evaluated_this_invocation = Some(tally.evaluated);
            state.gpu_busy_fraction = Some(if gpus.is_empty() {
                0.0
            } else {
                tally.gpu_ms / (wall_ms * gpus.len() as f64)
            });
            state.evaluations_per_hour = Some(tally.evaluated as f64 / (wall_ms / 3.6e6).max(1e-9));
            if settings.max_generations.is_some_and(|n| current + 1 >= n) {
                finish = Some("generation budget spent");
            } else if settings.patience > 0 && stale >= u64::from(settings.patience) {
                finish = Some("no improvement within the patience");
            }
            let row = GenerationRow {
                run_id,
                generation: current,
                elites: evo_store::to_stored_json(&elites),
                insights: serde_json::to_value(&insights)?,
                state: evo_store::to_stored_json(&state),
                best_fitness: best,
                evaluated: history.evaluated().count() as u64,
            };
            (Some(row), current + 1)
        } else {
            if settings.max_generations.is_some_and(|n| current >= n) {
                finish = Some("generation budget spent");
            }
            // The newest completed generation, if any.
            state.generation = current.checked_sub(1);
            (None, current)
        };
        let proposals = match finish {
            Some(_) => Vec::new(),
            None => strategy.propose(&space, &history, next, &seeds),
        };
        if finish.is_none() && proposals.is_empty() {
            finish = Some("the space is exhausted");
        }
        let rows: Vec<NewCandidate> = proposals
            .iter()
            .map(|p| {
                NewCandidate::new(p.genome.clone(), next, origin(p.origin))
                    .with_parents(p.parents.iter().map(|h| h.0.clone()))
            })
            .collect();
        let won = db!(
            tally,
            store
                .advance_generation(
                    run_id,
                    &Advance {
                        expected_latest: latest.as_ref().map(|g| g.generation),
                        completed: completed.as_ref(),
                        next_generation: next,
                        proposals: &rows,
                        search_state: &evo_store::to_stored_json(&state),
                        finish: finish.is_some(),
                    },
                )
                .await
        )?;
        if !won {
            continue; // another host advanced; its proposals are in the queue
        }
        tally.advanced += 1;
        if let Some(row) = &completed {
            progress.println(format!(
                "generation {}: {} genomes evaluated in the run, best fitness {}",
                row.generation,
                row.evaluated,
                row.best_fitness.map_or("-".into(), |f| format!("{f:.4}x"))
            ));
        }
        if let Some(reason) = finish {
            finished_reason = reason;
            run_finished = true;
            break;
        }
    }
    progress.finish_and_clear();
    heartbeat.abort();
    let interrupted = stop.load(Ordering::SeqCst);
    let wall = started.elapsed().as_secs_f64();
    let gpu_busy: Vec<(u32, f64)> = match &*backend {
        Backend::Gpu(b) => {
            let busy = b.evaluator.pool.busy().await;
            b.evaluator.pool.shutdown().await;
            busy.into_iter()
                .map(|(g, d)| (g, d.as_secs_f64() / wall.max(1e-9)))
                .collect()
        }
        Backend::Replay { .. } => Vec::new(),
    };
    let db_ms = tally.db.as_secs_f64() * 1e3;
    store
        .finish_host(
            &me.id,
            tally.evaluated,
            db_ms,
            &evo_store::to_stored_json(&HostStats {
                wall_s: wall,
                advanced: tally.advanced,
                lost_leases: tally.lost,
                gpu_busy: gpu_busy
                    .iter()
                    .map(|(g, f)| GpuBusy { gpu: *g, busy: *f })
                    .collect(),
                reason: finished_reason.into(),
            }),
        )
        .await?;
    if !run_finished {
        // This host stops; the run goes on if another host still works on it.
        let now = evo_store::now_ms();
        let others = store
            .hosts(run_id)
            .await?
            .into_iter()
            .filter(|h| {
                h.id != me.id
                    && h.finished_at.is_none()
                    && now - h.heartbeat_ms < 2 * lease.as_millis() as i64
            })
            .count();
        if others == 0 {
            store
                .set_run_status(
                    run_id,
                    if interrupted {
                        RunStatus::Interrupted
                    } else {
                        RunStatus::Finished
                    },
                )
                .await?;
        } else {
            eprintln!("{others} other host(s) still work on run `{run_name}`");
        }
    }
    // The fittest genome, regressed ones included (against a fast external baseline
    // every early kernel regresses).
    let mut history = History::new();
    for c in store.candidates(run_id).await? {
        history.insert(Genome::parse(&c.genome)?, c.generation, outcome(&c));
    }
    let best = history.best().and_then(|r| {
        r.fitness()
            .map(|f| (f, r.genome.canonical(), r.hash.0.clone()))
    });
    println!(
        "run {run_name}: {}",
        if interrupted {
            "interrupted"
        } else {
            finished_reason
        }
    );
    println!(
        "  {} evaluations here in {:.1} min ({:.0}/hour){}",
        tally.evaluated,
        wall / 60.0,
        tally.evaluated as f64 / (wall / 3600.0).max(1e-9),
        if gpus.is_empty() {
            String::new()
        } else {
            format!(
                ", GPU busy {:.0}%",
                100.0 * tally.gpu_ms / (wall * 1e3 * gpus.len() as f64)
            )
        }
    );
    if !gpu_busy.is_empty() {
        println!(
            "  per GPU busy: {}",
            gpu_busy
                .iter()
                .map(|(g, f)| format!("gpu{g} {:.0}%", 100.0 * f))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!(
        "  database: {:.2} ms per evaluation ({:.1} s in all; {} generation(s) advanced here{})",
        db_ms / (tally.evaluated.max(1) as f64),
        db_ms / 1e3,
        tally.advanced,
        if tally.lost > 0 {
            format!(", {} result(s) refused: lease lost", tally.lost)
        } else {
            String::new()
        }
    );
    println!(
        "  statuses: {}",
        store
            .status_counts(run_id)
            .await?
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some((fitness, genome, hash)) = best {
        println!("  best: {fitness:.4}x the baseline's speed (geometric mean over shapes), {genome} [{hash}]");
    }
    if interrupted {
        println!(
            "  resume with: evo search --resume {run_name} --db {}",
            evo_store::redact_url(&o.db)
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Status and fitness of a result against the baseline: geometric-mean speedup over the
/// shapes, and `regressed` when more than the tolerance slower on enough shapes.
fn score(
    status: Status,
    baseline: &[f64],
    times: &[f64],
    search: &evo_core::config::SearchSection,
) -> (Status, Option<f64>) {
    if status != Status::Evaluated && status != Status::Regressed {
        return (status, None);
    }
    let fitness = geomean_speedup(baseline, times);
    if is_regressed(
        baseline,
        times,
        search.regression_tolerance,
        search.regression_shapes,
    ) {
        (Status::Regressed, fitness)
    } else {
        (Status::Evaluated, fitness)
    }
}

/// `evo baseline import FILE --run RUN`: replaces a run's baseline with imported
/// per-shape times and rescores every candidate that reached timing, in one
/// transaction. A resumed search then uses the new baseline.
pub fn import_baseline(file: &Path, run: &str, db: &str) -> Result<std::process::ExitCode> {
    let rt = crate::setup::runtime()?;
    rt.block_on(async {
        let store = Store::open(db)
            .await
            .with_context(|| format!("opening {db}"))?;
        let r = store
            .run(run)
            .await?
            .ok_or_else(|| anyhow!("no run `{run}` in {db}"))?;
        let config = SearchConfig::parse(Path::new(&format!("{}.toml", r.name)), &r.config_toml)?;
        let problem = evo_kernels::problem(&config.problem)
            .ok_or_else(|| anyhow!("unknown problem `{}`", config.problem))?;
        let imported = baseline::load(file)?;
        let mut rows = Vec::new();
        let mut needed = Vec::new();
        for shape in &config.shapes {
            let full = problem.complete_shape(shape).map_err(|e| anyhow!(e))?;
            let key = evo_store::shape_key(&full);
            let t = imported
                .shapes
                .iter()
                .find(|(v, _)| {
                    problem
                        .complete_shape(v)
                        .map(|c| evo_store::shape_key(&c) == key)
                        .unwrap_or(false)
                })
                .map(|(_, t)| *t)
                .ok_or_else(|| anyhow!("{} has no time for shape {key}", file.display()))?;
            rows.push((key.clone(), t, imported.source.clone()));
            needed.push((key, t));
        }
        let baseline_times: Vec<f64> = needed.iter().map(|(_, t)| *t).collect();
        let mut updates = Vec::new();
        for c in store.candidates(r.id).await? {
            let Some(status) = c.status.filter(|s| s.has_fitness()) else {
                continue;
            };
            let ms = store.measurements(c.id).await?;
            let times: Vec<f64> = needed
                .iter()
                .map(|(k, _)| {
                    ms.iter()
                        .find(|m| &m.shape == k)
                        .and_then(|m| m.median_us)
                        .unwrap_or(f64::NAN)
                })
                .collect();
            let (status, fitness) = score(status, &baseline_times, &times, &config.search);
            updates.push((c.id, status, fitness));
        }
        store.rebase(r.id, &rows, &updates).await?;
        for (key, t) in &needed {
            println!("baseline {t:10.2} us  {key}");
        }
        let best = updates
            .iter()
            .filter(|u| u.1 == Status::Evaluated)
            .filter_map(|u| u.2)
            .fold(None::<f64>, |b, f| Some(b.map_or(f, |b| b.max(f))));
        println!(
            "run {}: baseline from {}; {} candidates rescored ({} regressed){}",
            r.name,
            imported.source,
            updates.len(),
            updates.iter().filter(|u| u.1 == Status::Regressed).count(),
            best.map_or(String::new(), |b| format!("; best fitness {b:.4}"))
        );
        Ok(std::process::ExitCode::SUCCESS)
    })
}

fn result_row(r: &GenomeResult, fitness: Option<f64>) -> CandidateResult {
    CandidateResult {
        status: r.status,
        gate: r.gate,
        detail: Some(r.detail.clone()),
        resources: Some(r.resources.clone()),
        fitness,
        eval_ms: Some(r.eval_ms),
        source_key: r.source_key.clone(),
    }
}

/// The measurements of a result, one per shape (a shape checked in two
/// specializations would appear twice; the database keeps one).
fn measurements(r: &GenomeResult) -> Vec<NewMeasurement> {
    let mut seen = std::collections::BTreeSet::new();
    r.shapes
        .iter()
        .filter(|s| seen.insert(evo_store::shape_key(&s.shape)))
        .cloned()
        .collect()
}
