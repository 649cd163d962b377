//! The read queries of a population database, for the inspect commands and the report:
//! opening without creating, finding a run or a candidate, a candidate with its
//! measurements against the baseline and its resources, the ranking, a lineage, and
//! where a run's candidates stopped. Printing is the caller's.
//!
//! Every query only reads: a missing database file is an error, never created.

use std::collections::{BTreeMap, BTreeSet};

use evo_core::{Gate, Genome, Status};
use evo_store::{Candidate, CandidateId, Run, Store};
use serde::Serialize;
use serde_json::Value as Json;

use crate::error::{refuse, refused, Result, ResultExt};

/// Opens an existing population database for reading. A missing SQLite file is an
/// error (a read command never creates a database); a current one is opened read-only
/// ([`Store::open_to_read`]).
pub async fn open_existing(db: &str) -> Result<Store> {
    if let Some(path) = evo_store::database_file(db)? {
        if !path.exists() {
            refuse!(
                "no population database at {}: `evo search` creates one; pass --db PATH (or set EVO_DB) to read another",
                path.display()
            );
        }
        // An empty file would become a database on opening (a write): a read leaves it.
        if std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() == 0) {
            refuse!(
                "{} is an empty file, not a population database yet: `evo search --db {}` makes it one; pass --db PATH (or set EVO_DB) to read another",
                path.display(),
                path.display()
            );
        }
    }
    Store::open_to_read(db)
        .await
        .context(|| "opening the population database".to_string())
}

/// The named run (name or id), else the newest run of the database.
pub async fn find_run(store: &Store, run: Option<&str>, db: &str) -> Result<Run> {
    match run {
        Some(name) => store
            .run(name)
            .await?
            .ok_or_else(|| refused!("no run `{name}` in {db}; `evo runs` lists the runs")),
        None => {
            let last =
                store.runs().await?.pop().ok_or_else(|| {
                    refused!("{db} holds no run yet; start one with `evo search`")
                })?;
            Ok(store.run_by_id(last.id).await?.expect("listed run exists"))
        }
    }
}

/// A candidate by id (`12`, `id:12`) or genome hash prefix (at least 4 hex digits),
/// optionally only within `run`. Ambiguous or missing references are errors that say
/// what matched.
pub async fn find_candidate(
    store: &Store,
    reference: &str,
    run: Option<&Run>,
    db: &str,
) -> Result<Candidate> {
    let text = reference.trim();
    let mut found: Vec<Candidate> = Vec::new();
    let explicit_id = text.strip_prefix("id:").or_else(|| text.strip_prefix('#'));
    let id_text = explicit_id.unwrap_or(text);
    if let Ok(id) = id_text.parse::<i64>() {
        if let Some(c) = store.candidate(CandidateId(id)).await? {
            found.push(c);
        }
    }
    if explicit_id.is_none() && text.len() >= 4 {
        for c in store.candidates_by_hash_prefix(text).await? {
            if !found.iter().any(|f| f.id == c.id) {
                found.push(c);
            }
        }
    }
    if let Some(r) = run {
        found.retain(|c| c.run_id == r.id);
    }
    let scope = run.map_or(String::new(), |r| format!(" of run `{}`", r.name));
    match found.len() {
        0 => refuse!(
            "no candidate{scope} with id or genome hash prefix `{text}` in {db} (hash prefixes need 4 or more hex digits; `evo elites` lists ids and hashes)"
        ),
        1 => Ok(found.pop().expect("one")),
        n => {
            let list: Vec<String> = found
                .iter()
                .take(6)
                .map(|c| format!("id {} (run {}, hash {})", c.id, c.run_id, c.hash))
                .collect();
            refuse!(
                "`{text}` is ambiguous: {n} candidates match: {}{}; give more hash digits, `id:N` for an id, or --run",
                list.join(", "),
                if n > 6 { ", ..." } else { "" }
            )
        }
    }
}

