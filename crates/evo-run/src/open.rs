//! [`Run::open`]: a new run, a resumed one or one to join — loaded, checked against what
//! this host has, created or updated in the database, and this host registered on it.
//! A refused host changes nothing, and a new run is loaded and checked
//! ([`RunRequest::check`]) before its database is opened, so bad input creates no file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evo_core::config::{SearchConfig, SearchParams};
use evo_core::{Genome, Target};
use evo_eval::landscape::Landscape;
use evo_search::StrategyKind;
use evo_store::{DbKind, NewHost, NewRun, RunId, RunSettings, RunStatus, Store};

use crate::backend::{gpu_target, parse_gpus, select_gpus, Backend, GpuBackend};
use crate::context::{stored_config, templates_root, Context, TargetChoice};
use crate::error::{refuse, refused, Result, ResultExt, UsageError};
use crate::usage;
use crate::{Progress, Run, RunRequest, RunTarget};

/// Default lease: long enough for any evaluation's heartbeat gap, short enough that a
/// dead host's genomes come back soon.
const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// How long `evo join` waits for its run to be created and given a baseline.
pub(crate) const JOIN_WAIT: Duration = Duration::from_secs(600);

/// A request checked as far as it can be without its database ([`RunRequest::check`]):
/// what [`Run::open`] opens.
pub struct CheckedRequest {
    request: RunRequest,
    opening: Opening,
}

/// The run a checked request opens.
enum Opening {
    /// A new run: its name and everything it works with, loaded.
    New { name: String, loaded: Box<Loaded> },
    /// A stored run, resumed (with the config file given to compare, if any) or joined.
    Stored {
        name: String,
        config: Option<PathBuf>,
        join: bool,
    },
}

/// What a run works with, loaded from its config (a new run's file, a stored run's text)
/// for this host.
struct Loaded {
    context: Arc<Context>,
    ev: Evaluating,
    kind: StrategyKind,
    params: SearchParams,
    seeds: Vec<Genome>,
    backend: Arc<Backend>,
}

/// What this host evaluates with: the GPUs (their model decides the target) or a
/// landscape.
struct Evaluating {
    replay: Option<PathBuf>,
    target: Target,
    target_reason: String,
    /// The GPU model and the driver's CUDA version.
    device: Option<(String, i32)>,
    gpus: Vec<u32>,
}

impl RunRequest {
    /// Everything that can refuse the run before its database is opened (and, for a new
    /// file, created): the request's options (whatever the target); for a new run its
    /// config, templates, family, space and seeds, and its evaluator (the GPUs, NVRTC and
    /// the workers, or the landscape), all loaded here once for [`Run::open`]; for a resume
    /// or a join, that a SQLite file is there.
    pub fn check(self) -> Result<CheckedRequest> {
        self.check_options()?;
        let opening = match &self.target {
            RunTarget::New { config, name } => {
                let config = SearchConfig::load(config)?;
                let name = name.clone().unwrap_or_else(|| default_name(&config));
                let loaded = Box::new(load(&self, config, None)?);
                Opening::New { name, loaded }
            }
            RunTarget::Resume { name, config } => self.stored(name, config.clone(), false)?,
            RunTarget::Join { name } => self.stored(name, None, true)?,
        };
        Ok(CheckedRequest {
            request: self,
            opening,
        })
    }

    /// A stored run to resume or join. The run must be there already: opening a missing
    /// SQLite file would create an empty database only to find no run in it.
    fn stored(&self, name: &str, config: Option<PathBuf>, join: bool) -> Result<Opening> {
        if let Some(file) = evo_store::database_file(&self.db)? {
            if !file.exists() {
                refuse!(
                    "no population database at {}, so no run `{name}`: start the run with `evo search -c CONFIG --run {name} --db {}`, or check --db (or EVO_DB)",
                    file.display(),
                    self.db
                );
            }
        }
        Ok(Opening::Stored {
            name: name.to_string(),
            config,
            join,
        })
    }

