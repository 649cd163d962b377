//! The rows evo-store reads and writes, as plain structs (all `Serialize`, for the
//! CLI's `--json`). Statuses and gates are evo-core's [`Status`] and [`Gate`], stored by
//! name; origins and run states are named here.

use std::collections::BTreeMap;
use std::fmt;

use evo_core::{Gate, Genome, GenomeError, ShapeMeasurement, Status};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// The key [`crate::Store::status_counts`] uses for candidates without a result yet.
pub const PENDING: &str = "pending";

/// Row id of a run.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct RunId(pub i64);

/// Row id of a candidate; unique across all runs of a database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CandidateId(pub i64);

/// Row id of a profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProfileId(pub i64);

macro_rules! display_id {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    )*};
}
display_id!(RunId, CandidateId, ProfileId);

macro_rules! named_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $text:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($variant),* }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The name stored in the database.
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }

            pub fn parse(text: &str) -> Option<$name> {
                Self::ALL.iter().copied().find(|v| v.name() == text)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

named_enum! {
    /// Where a run stands. A run left `running` by a killed process is resumed (or marked
    /// `interrupted`) by the caller.
    RunStatus {
        Running => "running",
        Finished => "finished",
        Interrupted => "interrupted",
    }
}

named_enum! {
    /// How a candidate came to be.
    Origin {
        Seed => "seed",
        Random => "random",
        Mutation => "mutation",
        Crossover => "crossover",
        Exhaustive => "exhaustive",
        Baseline => "baseline",
    }
}

/// What [`crate::Store::create_run`] needs. `status` starts as `running`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NewRun {
    /// Unique in the database.
    pub name: String,
    /// The search configuration as given, so a run can be reproduced.
    pub config_toml: String,
    pub problem: String,
    pub family: String,
    pub seed: u64,
    /// `evolution`, `random`, `exhaustive`, ...
    pub strategy: String,
    /// `gpu` or `replay:FILE`.
    pub evaluator: String,
    pub device: Option<String>,
    pub driver: Option<String>,
    pub nvrtc_version: Option<String>,
    pub arch: Option<String>,
}

/// A run as stored.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Run {
    pub id: RunId,
    pub name: String,
    pub created_at: String,
    /// Last change of status or search state.
    pub updated_at: String,
    /// The evo version that created the run.
    pub evo_version: String,
    pub config_toml: String,
    pub problem: String,
    pub family: String,
    pub seed: u64,
    pub strategy: String,
    pub evaluator: String,
    pub device: Option<String>,
    pub driver: Option<String>,
    pub nvrtc_version: Option<String>,
    pub arch: Option<String>,
    pub status: RunStatus,
    /// The last state given to [`crate::Store::save_search_state`] or
    /// [`crate::Store::advance_generation`]: a [`crate::SearchState`] as JSON
    /// ([`Run::state`] reads it).
    pub search_state: Option<Json>,
    /// Run-wide settings every host obeys: a [`crate::RunSettings`] as JSON
    /// ([`Run::run_settings`] reads it).
    pub settings: Option<Json>,
}

/// One line of `evo runs`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunSummary {
    pub id: RunId,
    pub name: String,
    pub created_at: String,
    pub updated_at: String,
    pub problem: String,
    pub family: String,
    pub strategy: String,
    pub evaluator: String,
    pub device: Option<String>,
    pub status: RunStatus,
    /// All candidates of the run.
    pub candidates: u64,
    /// Candidates per status name, [`PENDING`] for those without a result.
    pub counts: BTreeMap<String, u64>,
    /// Highest fitness of an `evaluated` candidate.
    pub best_fitness: Option<f64>,
    /// Highest fitness of a `regressed` candidate (correct, slower than the baseline on
    /// some shape): the best a run has when none is `evaluated` yet.
    pub best_regressed: Option<f64>,
    /// Highest generation saved with [`crate::Store::save_generation`].
    pub last_generation: Option<u32>,
}

/// A genome to add to a run. The store derives the canonical text and the hash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewCandidate {
    pub genome: Genome,
    pub generation: u32,
    /// Hashes of the parents (none for seeds and random genomes).
    pub parents: Vec<String>,
    pub origin: Origin,
    /// Compile cache key, if already known (it can also come with the result).
    pub source_key: Option<String>,
}

impl NewCandidate {
    pub fn new(genome: Genome, generation: u32, origin: Origin) -> Self {
        NewCandidate {
            genome,
            generation,
            parents: Vec::new(),
            origin,
            source_key: None,
        }
    }

    pub fn with_parents(mut self, parents: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.parents = parents.into_iter().map(Into::into).collect();
        self
    }
}

