//! The run state the search writes as JSON and every reader reads back: run-wide
//! settings (`runs.settings`), the search state (`runs.search_state` and each
//! `generations.state`), a generation's elites and a host's closing counters
//! (`hosts.stats`). Defined once here, so the writer (evo-run) and the readers (inspect,
//! stats, report, export) agree on every key.
//!
//! The columns stay JSON text (a database written by another version still opens);
//! [`Run::run_settings`], [`Run::state`] and [`Generation::search_state`] read them into
//! these types, and [`to_stored_json`] writes them (keys sorted, as before).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use evo_core::config::SearchParams;

use crate::error::StoreError;
use crate::model::{Generation, Run};

/// Run-wide settings every host obeys (`runs.settings`): set by a run's first host,
/// changed only by `evo search --resume`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// Hosts whose GPU differs from the first host's may join.
    pub allow_mixed_devices: bool,
    /// Lease of a claimed candidate, ms (a host's heartbeat extends it).
    pub lease_ms: u64,
    /// The run ends after this many generations.
    pub max_generations: Option<u32>,
    /// The run ends after this many generations without improvement (0: never).
    pub patience: u32,
    /// The replay evaluator's landscape as the run started on it: the SHA-256 (hex) of its
    /// JSON text. A host replaying another is refused; `None` on the GPU evaluator and in
    /// runs stored before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landscape_sha256: Option<String>,
}

/// The search state after an advance (`runs.search_state`; a completed generation keeps
/// its own copy in `generations.state`). Everything a resumed run or a report needs that
/// the candidates do not say.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchState {
    /// The config file the run started from (its text is in `runs.config_toml`).
    pub config_path: Option<String>,
    /// The strategy's name.
    #[serde(default)]
    pub strategy: String,
    #[serde(default)]
    pub params: SearchParams,
    /// The newest completed generation; `None` before the first completes.
    pub generation: Option<u32>,
    /// Completed generations in a row without a better best fitness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_generations: Option<u64>,
    /// The host (`hostname:pid:tag`) that completed the generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advanced_by: Option<String>,
    /// Evaluations of that host's invocation so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluated_this_invocation: Option<u64>,
    /// GPU worker time / (wall time × GPUs) of that invocation; 0 for a replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_busy_fraction: Option<f64>,
    /// Evaluations per hour of that invocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluations_per_hour: Option<f64>,
}

/// One elite of a completed generation (`generations.elites` is a list of them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EliteEntry {
    pub genome: String,
    pub hash: String,
    pub fitness: Option<f64>,
}

/// What a host says when it stops (`hosts.stats`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostStats {
    /// Wall time of the invocation, seconds.
    pub wall_s: f64,
    /// Generations this host advanced.
    pub advanced: u32,
    /// Results refused because the lease had gone to another host.
    pub lost_leases: u64,
    /// Each GPU's busy fraction of the wall time.
    pub gpu_busy: Vec<GpuBusy>,
    /// Why it stopped.
    pub reason: String,
    /// Where the evaluations' time went, ms per stage summed over the invocation
    /// (`compile`, the GPU worker's stages, `sanitizer`, `database`); absent in runs
    /// recorded before it was kept.
    #[serde(default)]
    pub stages_ms: BTreeMap<String, f64>,
}

/// One GPU's share of a host's wall time spent on jobs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuBusy {
    pub gpu: u32,
    pub busy: f64,
}

/// The JSON a state type is stored as (keys in sorted order, as `serde_json::Value`
/// writes them).
pub fn to_stored_json(value: &impl Serialize) -> Json {
    serde_json::to_value(value).expect("state types serialize to JSON")
}

fn read<T: serde::de::DeserializeOwned>(
    table: &'static str,
    column: &str,
    value: &Json,
) -> Result<T, StoreError> {
    serde_json::from_value(value.clone()).map_err(|e| StoreError::Corrupt {
        table,
        message: format!("column {column} is not the JSON expected: {e}"),
    })
}

impl Run {
    /// The run-wide settings, when the run has them.
    pub fn run_settings(&self) -> Result<Option<RunSettings>, StoreError> {
        self.settings
            .as_ref()
            .map(|s| read("runs", "settings", s))
            .transpose()
    }

    /// The search state of the newest advance, when the run has one.
    pub fn state(&self) -> Result<Option<SearchState>, StoreError> {
        self.search_state
            .as_ref()
            .map(|s| read("runs", "search_state", s))
            .transpose()
    }
}

impl Generation {
    /// The search state saved with this generation.
    pub fn search_state(&self) -> Result<SearchState, StoreError> {
        read("generations", "state", &self.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stored text is what the search wrote before these types existed: sorted keys,
    /// `generation` present even when null, the invocation counters only when set.
    #[test]
    fn stored_json_keeps_its_keys() {
        let s = SearchState {
            config_path: Some("configs/x.toml".into()),
            strategy: "evolution".into(),
            params: SearchParams::default(),
            generation: None,
            ..Default::default()
        };
        assert_eq!(
            to_stored_json(&s).to_string(),
            r#"{"config_path":"configs/x.toml","generation":null,"params":{"crossover_share":0.25,"elites":8,"exploration_share":0.15,"insight_weight":0.5,"max_knob_moves":2,"mutation_share":0.6,"population":32,"seed":0},"strategy":"evolution"}"#
        );
        let back: SearchState = serde_json::from_value(to_stored_json(&s)).unwrap();
        assert_eq!(back, s);
        let old: SearchState = serde_json::from_str(r#"{"generation": 3, "rng": [1]}"#).unwrap();
        assert_eq!(old.generation, Some(3));
        assert!(serde_json::from_str::<RunSettings>(r#"{"lease_ms": "x"}"#).is_err());
    }
}