    /// The request's own options, whatever the run and the machine: a wrong one is a
    /// [`UsageError`] (the command line must change).
    fn check_options(&self) -> Result<()> {
        // A location evo cannot open whatever is there (another scheme, ...).
        evo_store::database_file(&self.db)?;
        if let RunTarget::New {
            name: Some(name), ..
        } = &self.target
        {
            check_run_name(name)?;
        }
        if let Some(e) = &self.evaluator {
            if e != "gpu" && !e.starts_with("replay:") {
                usage!("--evaluator must be `gpu` or `replay:FILE`, not `{e}`");
            }
        }
        if let Some(s) = &self.strategy {
            s.parse::<StrategyKind>()
                .map_err(|e| UsageError(format!("--strategy: {e}")))?;
        }
        // Its form, whatever the evaluator: a replay (or a resumed replay run) uses no GPU,
        // but a list it cannot read is still a mistake to say.
        parse_gpus(&self.gpus)?;
        if matches!(self.target, RunTarget::Join { .. }) && self.max_generations.is_some() {
            usage!("the generation budget belongs to the run: set it with evo search --resume RUN --budget Ngen; a joining host takes time or evaluation budgets");
        }
        Ok(())
    }
}

/// A new run's name when none is given: `<family>-<unix time>-<pid>`.
fn default_name(config: &SearchConfig) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // The process id too: searches started in the same second get their own.
    // With several families the GPU picks one later: name the run by problem.
    let what = match config.families.len() {
        1 => &config.family,
        _ => &config.problem,
    };
    format!("{what}-{secs}-{}", std::process::id())
}

/// Loads what a run works with from `config`: templates, family, target, space, strategy,
/// seeds and the evaluator. `existing`: the stored run being resumed or joined (it keeps
/// its seed, strategy and evaluator).
fn load(
    request: &RunRequest,
    mut config: SearchConfig,
    existing: Option<&evo_store::Run>,
) -> Result<Loaded> {
    let root = templates_root(request.templates.as_deref(), &config)?;
    let ev = evaluating(request, existing, &config)?;
    let family = crate::context::load_family(&root, &mut config, &ev.target)?;
    let context = Arc::new(Context::bind(
        config,
        family,
        TargetChoice {
            target: ev.target.clone(),
            reason: ev.target_reason.clone(),
        },
    )?);
    // A resumed run keeps its own seed and strategy (flags cannot change them).
    let (seed, strategy_name) = match existing {
        Some(run) => (Some(run.seed), run.strategy.clone()),
        None => (
            request.seed,
            request
                .strategy
                .clone()
                .unwrap_or_else(|| context.config.search.strategy.clone()),
        ),
    };
    let kind: StrategyKind = strategy_name.parse().map_err(crate::RunError::Refused)?;
    let params = SearchParams {
        seed: seed.unwrap_or(context.config.search.params.seed),
        ..context.config.search.params.clone()
    };
    let seeds = seed_genomes(&context)?;
    let backend = Arc::new(backend(
        &ev,
        context.clone(),
        params.seed,
        existing.is_some(),
    )?);
    Ok(Loaded {
        context,
        ev,
        kind,
        params,
        seeds,
        backend,
    })
}

impl Run {
    /// Opens the run of `request` on `store` and registers this host on it.
    pub async fn open(
        store: Store,
        request: CheckedRequest,
        progress: &dyn Progress,
    ) -> Result<Run> {
        let CheckedRequest { request, opening } = request;
        let (id, name, existing, loaded) = match opening {
            Opening::New { name, loaded } => (None, name, None, *loaded),
            Opening::Stored { name, config, join } => {
                let (run, config) =
                    resolve(&store, &request, &name, config.as_deref(), join, progress).await?;
                let loaded = load(&request, config, Some(&run))?;
                (Some(run.id), run.name.clone(), Some(run), loaded)
            }
        };
        let Loaded {
            context,
            ev,
            kind,
            params,
            seeds,
            backend,
        } = loaded;
        check_landscape(existing.as_ref(), &backend, progress)?;
        let created_here = existing.is_none();
        let id = match id {
            Some(id) => id,
            None => create(&store, &name, &context, kind, params.seed, &backend, &ev).await?,
        };
        let checked = async {
            let settings =
                settle_settings(&store, id, &request, existing.as_ref(), &context, &backend)
                    .await?;
            check_device(existing.as_ref(), &ev, &settings, progress)?;
            let host = register(&store, id, &ev, &backend, progress).await?;
            Ok::<_, crate::RunError>((settings, host))
        }
        .await;
        let (settings, host) = match checked {
            Ok(x) => x,
            Err(e) => {
                if created_here {
                    discard_new_run(&store, id, &name, None).await;
                }
                return Err(e);
            }
        };
        if let Some(run) = &existing {
            // Only now that every check passed: a refused host leaves the run as it was (and
            // is not told it continues).
            if run.status == RunStatus::Finished {
                progress.note(&format!(
                    "note: run `{}` had finished; continuing it",
                    run.name
                ));
            }
            store.set_run_status(id, RunStatus::Running).await?;
        }
        Ok(Run {
            store,
            db: request.db.clone(),
            id,
            name,
            context,
            joined: matches!(request.target, RunTarget::Join { .. }),
            kind,
            strategy: evo_search::build(kind, params.clone()),
            params,
            seeds,
            backend,
            settings,
            host,
            device: ev.device.map(|d| d.0),
            gpus: ev.gpus.len(),
            first_gpu: ev.gpus.first().copied(),
            created_here,
        })
    }
}