/// One measured shape of a candidate, with the run's baseline.
#[derive(Clone, Debug, Serialize)]
pub struct ShapeRow {
    pub shape: String,
    pub median_us: Option<f64>,
    pub p20_us: Option<f64>,
    pub p80_us: Option<f64>,
    pub tflops: Option<f64>,
    pub baseline_us: Option<f64>,
    /// Baseline time / this time.
    pub speedup: Option<f64>,
    pub max_abs_err: Option<f64>,
    pub rel_l2: Option<f64>,
}

/// Resource usage read from the static gate's record (largest over specializations).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ResourceSummary {
    pub registers: Option<u64>,
    /// Static + dynamic shared memory of the largest kernel.
    pub smem_bytes: Option<u64>,
    pub spill_bytes: Option<u64>,
    /// Tensor-core instructions (HMMA, HGMMA, QGMMA, ...) in the SASS.
    pub tensor_ops: Option<u64>,
}

impl ResourceSummary {
    /// From `candidates.resources` as the GPU search writes it: a list per
    /// specialization of `{kernels: [StaticKernel]}`. Anything else (a replayed run)
    /// gives an empty summary.
    pub fn from_json(resources: Option<&Json>) -> ResourceSummary {
        let mut s = ResourceSummary::default();
        let Some(specs) = resources.and_then(|r| r.as_array()) else {
            return s;
        };
        let max = |slot: &mut Option<u64>, v: Option<u64>| {
            if let Some(v) = v {
                *slot = Some(slot.map_or(v, |o| o.max(v)));
            }
        };
        for spec in specs {
            let Some(kernels) = spec.get("kernels").and_then(|k| k.as_array()) else {
                continue;
            };
            let mut tensor: Option<u64> = None;
            for k in kernels {
                let n = |f: &str| k.get(f).and_then(|v| v.as_u64());
                max(&mut s.registers, n("registers"));
                if let (Some(a), Some(b)) = (n("static_smem_bytes"), n("dynamic_smem_bytes")) {
                    max(&mut s.smem_bytes, Some(a + b));
                }
                max(&mut s.spill_bytes, n("spill_bytes"));
                if let Some(ops) = k.get("tensor_ops").and_then(|t| t.as_object()) {
                    let sum: u64 = ops.values().filter_map(|v| v.as_u64()).sum();
                    tensor = Some(tensor.unwrap_or(0) + sum);
                }
            }
            max(&mut s.tensor_ops, tensor);
        }
        s
    }
}

/// A candidate with everything the inspect commands print about it.
#[derive(Clone, Debug, Serialize)]
pub struct CandidateRow {
    /// Position by fitness (1 = fittest), where ranked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<usize>,
    pub id: i64,
    pub run_id: i64,
    pub hash: String,
    pub generation: u32,
    pub origin: String,
    pub parents: Vec<String>,
    /// `pending` while no result is recorded.
    pub status: String,
    pub gate: Option<String>,
    pub detail: Option<String>,
    pub fitness: Option<f64>,
    pub genome: String,
    pub knobs: BTreeMap<String, String>,
    pub shapes: Vec<ShapeRow>,
    pub resources: ResourceSummary,
    pub evaluated_at: Option<String>,
    pub eval_ms: Option<f64>,
}

/// The run's baseline time per shape key.
pub async fn baselines(store: &Store, run: &Run) -> Result<BTreeMap<String, f64>> {
    Ok(store
        .baselines(run.id)
        .await?
        .into_iter()
        .map(|b| (b.shape, b.median_us))
        .collect())
}

/// The keys of the run's configured shapes in the order its config lists them (empty when
/// the stored config cannot be read): tables show shapes in this order.
pub fn shape_order(run: &Run) -> Vec<String> {
    let Ok(config) = crate::context::stored_config(run) else {
        return Vec::new();
    };
    let Some(problem) = evo_kernels::problem(&config.problem) else {
        return Vec::new();
    };
    config
        .shapes
        .iter()
        .filter_map(|s| problem.complete_shape(s).ok())
        .map(|v| evo_core::shape_key(&v))
        .collect()
}

