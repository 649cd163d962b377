//! evo-run: the search as a library — a run of a population database (the "Study" of
//! Optuna's vocabulary), opened by [`Run::open`] and worked on by [`Run::work`] on any
//! number of hosts; and the read queries the inspect commands and the report print
//! ([`inspect`]).
//!
//! * [`context`]: config → templates → family → target → space, the one loader of every
//!   command (a config file, a stored run, a search).
//! * [`backend`]: the GPU evaluator (compiles running ahead, one GPU slot per worker) or
//!   the replay of a recorded landscape; the GPU selection.
//! * [`baseline`]: the per-shape times every fitness is relative to: imported, or the
//!   baseline genome evaluated first; rescoring a run on a new one.
//! * `host` (inside [`Run::work`]): claim / evaluate / record under a lease, the
//!   heartbeat, the lease release; `generation`: history, insights, elites, patience,
//!   propose and advance in one compare-and-set.
//! * [`scoring`]: fitness and the regression rule; [`budget`]: when an invocation stops.
//!
//! Survives anything: every result is committed when it arrives; a killed run leaves
//! its unevaluated candidates pending, and a resumed run evaluates those, then carries on
//! with the same strategy state (the strategy is a pure function of the seed and the
//! stored history, so nothing else needs saving). One loop serves one host and many:
//! whichever host finds no candidate pending completes the generation and stores the
//! next one's proposals in one compare-and-set transaction
//! ([`evo_store::Store::advance_generation`]); proposals depend only on the seed and the
//! recorded results, so every host would propose the same genomes, and the run equals a
//! single-process run with the same seed and results.
//!
//! No command-line parsing and no terminal here: the caller turns flags into a
//! [`RunRequest`], checks it ([`RunRequest::check`]: bad input is refused before a
//! database is opened or created), shows [`Progress`], and stops the work through [`Stop`].

pub mod backend;
pub mod baseline;
pub mod budget;
pub mod context;
mod error;
mod generation;
mod host;
pub mod inspect;
mod open;
mod progress;
pub mod scoring;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use evo_core::config::SearchParams;
use evo_core::Genome;
use evo_search::{Strategy, StrategyKind};
use evo_store::{NewHost, RunId, RunSettings, Store};

pub use backend::{parse_gpus, select_gpus, Backend, GenomeResult};
pub use budget::{parse_duration, Budget};
pub use context::{
    check_arch_flag, choose_target, parse_flag_list, templates_root, Context, TargetChoice,
};
pub use error::{MissingComponent, Result, RunError, UsageError};
pub use open::CheckedRequest;
pub use progress::{Evaluated, Progress, Quiet, Stop};

/// Which run to open.
#[derive(Clone, Debug)]
pub enum RunTarget {
    /// A new run of the config at `config`, named `name` (default: `<family>-<unix time>`).
    New {
        config: PathBuf,
        name: Option<String>,
    },
    /// Continue the run `name` where it stopped. A `config` given must be the text the
    /// run started with.
    Resume {
        name: String,
        config: Option<PathBuf>,
    },
    /// Work on the run `name` that another host started (on PostgreSQL, waits for it to
    /// be created; a SQLite file is one machine's, so the run must exist).
    Join { name: String },
}

/// What to open, and how this host takes part.
#[derive(Clone, Debug)]
pub struct RunRequest {
    pub target: RunTarget,
    /// The database as the user named it (messages, the run log's folder).
    pub db: String,
    /// How long a claimed candidate stays this host's without a heartbeat (new runs and
    /// resumes; joiners use the run's).
    pub lease: Option<Duration>,
    /// New runs: accept hosts whose GPUs differ from the first host's.
    pub allow_mixed_gpus: bool,
    /// The run ends after this many generations (new runs and resumes).
    pub max_generations: Option<u32>,
    /// Generations without improvement before the run ends (overrides the config's).
    pub patience: Option<u32>,
    /// New runs: override the config's seed and strategy (a resumed run keeps its own).
    pub seed: Option<u64>,
    pub strategy: Option<String>,
    /// `gpu` or `replay:FILE`; `None`: `gpu` for a new run, the run's own otherwise.
    pub evaluator: Option<String>,
    /// The GPUs of this host (`0,1`, `all`), for the GPU evaluator.
    pub gpus: String,
    /// The templates folder (see [`templates_root`]).
    pub templates: Option<PathBuf>,
}

/// How this invocation works on the run.
#[derive(Clone, Debug, Default)]
pub struct HostOptions {
    /// Time and evaluation budgets of this invocation (generation budgets belong to the
    /// run: [`RunRequest::max_generations`]).
    pub budget: Option<Budget>,
    pub stop: Stop,
}

/// A run opened on this host: loaded, registered as one of its hosts, ready to work.
pub struct Run {
    store: Store,
    db: String,
    id: RunId,
    name: String,
    context: Arc<Context>,
    joined: bool,
    kind: StrategyKind,
    strategy: Box<dyn Strategy>,
    params: SearchParams,
    seeds: Vec<Genome>,
    backend: Arc<Backend>,
    settings: RunSettings,
    host: NewHost,
    /// This host's GPU model (`None` on the replay evaluator).
    device: Option<String>,
    gpus: usize,
    /// This host's first GPU (`None` on the replay evaluator): where PyTorch is measured.
    first_gpu: Option<u32>,
    /// This invocation created the run (not `--resume`, not `join`): one that fails before
    /// its first evaluation is removed again.
    created_here: bool,
}

impl Run {
    /// The run's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `gpu` or `replay:FILE`.
    pub fn evaluator(&self) -> String {
        self.backend.label()
    }

    /// Where the run's log lines belong: `<database folder>/evo-logs/<run>.log`, or
    /// `evo-logs/<run>.log` in the working directory for a database server.
    pub fn log_path(&self) -> PathBuf {
        run_log_path(&self.db, &self.name)
    }
}

fn run_log_path(db: &str, run: &str) -> PathBuf {
    use std::path::Path;
    // Runs named before names were checked: never a path outside evo-logs/.
    let run: String = run
        .chars()
        .map(|c| if open::is_name_char(c) { c } else { '_' })
        .collect();
    match evo_store::database_file(db) {
        Ok(Some(file)) => file
            .parent()
            .unwrap_or(Path::new("."))
            .join("evo-logs")
            .join(format!("{run}.log")),
        // A server: the log stays on this host, in the working directory.
        _ => Path::new("evo-logs").join(format!("{run}.log")),
    }
}

/// What one invocation did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct WorkReport {
    pub run: String,
    /// Why it stopped (`interrupted` after [`Stop::request`]).
    pub reason: String,
    pub interrupted: bool,
    /// Results this host recorded.
    pub evaluated: u64,
    pub wall_s: f64,
    /// GPUs of this host (0 on the replay evaluator) and their workers' time on jobs, ms.
    pub gpus: usize,
    pub gpu_ms: f64,
    /// Each GPU's busy fraction of the wall time.
    pub gpu_busy: Vec<(u32, f64)>,
    /// Time spent waiting for the database, ms.
    pub db_ms: f64,
    /// Generations this host advanced.
    pub advanced: u32,
    /// Results refused because the lease had gone to another host.
    pub lost_leases: u64,
    /// Candidates of the run per status name (`pending` for those without a result).
    pub statuses: std::collections::BTreeMap<String, u64>,
    /// The fittest genome of the run, regressed ones included: (fitness, genome, hash).
    pub best: Option<(f64, String, String)>,
    /// What the fitness is relative to: the baseline's source (`torch: ...`,
    /// `genome:<hash>`, `import:<file> (...)`).
    pub baseline: Option<String>,
}