/// Deletes a run this invocation created and could not start (a bad baseline, a device
/// check), so no run stays behind `running` under a name the user wants back; nothing of
/// it was evaluated. A run another host has joined meanwhile (`own_host`: this one's, if
/// registered) is left to it. Best effort: the caller's error is the one to report.
pub(crate) async fn discard_new_run(store: &Store, id: RunId, name: &str, own_host: Option<&str>) {
    match store.hosts(id).await {
        Ok(hosts) if hosts.iter().all(|h| Some(h.id.as_str()) == own_host) => {}
        Ok(_) => return,
        Err(e) => {
            tracing::warn!(run = name, "could not list the run's hosts: {e}");
            return;
        }
    }
    if let Err(e) = store.delete_run(id).await {
        tracing::warn!(
            run = name,
            "could not remove the run that failed to start: {e}"
        );
    }
}

/// The stored run `name` that a resume (`given`: the config file it was given, to compare)
/// or a join (`join`) names, and the config it started with.
async fn resolve(
    store: &Store,
    request: &RunRequest,
    name: &str,
    given: Option<&Path>,
    join: bool,
    progress: &dyn Progress,
) -> Result<(evo_store::Run, SearchConfig)> {
    let mut run = store.run(name).await?;
    if run.is_none() && join && store.kind() == DbKind::Postgres {
        // Hosts started together: the first may not have created the run yet. A SQLite
        // file is one machine's: a run it lacks is not being created elsewhere.
        progress.note(&format!(
            "waiting for run `{name}` to be created (up to 10 minutes)"
        ));
        let waited = Instant::now();
        while run.is_none() && waited.elapsed() < JOIN_WAIT {
            tokio::time::sleep(Duration::from_secs(1)).await;
            run = store.run(name).await?;
        }
    }
    let Some(run) = run else {
        return Err(no_such_run(store, name, &request.db).await);
    };
    if let Some(given) = given {
        let text =
            std::fs::read_to_string(given).context(|| format!("reading {}", given.display()))?;
        if text != run.config_toml {
            refuse!("{} differs from the config run `{}` started with; resume without -c (the stored config is used) or start a new run", given.display(), run.name);
        }
    }
    let config = stored_config(&run)?;
    if run.status == RunStatus::Finished && join {
        refuse!("run `{}` has finished: there is nothing to join (continue it with evo search --resume {} --db ...)", run.name, run.name);
    }
    if request.seed.is_some_and(|s| s != run.seed)
        || request
            .strategy
            .as_ref()
            .is_some_and(|s| *s != run.strategy)
    {
        refuse!("run `{}` uses seed {} and strategy {}; a resumed run keeps them (drop --seed/--strategy)", run.name, run.seed, run.strategy);
    }
    Ok((run, config))
}