pub fn knobs(genome: &str) -> BTreeMap<String, String> {
    Genome::parse(genome)
        .map(|g| g.iter().map(|(k, v)| (k.clone(), v.to_string())).collect())
        .unwrap_or_default()
}

pub async fn candidate_row(
    store: &Store,
    c: &Candidate,
    baselines: &BTreeMap<String, f64>,
) -> Result<CandidateRow> {
    let shapes = store
        .measurements(c.id)
        .await?
        .into_iter()
        .map(|m| {
            let baseline_us = baselines.get(&m.shape).copied();
            ShapeRow {
                speedup: match (baseline_us, m.median_us) {
                    (Some(b), Some(t)) if t > 0.0 => Some(b / t),
                    _ => None,
                },
                shape: m.shape.clone(),
                median_us: m.median_us,
                p20_us: m.p20_us,
                p80_us: m.p80_us,
                tflops: m.tflops,
                baseline_us,
                max_abs_err: m.max_abs_err,
                rel_l2: m.rel_l2,
            }
        })
        .collect();
    Ok(CandidateRow {
        rank: None,
        id: c.id.0,
        run_id: c.run_id.0,
        hash: c.hash.clone(),
        generation: c.generation,
        origin: c.origin.name().into(),
        parents: c.parents.clone(),
        status: c
            .status
            .map_or_else(|| evo_store::PENDING.into(), |s| s.name().into()),
        gate: c.gate.map(|g| g.name().into()),
        detail: c.detail.clone(),
        fitness: c.fitness,
        genome: c.genome.clone(),
        knobs: knobs(&c.genome),
        shapes,
        resources: ResourceSummary::from_json(c.resources.as_ref()),
        evaluated_at: c.evaluated_at.clone(),
        eval_ms: c.eval_ms,
    })
}

/// Candidates with a fitness (evaluated and regressed: against a fast external
/// baseline every early kernel regresses), fittest first, ties by id; ranked.
pub async fn ranked(store: &Store, run: &Run, top: usize) -> Result<Vec<CandidateRow>> {
    let mut cands: Vec<Candidate> = store
        .candidates(run.id)
        .await?
        .into_iter()
        .filter(|c| c.fitness.is_some_and(f64::is_finite))
        .collect();
    cands.sort_by(|a, b| {
        b.fitness
            .partial_cmp(&a.fitness)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.id.cmp(&b.id))
    });
    cands.truncate(top);
    let base = baselines(store, run).await?;
    let mut rows = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        let mut row = candidate_row(store, c, &base).await?;
        row.rank = Some(i + 1);
        rows.push(row);
    }
    Ok(rows)
}

/// One knob that differs between two genomes.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct KnobChange {
    pub knob: String,
    pub from: Option<String>,
    pub to: Option<String>,
}

pub fn knob_changes(
    from: &BTreeMap<String, String>,
    to: &BTreeMap<String, String>,
) -> Vec<KnobChange> {
    let names: BTreeSet<&String> = from.keys().chain(to.keys()).collect();
    names
        .into_iter()
        .filter(|k| from.get(*k) != to.get(*k))
        .map(|k| KnobChange {
            knob: k.clone(),
            from: from.get(k).cloned(),
            to: to.get(k).cloned(),
        })
        .collect()
}

/// One ancestor (or the candidate itself) in a lineage.
#[derive(Clone, Debug, Serialize)]
pub struct LineageStep {
    pub id: i64,
    pub hash: String,
    pub generation: u32,
    pub origin: String,
    pub status: String,
    pub fitness: Option<f64>,
    pub genome: String,
    /// Parent candidate ids (in the order of `parents`), where found in the run.
    pub parent_ids: Vec<Option<i64>>,
    /// The knobs that differ from the first parent.
    pub changes: Vec<KnobChange>,
    /// For crossovers: the knobs that differ from the second parent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changes_from_second: Vec<KnobChange>,
}