/// A candidate as stored.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Candidate {
    pub id: CandidateId,
    pub run_id: RunId,
    /// Canonical text, `NAME=value,...` sorted by name.
    pub genome: String,
    /// `evo_core::GenomeHash` of `genome`.
    pub hash: String,
    pub generation: u32,
    pub parents: Vec<String>,
    pub origin: Origin,
    /// `None` while pending.
    pub status: Option<Status>,
    /// The gate that failed (or the last one reached).
    pub gate: Option<Gate>,
    pub detail: Option<String>,
    pub resources: Option<Json>,
    pub fitness: Option<f64>,
    pub source_key: Option<String>,
    pub created_at: String,
    pub evaluated_at: Option<String>,
    pub eval_ms: Option<f64>,
    /// The host (`hostname:pid:tag`) that recorded the result, when known.
    pub evaluated_by: Option<String>,
    /// How often a host claimed it (more than 1: a lease expired and it went back).
    pub claims: u32,
    /// The host holding it now (pending candidates only; the lease may have expired).
    pub lease_owner: Option<String>,
}

impl Candidate {
    /// No result recorded yet.
    pub fn is_pending(&self) -> bool {
        self.status.is_none()
    }

    /// The genome parsed back from its canonical text.
    pub fn parse_genome(&self) -> Result<Genome, GenomeError> {
        Genome::parse(&self.genome)
    }
}

/// The outcome of evaluating one candidate, for [`crate::Store::record_result`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CandidateResult {
    pub status: Status,
    pub gate: Option<Gate>,
    pub detail: Option<String>,
    pub resources: Option<Json>,
    /// Only for the statuses that were timed ([`Status::has_fitness`]); finite.
    pub fitness: Option<f64>,
    /// Wall time the evaluation took.
    pub eval_ms: Option<f64>,
    /// Sets the candidate's compile cache key when given (kept when `None`).
    pub source_key: Option<String>,
}

impl CandidateResult {
    /// A result with this status and nothing else recorded.
    pub fn new(status: Status) -> CandidateResult {
        CandidateResult {
            status,
            gate: None,
            detail: None,
            resources: None,
            fitness: None,
            eval_ms: None,
            source_key: None,
        }
    }
}

/// One shape's measurement, for [`crate::Store::record_result`]: the one per-shape record
/// of evo-core. Times must be finite; a NaN error value is stored as NULL (SQLite has no
/// NaN), infinities are kept.
pub type NewMeasurement = ShapeMeasurement;

/// A measurement as stored: the record, with its row id and the shape's canonical text.
/// It dereferences to the record (`m.median_us`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Measurement {
    pub id: i64,
    pub candidate_id: CandidateId,
    /// Canonical text of the shape, see [`crate::shape_key`] (also in `measured`).
    #[serde(skip)]
    pub shape: String,
    #[serde(flatten)]
    pub measured: ShapeMeasurement,
}

impl std::ops::Deref for Measurement {
    type Target = ShapeMeasurement;

    fn deref(&self) -> &ShapeMeasurement {
        &self.measured
    }
}

/// A baseline time for one shape of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Baseline {
    pub run_id: RunId,
    /// Canonical text of the shape, see [`crate::shape_key`].
    pub shape: String,
    pub median_us: f64,
    /// `genome:<hash>`, `import:<file>`, ...
    pub source: String,
    pub created_at: String,
}

/// What [`crate::Store::save_generation`] stores for one generation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerationRow {
    pub run_id: RunId,
    pub generation: u32,
    /// The elites after this generation (the search decides the shape, e.g. hashes).
    pub elites: Json,
    /// Per-knob statistics of the elites.
    pub insights: Json,
    /// The search state after this generation.
    pub state: Json,
    pub best_fitness: Option<f64>,
    /// The caller's count of candidates evaluated (e.g. in this generation).
    pub evaluated: u64,
}

/// A generation as stored.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Generation {
    pub run_id: RunId,
    pub generation: u32,
    pub elites: Json,
    pub insights: Json,
    pub state: Json,
    pub best_fitness: Option<f64>,
    pub evaluated: u64,
    /// When the row was last written.
    pub created_at: String,
}

/// Profiler output to attach to a candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewProfile {
    /// `ncu`, `nsys`, ...
    pub tool: String,
    /// The canonical shape profiled, if one.
    pub shape: Option<String>,
    pub metrics: Json,
}

/// A profile as stored.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Profile {
    pub id: ProfileId,
    pub candidate_id: CandidateId,
    pub tool: String,
    pub shape: Option<String>,
    pub metrics: Json,
    pub created_at: String,
}