/// The refusal of a run `name` that the database lacks: the runs it holds, and what to do.
async fn no_such_run(store: &Store, name: &str, db: &str) -> crate::RunError {
    let db = evo_store::redact_url(db);
    let runs = match store.runs().await {
        Ok(runs) => runs,
        Err(e) => return e.into(),
    };
    let holds = match runs.len() {
        0 => "it holds no run yet".to_string(),
        1..=8 => format!(
            "it holds {}",
            runs.iter()
                .map(|r| format!("`{}`", r.name))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        n => format!("it holds {n} runs (`evo runs --db {db}` lists them)"),
    };
    refused!("no run `{name}` in {db} ({holds}): start it with `evo search -c CONFIG --run {name} --db {db}`, or check --db (or EVO_DB)")
}

/// An evaluator label with a replay file's path made absolute, so the run it is stored
/// with resumes (and is joined) from any working directory.
fn absolute_label(label: &str) -> String {
    match label.strip_prefix("replay:") {
        Some(file) => match std::path::absolute(file) {
            Ok(path) => format!("replay:{}", path.display()),
            Err(_) => label.to_string(),
        },
        None => label.to_string(),
    }
}

/// Whether replay labels `given` and `stored` name the same landscape: the same bytes, or
/// `stored` is not on this machine and `given` is (a host elsewhere names its own copy,
/// whose content [`check_landscape`] compares with the run's).
fn same_landscape(given: &str, stored: &str) -> bool {
    let (Some(given), Some(stored)) = (
        given.strip_prefix("replay:"),
        stored.strip_prefix("replay:"),
    ) else {
        return false;
    };
    match (std::fs::read(given), std::fs::read(stored)) {
        (Ok(a), Ok(b)) => a == b,
        (Ok(_), Err(_)) => true,
        _ => false,
    }
}

/// The evaluator: a run keeps its own, so every host of it evaluates the same way.
fn evaluating(
    request: &RunRequest,
    existing: Option<&evo_store::Run>,
    config: &SearchConfig,
) -> Result<Evaluating> {
    let label = match (&request.evaluator, existing) {
        (Some(e), Some(run)) => {
            let given = absolute_label(e);
            if *e != run.evaluator
                && given != run.evaluator
                && !same_landscape(&given, &run.evaluator)
            {
                refuse!(
                    "run `{}` evaluates with `{}`, not `{e}`: every host of a run uses the same evaluator (drop --evaluator)",
                    run.name,
                    run.evaluator
                )
            }
            given
        }
        (Some(e), None) => absolute_label(e),
        (None, Some(run)) => run.evaluator.clone(),
        (None, None) => "gpu".into(),
    };
    let replay = label.strip_prefix("replay:").map(PathBuf::from);
    if replay.is_some() {
        let arch = match config.compile.arch.as_str() {
            "auto" => evo_core::target::DEFAULT_ARCH.to_string(),
            a => a.to_string(),
        };
        return Ok(Evaluating {
            replay,
            target: Target::from_arch(&arch)?,
            target_reason: "the config's (the replay evaluator runs no kernel)".into(),
            device: None,
            gpus: Vec::new(),
        });
    }
    if label != "gpu" {
        refuse!("--evaluator must be `gpu` or `replay:FILE`, not `{label}`");
    }
    let (gpus, info) = select_gpus(&request.gpus)?;
    let d = &info.devices[gpus[0] as usize];
    Ok(Evaluating {
        target: gpu_target(&info, gpus[0])?,
        target_reason: format!("the architecture of GPU {}, {}", gpus[0], d.name),
        device: Some((d.name.clone(), info.cuda_version)),
        replay,
        gpus,
    })
}

/// The config's `[search] seeds`, each a valid genome of the space (a seed that breaks a
/// constraint is an error, not silently dropped).
fn seed_genomes(context: &Context) -> Result<Vec<Genome>> {
    context
        .config
        .search
        .seeds
        .iter()
        .map(|s| {
            let g = Genome::parse(s).context(|| format!("[search] seed `{s}`"))?;
            // A seed written before a knob existed takes the knob's default.
            let g = context
                .space
                .complete(&g)
                .context(|| format!("[search] seed `{s}`"))?;
            if let Some(r) = context.space.rejection(&g) {
                let why = match &r.error {
                    Some(e) => format!("constraint `{}` cannot be computed: {e}", r.constraint),
                    None => format!("it violates constraint `{}`", r.constraint),
                };
                refuse!(
                    "[search] seed `{s}` is not a valid genome of family {}: {why}",
                    context.family.name
                );
            }
            Ok(g)
        })
        .collect()
}

/// `stored`: the run exists (resumed or joined), its landscape named by the database.
fn backend(ev: &Evaluating, context: Arc<Context>, salt: u64, stored: bool) -> Result<Backend> {
    match &ev.replay {
        Some(file) => {
            let (mut landscape, sha256) = Landscape::load_with_digest(file).context(|| {
                if stored {
                    "the run's landscape (a run started on another machine: pass --evaluator replay:FILE with this machine's copy)".into()
                } else {
                    "--evaluator replay:FILE".into()
                }
            })?;
            // Points recorded before a knob existed: keyed by their completed genomes.
            landscape.points = std::mem::take(&mut landscape.points)
                .into_iter()
                .map(|(text, point)| {
                    let key = Genome::parse(&text)
                        .ok()
                        .and_then(|g| context.space.complete(&g).ok())
                        .map_or(text, |g| g.canonical());
                    (key, point)
                })
                .collect();
            if landscape.family != context.family.name {
                refuse!(
                    "landscape {} is for family {}, the config's is {}",
                    file.display(),
                    landscape.family,
                    context.family.name
                );
            }
            Ok(Backend::Replay {
                landscape,
                file: file.display().to_string(),
                sha256,
            })
        }
        None => Ok(Backend::Gpu(GpuBackend::new(context, &ev.gpus, salt)?)),
    }
}

/// A replay run keeps its landscape: a resumed or joining host replaying a file that
/// differs from the one the run started on (edited, exported again, another machine's
/// copy) would mix two landscapes' times in one run.
fn check_landscape(
    existing: Option<&evo_store::Run>,
    backend: &Backend,
    progress: &dyn Progress,
) -> Result<()> {
    let (Some(run), Backend::Replay { file, sha256, .. }) = (existing, backend) else {
        return Ok(());
    };
    let short = |h: &str| h.get(..12).unwrap_or(h).to_string();
    match run.run_settings()?.and_then(|s| s.landscape_sha256) {
        Some(started) if started != *sha256 => refuse!(
            "landscape {file} is not the one run `{}` started on (SHA-256 {}..., now {}...): its times would mix with the run's. Replay the run's own landscape, or start a new run on this one: evo search -c CONFIG --run NEW-NAME --evaluator replay:{file}",
            run.name,
            short(&started),
            short(sha256)
        ),
        Some(_) => {}
        None => progress.note(&format!(
            "note: run `{}` was stored without its landscape's hash (an older evo): a change to {file} since it started goes unnoticed",
            run.name
        )),
    }
    Ok(())
}

/// Creates the run, now that everything it needs has loaded.
async fn create(
    store: &Store,
    name: &str,
    context: &Context,
    kind: StrategyKind,
    seed: u64,
    backend: &Backend,
    ev: &Evaluating,
) -> Result<RunId> {
    let nvrtc = evo_gpu::nvrtc::version()
        .ok()
        .map(|(a, b)| format!("{a}.{b}"));
    Ok(store
        .create_run(&NewRun {
            name: name.into(),
            config_toml: context.config.text.clone(),
            problem: context.family.problem.name().into(),
            family: context.config.family.clone(),
            seed,
            strategy: kind.name().into(),
            evaluator: backend.label(),
            device: ev.device.as_ref().map(|d| d.0.clone()),
            driver: ev
                .device
                .as_ref()
                .map(|d| format!("CUDA {}.{}", d.1 / 1000, (d.1 % 1000) / 10)),
            nvrtc_version: nvrtc,
            arch: Some(ev.target.arch.clone()),
        })
        .await?)
}

/// Run-wide settings: set by the run's first host, changed only by a resume; a joining
/// host takes them as they are.
async fn settle_settings(
    store: &Store,
    id: RunId,
    request: &RunRequest,
    existing: Option<&evo_store::Run>,
    context: &Context,
    backend: &Backend,
) -> Result<RunSettings> {
    let stored = match existing {
        Some(r) => r.run_settings()?,
        None => None,
    };
    let mut settings = stored.unwrap_or(RunSettings {
        allow_mixed_devices: request.allow_mixed_gpus,
        lease_ms: DEFAULT_LEASE.as_millis() as u64,
        max_generations: None,
        patience: context.config.search.patience,
        landscape_sha256: None,
    });
    if matches!(request.target, RunTarget::Join { .. }) {
        return Ok(settings);
    }
    if let Some(l) = request.lease {
        settings.lease_ms = l.as_millis().max(1) as u64;
    }
    if let Some(n) = request.max_generations {
        settings.max_generations = Some(n);
    }
    if let Some(p) = request.patience {
        settings.patience = p;
    }
    if existing.is_none() {
        settings.allow_mixed_devices = request.allow_mixed_gpus;
        if let Backend::Replay { sha256, .. } = backend {
            settings.landscape_sha256 = Some(sha256.clone());
        }
    }
    store
        .set_run_settings(id, &evo_store::to_stored_json(&settings))
        .await?;
    Ok(settings)
}

/// A run keeps its GPU model: a host with another is refused unless the run allows it.
fn check_device(
    existing: Option<&evo_store::Run>,
    ev: &Evaluating,
    settings: &RunSettings,
    progress: &dyn Progress,
) -> Result<()> {
    let (Some(run), Some((ours, _))) = (existing, &ev.device) else {
        return Ok(());
    };
    if let Some(theirs) = run.device.as_ref().filter(|d| *d != ours) {
        if !settings.allow_mixed_devices {
            refuse!(
                "run `{}` runs on {theirs}; this host's GPU is {ours}: their timings would not compare. Join from hosts with {theirs}, or start the run with --allow-mixed-gpus",
                run.name
            );
        }
        progress.note(&format!(
            "warning: run `{}` runs on {theirs}, this host on {ours} (the run allows mixed GPUs)",
            run.name
        ));
    }
    Ok(())
}

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

/// Registers this process as a host of the run, after ending the dead processes of this
/// machine that were hosts of it (SIGKILL, a crash): their leases are given back at once
/// instead of after their timeout, and they no longer count as hosts still working.
async fn register(
    store: &Store,
    run: RunId,
    ev: &Evaluating,
    backend: &Backend,
    progress: &dyn Progress,
) -> Result<NewHost> {
    let pid = std::process::id();
    let me = NewHost {
        id: format!(
            "{}:{pid}:{:04x}",
            hostname(),
            evo_store::now_ms() as u16 ^ (pid as u16).rotate_left(7)
        ),
        hostname: hostname(),
        pid,
        device: ev.device.as_ref().map(|d| d.0.clone()),
        gpus: ev.gpus.len() as u32,
        evaluator: backend.label(),
    };
    for h in store.hosts(run).await? {
        if h.hostname == me.hostname
            && h.finished_at.is_none()
            && h.pid != me.pid
            && pid_alive(h.pid) == Some(false)
        {
            let n = store.end_dead_host(&h.id).await?;
            if n > 0 {
                progress.note(&format!(
                    "released {n} candidate(s) claimed by {}, which died",
                    h.id
                ));
            }
        }
    }
    store.register_host(run, &me).await?;
    Ok(me)
}

/// A new run's name: it names the run's log file (`evo-logs/<name>.log`) and is typed on
/// command lines, so letters, digits, `-`, `_` and `.`, not starting with `.` or `-`, at most
/// 100 characters (a name like `../x` would write its log outside `evo-logs/`).
pub(crate) fn check_run_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 100
        || name.starts_with(['.', '-'])
        || !name.chars().all(is_name_char)
        || name.parse::<i64>().is_ok()
    {
        usage!(
            "--run `{name}`: a run name uses letters, digits, `-`, `_` and `.` (not first), at most 100 characters, and is not a number (numbers name candidates)"
        );
    }
    Ok(())
}

/// A character a run name may hold (and its log file's name keeps).
pub(crate) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

#[cfg(test)]
mod tests {
    use super::check_run_name;

    #[test]
    fn run_names_are_safe_file_names() {
        for good in ["night", "sdpa_fwd_mma-1763900000", "a.b-c_d", "x1"] {
            assert!(check_run_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "../x",
            "a/b",
            ".hidden",
            "-flag",
            "a b",
            "12",
            &"n".repeat(101),
        ] {
            let e = check_run_name(bad).unwrap_err().to_string();
            assert!(
                e.contains("run name") && e.contains("letters, digits"),
                "{bad}: {e}"
            );
        }
    }
}
