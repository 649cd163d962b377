//! `evo search`: the main job. Generations of genomes proposed by a strategy
//! (evo-search), evaluated through the gates on the GPU workers (or answered from a
//! recorded landscape), stored in the population database (evo-store) as they finish.
//!
//! Survives anything: every result is committed when it arrives; a killed run leaves
//! its unevaluated candidates pending, and `--resume` evaluates those, then carries on
//! with the same strategy state (the strategy is a pure function of the seed and the
//! stored history, so nothing else needs saving).

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
    CandidateResult, GenerationRow, NewCandidate, NewMeasurement, NewRun, Origin, RunId, RunStatus,
    Store,
};
use serde_json::json;

use backend::{Backend, GenomeResult, GpuBackend};
use budget::Budget;

/// What `evo search` was asked to do.
pub struct Options {
    pub config: Option<PathBuf>,
    pub run: Option<String>,
    pub resume: Option<String>,
    pub db: String,
    pub budget: Option<Budget>,
    pub patience: Option<u32>,
    pub seed: Option<u64>,
    pub strategy: Option<String>,
    pub evaluator: String,
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
    best: Option<(f64, String)>,
}

pub(crate) fn params(cfg: &SearchConfig, seed: Option<u64>) -> SearchParams {
    let s = &cfg.search;
    SearchParams {
        population: s.population,
        elites: s.elites,
        mutation_share: s.mutation_share,
        crossover_share: s.crossover_share,
        exploration_share: s.exploration_share,
        max_knob_moves: s.max_knob_moves,
        insight_weight: s.insight_weight,
        seed: seed.unwrap_or(s.seed),
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
    match (c.status.as_deref(), c.fitness) {
        (None, _) => Outcome::Pending,
        (Some("evaluated" | "regressed"), Some(f)) => Outcome::Evaluated { fitness: f },
        _ => Outcome::Failed,
    }
}

/// Log lines of the run go to `<db folder>/evo-logs/<run>.log` as well as stderr.
fn run_log_path(db: &str, run: &str) -> PathBuf {
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
    let (run_id, run_name, config) = match &o.resume {
        Some(name) => {
            let run = store
                .run(name)
                .await?
                .ok_or_else(|| anyhow!("no run `{name}` in {}", o.db))?;
            let path = run
                .search_state
                .as_ref()
                .and_then(|s| s.get("config_path"))
                .and_then(|p| p.as_str())
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
                eprintln!("note: run `{}` had finished; continuing it", run.name);
            }
            if o.seed.is_some_and(|s| s != run.seed)
                || o.strategy.as_ref().is_some_and(|s| *s != run.strategy)
            {
                bail!("run `{}` uses seed {} and strategy {}; a resumed run keeps them (drop --seed/--strategy)", run.name, run.seed, run.strategy);
            }
            stored_seed_and_strategy = Some((run.seed, run.strategy.clone()));
            store.set_run_status(run.id, RunStatus::Running).await?;
            (run.id, run.name, config)
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

    // Evaluator: the GPU (its architecture decides the target) or a landscape.
    let replay = o.evaluator.strip_prefix("replay:").map(PathBuf::from);
    let (target, device_name, gpus) = match &replay {
        Some(_) => {
            let arch = match config.compile.arch.as_str() {
                "auto" => evo_core::target::DEFAULT_ARCH.to_string(),
                a => a.to_string(),
            };
            (Target::from_arch(&arch)?, None, Vec::new())
        }
        None => {
            if o.evaluator != "gpu" {
                bail!(
                    "--evaluator must be `gpu` or `replay:FILE`, not `{}`",
                    o.evaluator
                );
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
                        static_rules: config.static_rules.clone(),
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
    let run_id = if o.resume.is_some() {
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
    crate::set_run_log(&run_log_path(&o.db, &run_name));
    tracing::info!(run = %run_name, evaluator = %backend.label(), strategy = kind.name(), "search starts");

    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\nCtrl-C: finishing the evaluations in flight, then saving (Ctrl-C again to abort)");
                stop.store(true, Ordering::SeqCst);
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        });
    }

    let started = Instant::now();
    let mut tally = Tally::default();
    let configured_shapes: Vec<Vars> = specs.shapes.iter().map(|(_, v)| v.clone()).collect();
    let state_base = json!({
        "config_path": config.path.display().to_string(),
        "strategy": kind.name(),
        "params": params,
    });

    // The baseline: per-shape times every fitness is relative to.
    let mut baselines: BTreeMap<String, f64> = store
        .baselines(run_id)
        .await?
        .into_iter()
        .map(|b| (b.shape, b.median_us))
        .collect();
    let needed: Vec<String> = configured_shapes.iter().map(evo_store::shape_key).collect();
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

    // History from the database; the generation to work on.
    let mut history = History::new();
    for c in store.candidates(run_id).await? {
        history.insert(Genome::parse(&c.genome)?, c.generation, outcome(&c));
    }
    let mut generation = store
        .latest_generation(run_id)
        .await?
        .map(|g| g.generation + 1)
        .unwrap_or(0);
    let mut best_so_far = history.best().and_then(|r| r.fitness());
    let mut stale_generations = 0u32;
    let patience = o.patience.unwrap_or(config.search.patience);
    let progress = indicatif::ProgressBar::new_spinner();
    if !o.progress {
        progress.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    progress.enable_steady_tick(Duration::from_millis(250));
    let mut finished_reason = "interrupted";

    loop {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        match o.budget {
            Some(Budget::Time(t)) if started.elapsed() >= t => {
                finished_reason = "time budget spent";
                break;
            }
            Some(Budget::Evaluations(n)) if tally.evaluated >= n => {
                finished_reason = "evaluation budget spent";
                break;
            }
            _ => {}
        }
        // This generation's candidates: those already stored (a resumed generation), or
        // new proposals.
        let stored: Vec<evo_store::Candidate> = store
            .candidates(run_id)
            .await?
            .into_iter()
            .filter(|c| c.generation == generation && c.origin != Origin::Baseline)
            .collect();
        let batch: Vec<(evo_store::CandidateId, Genome)> = if stored.is_empty() {
            let proposals = strategy.propose(&space, &history, generation, &seeds);
            if proposals.is_empty() {
                finished_reason = "the space is exhausted";
                break;
            }
            let rows: Vec<NewCandidate> = proposals
                .iter()
                .map(|p| {
                    NewCandidate::new(p.genome.clone(), generation, origin(p.origin))
                        .with_parents(p.parents.iter().map(|h| h.0.clone()))
                })
                .collect();
            let ids = store.insert_candidates(run_id, &rows).await?;
            history.add_proposals(generation, proposals.iter().map(|p| &p.genome));
            ids.into_iter()
                .zip(proposals.into_iter().map(|p| p.genome))
                .collect()
        } else {
            stored
                .iter()
                .filter(|c| c.status.is_none())
                .map(|c| Ok((c.id, Genome::parse(&c.genome)?)))
                .collect::<Result<_>>()?
        };

        // Evaluate the batch: compilation runs ahead on CPU threads while the GPU
        // workers evaluate; results are committed as they arrive.
        let mut tasks = tokio::task::JoinSet::new();
        let limit = Arc::new(tokio::sync::Semaphore::new(match &*backend {
            Backend::Gpu(b) => b.evaluator.pool.size() + b.compile_limit.available_permits(),
            Backend::Replay { .. } => 1,
        }));
        for (id, genome) in batch {
            let (backend, stop, limit) = (backend.clone(), stop.clone(), limit.clone());
            tasks.spawn(async move {
                let _permit = limit.acquire_owned().await.expect("open");
                if stop.load(Ordering::SeqCst) {
                    return None; // left pending: evaluated on resume
                }
                // None: stopped before reaching a GPU; left pending for --resume.
                let r = backend.evaluate(id.0 as u64, &genome, &stop).await?;
                Some((id, genome, r))
            });
        }
        while let Some(joined) = tasks.join_next().await {
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
            let mut status = r.status;
            let fitness = if status == Status::Evaluated {
                geomean_speedup(&baseline_times, &times)
            } else {
                None
            };
            if status == Status::Evaluated
                && is_regressed(
                    &baseline_times,
                    &times,
                    config.search.regression_tolerance,
                    config.search.regression_shapes,
                )
            {
                status = Status::Regressed;
            }
            let mut row = result_row(&r, fitness);
            row.status = status.name().into();
            store.record_result(id, &row, &measurements(&r)).await?;
            history.set_outcome(
                &genome.hash(),
                match fitness {
                    Some(f) => Outcome::Evaluated { fitness: f },
                    None => Outcome::Failed,
                },
            );
            tally.evaluated += 1;
            tally.gpu_ms += r.gpu_ms;
            *tally.by_status.entry(status.name()).or_default() += 1;
            if let Some(f) = fitness.filter(|_| status == Status::Evaluated) {
                if tally.best.as_ref().is_none_or(|(b, _)| f > *b) {
                    tally.best = Some((f, genome.canonical()));
                }
            }
            let hours = started.elapsed().as_secs_f64() / 3600.0;
            let failures: Vec<String> = tally
                .by_status
                .iter()
                .filter(|(s, _)| **s != "evaluated")
                .map(|(s, n)| format!("{s} {n}"))
                .collect();
            progress.set_message(format!(
                "gen {generation} | {} evaluated | {} | best {} | {:.0}/h",
                tally.evaluated,
                if failures.is_empty() {
                    "no failures".to_string()
                } else {
                    failures.join(", ")
                },
                history
                    .best()
                    .and_then(|b| b.fitness())
                    .map_or("-".into(), |f| format!("{f:.3}x")),
                tally.evaluated as f64 / hours.max(1e-9)
            ));
            tracing::info!(genome = %genome.canonical(), status = status.name(), fitness = ?fitness, "evaluated");
        }
        if stop.load(Ordering::SeqCst) {
            break;
        }

        // The generation is complete: elites, insights and state, in one transaction.
        let insights = Insights::compute(&space, &history, params.elites);
        let elites: Vec<serde_json::Value> = history
            .elites(params.elites)
            .iter()
            .map(|r| json!({"genome": r.genome.canonical(), "hash": r.hash.0, "fitness": r.fitness()}))
            .collect();
        let best = history.best().and_then(|r| r.fitness());
        let wall_ms = started.elapsed().as_secs_f64() * 1e3;
        let mut state = state_base.clone();
        state["generation"] = json!(generation);
        state["evaluated_this_invocation"] = json!(tally.evaluated);
        state["gpu_busy_fraction"] = json!(if gpus.is_empty() {
            0.0
        } else {
            tally.gpu_ms / (wall_ms * gpus.len() as f64)
        });
        state["evaluations_per_hour"] = json!(tally.evaluated as f64 / (wall_ms / 3.6e6).max(1e-9));
        store
            .save_generation_and_state(
                &GenerationRow {
                    run_id,
                    generation,
                    elites: json!(elites),
                    insights: serde_json::to_value(&insights)?,
                    state: state.clone(),
                    best_fitness: best,
                    evaluated: history.evaluated().count() as u64,
                },
                &state,
            )
            .await?;
        progress.println(format!(
            "generation {generation}: {} genomes evaluated in the run, best fitness {}",
            history.evaluated().count(),
            best.map_or("-".into(), |f| format!("{f:.4}x"))
        ));
        if best > best_so_far {
            best_so_far = best;
            stale_generations = 0;
        } else {
            stale_generations += 1;
        }
        generation += 1;
        if let Some(Budget::Generations(n)) = o.budget {
            if generation >= n {
                finished_reason = "generation budget spent";
                break;
            }
        }
        if patience > 0 && stale_generations >= patience {
            finished_reason = "no improvement within the patience";
            break;
        }
    }
    progress.finish_and_clear();
    let interrupted = stop.load(Ordering::SeqCst);
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
    if let Backend::Gpu(b) = &*backend {
        b.evaluator.pool.shutdown().await;
    }
    let wall = started.elapsed().as_secs_f64();
    // The fittest genome, regressed ones included (against a fast external baseline
    // every early kernel regresses).
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
        "  {} evaluations in {:.1} min ({:.0}/hour){}",
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
            o.db
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
            let Some(status) = c.status.as_deref().and_then(Status::parse) else {
                continue;
            };
            if status != Status::Evaluated && status != Status::Regressed {
                continue;
            }
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
            updates.push((c.id, status.name().to_string(), fitness));
        }
        store.rebase(r.id, &rows, &updates).await?;
        for (key, t) in &needed {
            println!("baseline {t:10.2} us  {key}");
        }
        let best = updates
            .iter()
            .filter(|u| u.1 == "evaluated")
            .filter_map(|u| u.2)
            .fold(None::<f64>, |b, f| Some(b.map_or(f, |b| b.max(f))));
        println!(
            "run {}: baseline from {}; {} candidates rescored ({} regressed){}",
            r.name,
            imported.source,
            updates.len(),
            updates.iter().filter(|u| u.1 == "regressed").count(),
            best.map_or(String::new(), |b| format!("; best fitness {b:.4}"))
        );
        Ok(std::process::ExitCode::SUCCESS)
    })
}

fn result_row(r: &GenomeResult, fitness: Option<f64>) -> CandidateResult {
    CandidateResult {
        status: r.status.name().into(),
        gate: r.gate.map(|g| {
            serde_json::to_value(g)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        }),
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