/// Every ancestor of `c` in its run, once, oldest generation first, with the knobs each
/// changed from its parents.
pub async fn lineage(store: &Store, run: &Run, c: &Candidate) -> Result<Vec<LineageStep>> {
    // Every ancestor, once, oldest generation first.
    let mut seen: BTreeMap<String, Candidate> = BTreeMap::new();
    let mut todo = vec![c.clone()];
    while let Some(x) = todo.pop() {
        if seen.contains_key(&x.hash) {
            continue;
        }
        for p in &x.parents {
            if !seen.contains_key(p) {
                if let Some(pc) = store.candidate_by_hash(run.id, p).await? {
                    todo.push(pc);
                }
            }
        }
        seen.insert(x.hash.clone(), x);
    }
    let mut all: Vec<&Candidate> = seen.values().collect();
    all.sort_by_key(|x| (x.generation, x.id));
    let steps: Vec<LineageStep> = all
        .iter()
        .map(|x| {
            let mine = knobs(&x.genome);
            let parent = |i: usize| x.parents.get(i).and_then(|h| seen.get(h));
            LineageStep {
                id: x.id.0,
                hash: x.hash.clone(),
                generation: x.generation,
                origin: x.origin.name().into(),
                status: x
                    .status
                    .map_or_else(|| evo_store::PENDING.into(), |s| s.name().into()),
                fitness: x.fitness,
                genome: x.genome.clone(),
                parent_ids: x
                    .parents
                    .iter()
                    .map(|h| seen.get(h).map(|p| p.id.0))
                    .collect(),
                changes: parent(0)
                    .map(|p| knob_changes(&knobs(&p.genome), &mine))
                    .unwrap_or_default(),
                changes_from_second: parent(1)
                    .map(|p| knob_changes(&knobs(&p.genome), &mine))
                    .unwrap_or_default(),
            }
        })
        .collect();
    Ok(steps)
}

/// Candidates that stopped with one status, and the most common reasons.
#[derive(Clone, Debug, Serialize)]
pub struct StatusCount {
    pub status: Status,
    pub gate: Option<Gate>,
    pub count: u64,
    /// First line of the detail (up to 160 characters) → how many.
    pub reasons: Vec<(String, u64)>,
}

/// How many candidates reached each stage of the gates.
#[derive(Clone, Debug, Serialize)]
pub struct FunnelStage {
    pub stage: String,
    pub reached: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunStats {
    pub run: String,
    pub evaluator: String,
    pub candidates: u64,
    pub pending: u64,
    pub by_status: Vec<StatusCount>,
    pub funnel: Vec<FunnelStage>,
    pub generations: u64,
    pub best_fitness: Option<f64>,
    /// From the first candidate's creation to the last result, hours.
    pub wall_hours: Option<f64>,
    pub evaluations_per_hour: Option<f64>,
    /// Of the last `evo search` invocation, as the search recorded it.
    pub last_invocation_evaluations_per_hour: Option<f64>,
    /// Of the last invocation: GPU worker time / (wall time × GPUs); 0 for a replay.
    pub gpu_busy_fraction: Option<f64>,
    /// Sum of the evaluations' own wall times, hours.
    pub evaluation_hours: f64,
    /// Where the last invocation's time went, longest first (empty where it was not
    /// recorded: replays, runs from before it was kept).
    pub last_invocation_stages: Vec<StageTime>,
}

/// One stage of the evaluations of an invocation: `compile` (NVRTC on CPU threads, ahead
/// of the GPU), the GPU worker's stages, `sanitizer`, `database`.
#[derive(Clone, Debug, Serialize)]
pub struct StageTime {
    pub stage: String,
    pub seconds: f64,
    /// Per genome the invocation evaluated.
    pub ms_per_genome: f64,
}

/// `stages` (ms) as [`StageTime`]s over `genomes`, longest first.
fn stage_times(stages: &BTreeMap<String, f64>, genomes: u64) -> Vec<StageTime> {
    let mut out: Vec<StageTime> = stages
        .iter()
        .filter(|(_, ms)| **ms > 0.0)
        .map(|(stage, ms)| StageTime {
            stage: stage.clone(),
            seconds: ms / 1e3,
            ms_per_genome: ms / genomes.max(1) as f64,
        })
        .collect();
    out.sort_by(|a, b| b.seconds.total_cmp(&a.seconds).then(a.stage.cmp(&b.stage)));
    out
}

/// Order of the gates, and the statuses that stop a candidate at each.
pub const FUNNEL: [(&str, &[Status]); 6] = [
    ("proposed", &[]),
    // A replayed genome without a record never got a verdict, so it reached nothing.
    ("rendered", &[Status::NotRecorded, Status::RenderFailed]),
    ("compiled", &[Status::CompileFailed]),
    ("passed static", &[Status::RejectedStatic]),
    (
        "correct and timed",
        &[
            Status::LaunchFailed,
            Status::Crashed,
            Status::TimedOut,
            Status::Incorrect,
        ],
    ),
    ("not regressed", &[Status::Regressed]),
];

fn parse_time(t: &str) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
}

/// Seconds from `a` to `b` (RFC 3339 texts).
pub fn seconds_between(a: &str, b: &str) -> Option<f64> {
    Some((parse_time(b)? - parse_time(a)?).as_seconds_f64())
}

pub async fn run_stats(store: &Store, run: &Run) -> Result<RunStats> {
    let cands = store.candidates(run.id).await?;
    let mut groups: BTreeMap<(Status, Option<Gate>), BTreeMap<String, u64>> = BTreeMap::new();
    let mut pending = 0u64;
    for c in &cands {
        let Some(status) = c.status else {
            pending += 1;
            continue;
        };
        let reason: String = c
            .detail
            .as_deref()
            .unwrap_or("")
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(160)
            .collect();
        *groups
            .entry((status, c.gate))
            .or_default()
            .entry(reason)
            .or_default() += 1;
    }
    let mut by_status: Vec<StatusCount> = groups
        .into_iter()
        .map(|((status, gate), reasons)| {
            let mut reasons: Vec<(String, u64)> = reasons.into_iter().collect();
            reasons.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            StatusCount {
                count: reasons.iter().map(|r| r.1).sum(),
                status,
                gate,
                reasons,
            }
        })
        .collect();
    by_status.sort_by_key(|s| (s.status, s.gate.map(Gate::name)));
    let done: u64 = by_status.iter().map(|s| s.count).sum();
    let count_of = |stopped: &[Status]| -> u64 {
        by_status
            .iter()
            .filter(|s| stopped.contains(&s.status))
            .map(|s| s.count)
            .sum()
    };
    let mut reached = done;
    let funnel = FUNNEL
        .iter()
        .map(|(stage, stopped)| {
            reached -= count_of(stopped);
            FunnelStage {
                stage: stage.to_string(),
                reached,
            }
        })
        .collect();
    let generations = store.generations(run.id).await?;
    let first = cands.iter().map(|c| c.created_at.as_str()).min();
    let last = cands.iter().filter_map(|c| c.evaluated_at.as_deref()).max();
    let wall_hours = match (first, last) {
        (Some(a), Some(b)) => seconds_between(a, b).map(|s| s / 3600.0),
        _ => None,
    };
    let state = generations
        .last()
        .map(|g| g.search_state())
        .transpose()?
        .unwrap_or_default();
    // The last invocation: the newest finished host's own counters (written when it
    // stops, whether or not it completed a generation), else the last generation's state.
    let newest = store
        .hosts(run.id)
        .await?
        .into_iter()
        .filter(|h| h.finished_at.is_some())
        .max_by(|a, b| a.started_at.cmp(&b.started_at))
        .and_then(|h| {
            let stats: evo_store::HostStats = serde_json::from_value(h.stats.clone()?).ok()?;
            (stats.wall_s > 0.0).then_some((h, stats))
        });
    let last_stages = newest
        .as_ref()
        .map(|(h, stats)| stage_times(&stats.stages_ms, h.evaluated))
        .unwrap_or_default();
    let (last_per_hour, last_busy) = match newest {
        Some((h, stats)) => (
            Some(h.evaluated as f64 * 3600.0 / stats.wall_s),
            Some(if stats.gpu_busy.is_empty() {
                0.0
            } else {
                stats.gpu_busy.iter().map(|g| g.busy).sum::<f64>() / stats.gpu_busy.len() as f64
            }),
        ),
        None => (state.evaluations_per_hour, state.gpu_busy_fraction),
    };
    Ok(RunStats {
        run: run.name.clone(),
        evaluator: run.evaluator.clone(),
        candidates: cands.len() as u64,
        pending,
        funnel,
        generations: generations.len() as u64,
        best_fitness: cands
            .iter()
            .filter(|c| c.status == Some(Status::Evaluated))
            .filter_map(|c| c.fitness)
            .fold(None, |m: Option<f64>, f| Some(m.map_or(f, |m| m.max(f)))),
        evaluations_per_hour: wall_hours.filter(|h| *h > 0.0).map(|h| done as f64 / h),
        wall_hours,
        last_invocation_evaluations_per_hour: last_per_hour,
        gpu_busy_fraction: last_busy,
        evaluation_hours: cands.iter().filter_map(|c| c.eval_ms).sum::<f64>() / 3.6e6,
        last_invocation_stages: last_stages,
        by_status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_times_are_per_genome_and_longest_first() {
        let stages: BTreeMap<String, f64> = [
            ("compile".to_string(), 4000.0),
            ("inputs".to_string(), 9000.0),
            ("padding".to_string(), 0.0),
        ]
        .into_iter()
        .collect();
        let t = stage_times(&stages, 4);
        assert_eq!(
            t.iter().map(|s| s.stage.as_str()).collect::<Vec<_>>(),
            ["inputs", "compile"]
        );
        assert_eq!((t[0].seconds, t[0].ms_per_genome), (9.0, 2250.0));
        assert_eq!(stage_times(&stages, 0)[0].ms_per_genome, 9000.0);
    }

    #[test]
    fn resources_take_the_largest_over_specializations() {
        // The shape the GPU search stores (evo-run/src/backend.rs).
        let r = serde_json::json!([
            {"specialization": "HEAD_DIM=64", "kernels": [{"name": "sdpa_fwd", "registers": 96,
              "static_smem_bytes": 0, "dynamic_smem_bytes": 40960, "threads": 128,
              "spill_bytes": 0, "stack_frame_bytes": 0, "blocks_per_sm": 2,
              "tensor_ops": {"HMMA": 64}}]},
            {"specialization": "HEAD_DIM=128", "kernels": [{"name": "sdpa_fwd", "registers": 168,
              "static_smem_bytes": 16, "dynamic_smem_bytes": 73728, "threads": 128,
              "spill_bytes": 8, "stack_frame_bytes": 8, "blocks_per_sm": 1,
              "tensor_ops": {"HMMA": 128, "HGMMA": 2}}]}
        ]);
        let s = ResourceSummary::from_json(Some(&r));
        assert_eq!(s.registers, Some(168));
        assert_eq!(s.smem_bytes, Some(73744));
        assert_eq!(s.spill_bytes, Some(8));
        assert_eq!(s.tensor_ops, Some(130));
        let replayed = serde_json::json!({"replayed": true});
        assert_eq!(
            ResourceSummary::from_json(Some(&replayed)),
            ResourceSummary::default()
        );
        assert_eq!(ResourceSummary::from_json(None), ResourceSummary::default());
    }

    #[test]
    fn knob_changes_list_only_differences() {
        let a = knobs("A=1,B=x,C=true");
        let b = knobs("A=2,B=x,C=false");
        let c = knob_changes(&a, &b);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].knob, "A");
        assert_eq!(c[0].from.as_deref(), Some("1"));
        assert_eq!(c[0].to.as_deref(), Some("2"));
        assert!(knob_changes(&a, &a).is_empty());
    }
}
