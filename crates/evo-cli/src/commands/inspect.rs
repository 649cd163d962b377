//! Inspecting a population database after a search: `evo runs`, `evo elites`,
//! `evo show`, `evo lineage`, `evo diff` and `evo stats`, plus the loading helpers
//! `evo report` shares (opening a database without creating it, finding a run or a
//! candidate, per-candidate rows with measurements and resources).
//!
//! Every command here only reads: a missing database file is an error, never created.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use evo_core::config::SearchConfig;
use evo_core::{Gate, Genome, Status, Target};
use evo_gpu::{CompileCache, CompileRequest, Compiler};
use evo_kernels::{Family, Specializations};
use evo_store::{Candidate, CandidateId, Run, Store};
use serde::Serialize;
use serde_json::Value as Json;

use crate::output::{bytes, fitted_table as table, print_json};
use crate::setup::{self, Loaded, TargetChoice};

/// What `evo show` prints instead of the summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShowWhat {
    Summary,
    Source,
    Ptx,
    Sass,
    Log,
}

/// The file behind a database location, when it is a SQLite one.
fn sqlite_file(db: &str) -> Option<PathBuf> {
    let t = db.trim();
    if let Some(rest) = t
        .strip_prefix("sqlite://")
        .or_else(|| t.strip_prefix("sqlite:"))
    {
        return Some(PathBuf::from(rest));
    }
    (!t.contains("://")).then(|| PathBuf::from(t))
}

/// Opens an existing population database for reading. A missing SQLite file is an
/// error (a read command never creates a database).
pub async fn open_existing(db: &str) -> Result<Store> {
    if let Some(path) = sqlite_file(db) {
        if !path.exists() {
            bail!(
                "no population database at {}: `evo search` creates one; pass --db PATH (or set EVO_DB) to read another",
                path.display()
            );
        }
    }
    Store::open(db)
        .await
        .with_context(|| format!("opening the population database {db}"))
}

/// The named run (name or id), else the newest run of the database.
pub async fn find_run(store: &Store, run: Option<&str>, db: &str) -> Result<Run> {
    match run {
        Some(name) => store
            .run(name)
            .await?
            .ok_or_else(|| anyhow!("no run `{name}` in {db}; `evo runs` lists the runs")),
        None => {
            let last = store
                .runs()
                .await?
                .pop()
                .ok_or_else(|| anyhow!("{db} holds no run yet; start one with `evo search`"))?;
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
        0 => bail!(
            "no candidate{scope} with id or genome hash prefix `{text}` in {db} (hash prefixes need 4 or more hex digits; `evo elites` lists ids and hashes)"
        ),
        1 => Ok(found.pop().expect("one")),
        n => {
            let list: Vec<String> = found
                .iter()
                .take(6)
                .map(|c| format!("id {} (run {}, hash {})", c.id, c.run_id, c.hash))
                .collect();
            bail!(
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

/// Short labels `s1`, `s2`, ... for the run's shapes (baseline shapes, else measured
/// ones), in a stable order, with the full key each stands for.
pub fn shape_labels(
    baselines: &BTreeMap<String, f64>,
    rows: &[CandidateRow],
) -> Vec<(String, String)> {
    // The configured shapes have a baseline; the correctness-only edge shapes have no
    // time. Without baselines, every shape some row has a time for.
    let mut keys: Vec<String> = baselines.keys().cloned().collect();
    if keys.is_empty() {
        for r in rows {
            for s in r.shapes.iter().filter(|s| s.median_us.is_some()) {
                if !keys.contains(&s.shape) {
                    keys.push(s.shape.clone());
                }
            }
        }
    }
    keys.into_iter()
        .enumerate()
        .map(|(i, k)| (format!("s{}", i + 1), k))
        .collect()
}

/// Knob names whose value differs between rows, and the `K=V` pairs all rows share.
pub fn varying_knobs(rows: &[CandidateRow]) -> (Vec<String>, Vec<String>) {
    let mut names: BTreeSet<&String> = BTreeSet::new();
    for r in rows {
        names.extend(r.knobs.keys());
    }
    let mut varying = Vec::new();
    let mut common = Vec::new();
    for n in names {
        let values: BTreeSet<Option<&String>> = rows.iter().map(|r| r.knobs.get(n)).collect();
        if values.len() > 1 || rows.len() == 1 {
            varying.push(n.clone());
        } else if let Some(Some(v)) = values.into_iter().next() {
            common.push(format!("{n}={v}"));
        }
    }
    (varying, common)
}

/// Shape keys without the `K=V` parts every one of them shares (they stay readable in
/// a narrow table).
pub fn compact_shapes(keys: &[&str]) -> Vec<String> {
    let parts: Vec<Vec<&str>> = keys.iter().map(|k| k.split(',').collect()).collect();
    let shared = |p: &&str| keys.len() > 1 && parts.iter().all(|ps| ps.contains(p));
    parts
        .iter()
        .map(|ps| {
            let kept: Vec<&str> = ps.iter().copied().filter(|p| !shared(p)).collect();
            if kept.is_empty() {
                ps.join(",")
            } else {
                kept.join(",")
            }
        })
        .collect()
}

pub fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

fn opt_u(v: Option<u64>) -> String {
    v.map_or("-".into(), |x| x.to_string())
}

// ---------------------------------------------------------------- evo runs

pub fn runs(db: &str, json: bool) -> Result<ExitCode> {
    crate::setup::runtime()?.block_on(async {
        let store = open_existing(db).await?;
        let runs = store.runs().await?;
        if json {
            print_json(&runs)?;
            return Ok(ExitCode::SUCCESS);
        }
        if runs.is_empty() {
            println!("{db} holds no run yet; start one with `evo search`");
            return Ok(ExitCode::SUCCESS);
        }
        let mut t = table(&[
            "id",
            "name",
            "family",
            "status",
            "strategy",
            "evaluator",
            "device",
            "gens",
            "candidates",
            "statuses",
            "best evaluated",
            "started",
        ]);
        for r in &runs {
            let statuses: Vec<String> = r.counts.iter().map(|(s, n)| format!("{s} {n}")).collect();
            t.add_row(vec![
                r.id.to_string(),
                r.name.clone(),
                r.family.clone(),
                r.status.to_string(),
                r.strategy.clone(),
                match r.evaluator.strip_prefix("replay:") {
                    Some(f) => format!(
                        "replay:{}",
                        Path::new(f)
                            .file_name()
                            .map_or(f.into(), |n| n.to_string_lossy())
                    ),
                    None => r.evaluator.clone(),
                },
                r.device.clone().unwrap_or_else(|| "-".into()),
                r.last_generation
                    .map_or("-".into(), |g| (g + 1).to_string()),
                r.candidates.to_string(),
                statuses.join("\n"),
                r.best_fitness.map_or("-".into(), |f| format!("{f:.4}x")),
                r.created_at.clone(),
            ]);
        }
        println!("{t}");
        Ok(ExitCode::SUCCESS)
    })
}

// ---------------------------------------------------------------- evo elites

pub fn elites(db: &str, run: Option<&str>, top: usize, json: bool) -> Result<ExitCode> {
    crate::setup::runtime()?.block_on(async {
        let store = open_existing(db).await?;
        let run = find_run(&store, run, db).await?;
        let rows = ranked(&store, &run, top).await?;
        if json {
            print_json(&serde_json::json!({"run": run.name, "elites": rows}))?;
            return Ok(ExitCode::SUCCESS);
        }
        if rows.is_empty() {
            println!(
                "run `{}` has no timed candidate yet (`evo stats {}` says why)",
                run.name, run.name
            );
            return Ok(ExitCode::SUCCESS);
        }
        let base = baselines(&store, &run).await?;
        let labels = shape_labels(&base, &rows);
        let (varying, common) = varying_knobs(&rows);
        println!(
            "run `{}` ({}), top {} by fitness (geometric mean of baseline time / time)",
            run.name,
            run.family,
            rows.len()
        );
        for (l, k) in &labels {
            println!(
                "  {l} = {k}{}",
                base.get(k)
                    .map_or(String::new(), |b| format!("  (baseline {b:.2} µs)"))
            );
        }
        if !common.is_empty() {
            println!("  every row has {}", common.join(" "));
        }
        let mut header: Vec<String> = ["rank", "id", "hash", "gen", "fitness", "status", "knobs"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        header.extend(labels.iter().map(|(l, _)| format!("{l} µs\nTFLOP/s")));
        let with_resources = rows.iter().any(|r| r.resources != ResourceSummary::default());
        if with_resources {
            header.extend(["regs", "smem", "spill", "TC ops"].map(String::from));
        }
        let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
        let mut t = table(&header_refs);
        for r in &rows {
            let knobs: Vec<String> = varying
                .iter()
                .filter_map(|k| r.knobs.get(k).map(|v| format!("{k}={v}")))
                .collect();
            let mut cells = vec![
                r.rank.unwrap_or(0).to_string(),
                r.id.to_string(),
                r.hash[..8.min(r.hash.len())].to_string(),
                r.generation.to_string(),
                opt(r.fitness, 4),
                r.status.clone(),
                knobs.join("\n"),
            ];
            for (_, key) in &labels {
                let s = r.shapes.iter().find(|s| &s.shape == key);
                cells.push(match s {
                    Some(s) => format!("{}\n{}", opt(s.median_us, 2), opt(s.tflops, 1)),
                    None => "-".into(),
                });
            }
            if with_resources {
                cells.push(opt_u(r.resources.registers));
                cells.push(r.resources.smem_bytes.map_or("-".into(), bytes));
                cells.push(r.resources.spill_bytes.map_or("-".into(), bytes));
                cells.push(opt_u(r.resources.tensor_ops));
            }
            t.add_row(cells);
        }
        println!("{t}");
        if !with_resources {
            println!("(no resource record, e.g. a replayed run: no regs/smem/spill/TC ops columns; `evo show ID --log` compiles a candidate and prints its ptxas report)");
        }
        Ok(ExitCode::SUCCESS)
    })
}

// ---------------------------------------------------------------- sources

/// The config, family, target, specializations and space of a stored run, loaded
/// the way the search loaded them (the config text stored in the run; templates from
/// `--templates`, the config's folder, or ./templates).
pub fn load_run(templates: Option<&Path>, run: &Run) -> Result<Loaded> {
    let path = run
        .state()?
        .and_then(|s| s.config_path)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("{}.toml", run.name)));
    let config = SearchConfig::parse(&path, &run.config_toml)
        .with_context(|| format!("the config stored in run `{}`", run.name))?;
    let root = setup::templates_root(templates, &config)?;
    let family = Family::load(&root, &config.problem, &config.family)?;
    let arch = run
        .arch
        .clone()
        .filter(|a| a != "auto")
        .unwrap_or_else(|| evo_core::target::DEFAULT_ARCH.to_string());
    let target = Target::from_arch(&arch)?;
    let specs = Specializations::new(family.problem, target.clone(), &config.shapes)
        .map_err(|e| anyhow!("config of run `{}`: {e}", run.name))?;
    let space = family.space(specs.contexts())?;
    Ok(Loaded {
        config,
        family,
        target: TargetChoice {
            target,
            reason: format!("the architecture run `{}` used", run.name),
        },
        specs,
        space,
    })
}

/// The canonical text of each specialization of a loaded run.
pub fn spec_names(loaded: &Loaded) -> Vec<String> {
    loaded
        .specs
        .specs
        .iter()
        .map(|s| Genome::from_vars(s.clone()).canonical())
        .collect()
}

/// The specializations `--spec` selects (all without it).
fn chosen_specs(loaded: &Loaded, spec: Option<&str>) -> Result<Vec<usize>> {
    Ok(match spec {
        Some(s) => vec![loaded.spec_index(Some(s))?],
        None => (0..loaded.specs.specs.len()).collect(),
    })
}

/// Renders a candidate's source for one specialization: deterministic from the
/// family, the genome and the specialization.
pub fn render(loaded: &Loaded, genome: &str, spec: usize) -> Result<String> {
    let g = Genome::parse(genome)?;
    Ok(loaded.family.render(&loaded.space, &g, spec)?)
}

// ---------------------------------------------------------------- evo show

pub struct ShowOptions<'a> {
    pub db: &'a str,
    pub id: &'a str,
    pub run: Option<&'a str>,
    pub what: ShowWhat,
    pub spec: Option<&'a str>,
    pub templates: Option<&'a Path>,
    pub json: bool,
}

pub fn show(o: ShowOptions) -> Result<ExitCode> {
    let rt = crate::setup::runtime()?;
    let (run, row, lineage_parents) = rt.block_on(async {
        let store = open_existing(o.db).await?;
        let scope = match o.run {
            Some(r) => Some(find_run(&store, Some(r), o.db).await?),
            None => None,
        };
        let c = find_candidate(&store, o.id, scope.as_ref(), o.db).await?;
        let run = store.run_by_id(c.run_id).await?.expect("candidate's run");
        let base = baselines(&store, &run).await?;
        let row = candidate_row(&store, &c, &base).await?;
        let mut parents = Vec::new();
        for p in &c.parents {
            parents.push(
                store
                    .candidate_by_hash(run.id, p)
                    .await?
                    .map(|pc| (pc.id.0, p.clone())),
            );
        }
        anyhow::Ok((run, row, parents))
    })?;

    if o.what == ShowWhat::Summary {
        if o.json {
            print_json(&serde_json::json!({"run": run.name, "candidate": row}))?;
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "candidate {} of run `{}` ({}), genome hash {}",
            row.id, run.name, run.family, row.hash
        );
        println!("  genome      {}", row.genome);
        println!(
            "  generation  {} ({}){}",
            row.generation,
            row.origin,
            if row.parents.is_empty() {
                String::new()
            } else {
                let ps: Vec<String> = lineage_parents
                    .iter()
                    .zip(&row.parents)
                    .map(|(p, h)| match p {
                        Some((id, _)) => format!("{id} [{}]", &h[..8.min(h.len())]),
                        None => format!("[{h}] (not in the run)"),
                    })
                    .collect();
                format!(", parents {}", ps.join(", "))
            }
        );
        println!(
            "  status      {}{}",
            row.status,
            row.gate
                .as_ref()
                .map_or(String::new(), |g| format!(" at gate {g}"))
        );
        if let Some(d) = row.detail.as_ref().filter(|d| !d.trim().is_empty()) {
            println!("  detail      {d}");
        }
        println!(
            "  fitness     {}",
            row.fitness.map_or("-".into(), |f| format!("{f:.4}x"))
        );
        if let Some(ms) = row.eval_ms {
            println!(
                "  evaluated   {} in {ms:.0} ms",
                row.evaluated_at.as_deref().unwrap_or("-")
            );
        }
        let r = &row.resources;
        if *r != ResourceSummary::default() {
            println!(
                "  resources   {} registers, {} shared, {} spilled, {} tensor-core instructions",
                opt_u(r.registers),
                r.smem_bytes.map_or("-".into(), bytes),
                r.spill_bytes.map_or("-".into(), bytes),
                opt_u(r.tensor_ops)
            );
        }
        let (timed, edges): (Vec<&ShapeRow>, Vec<&ShapeRow>) = row
            .shapes
            .iter()
            .partition(|s| s.median_us.is_some() || s.baseline_us.is_some());
        if !timed.is_empty() {
            let keys: Vec<&str> = timed.iter().map(|s| s.shape.as_str()).collect();
            let names = compact_shapes(&keys);
            let mut t = table(&[
                "shape",
                "median µs",
                "p20–p80 µs",
                "TFLOP/s",
                "baseline µs",
                "speedup",
                "max abs err",
                "rel L2",
            ]);
            for (s, name) in timed.iter().zip(names) {
                t.add_row(vec![
                    name,
                    opt(s.median_us, 2),
                    match (s.p20_us, s.p80_us) {
                        (Some(a), Some(b)) => format!("{a:.2}–{b:.2}"),
                        _ => "-".into(),
                    },
                    opt(s.tflops, 1),
                    opt(s.baseline_us, 2),
                    s.speedup.map_or("-".into(), |x| format!("{x:.3}x")),
                    s.max_abs_err.map_or("-".into(), |x| format!("{x:.2e}")),
                    s.rel_l2.map_or("-".into(), |x| format!("{x:.2e}")),
                ]);
            }
            println!("{t}");
        }
        if !edges.is_empty() {
            let worst = |f: fn(&ShapeRow) -> Option<f64>| {
                edges
                    .iter()
                    .filter_map(|s| f(s))
                    .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
            };
            println!(
                "  {} correctness-only edge shapes: worst max abs err {}, worst rel L2 {}",
                edges.len(),
                worst(|s| s.max_abs_err).map_or("-".into(), |x| format!("{x:.2e}")),
                worst(|s| s.rel_l2).map_or("-".into(), |x| format!("{x:.2e}"))
            );
        }
        println!(
            "  (--source, --ptx, --sass, --log print the kernel; `evo lineage {}` its ancestry)",
            row.id
        );
        return Ok(ExitCode::SUCCESS);
    }

    let loaded = load_run(o.templates, &run)?;
    let names = spec_names(&loaded);
    let chosen = chosen_specs(&loaded, o.spec)?;
    let sources: Vec<(usize, String)> = chosen
        .iter()
        .map(|&i| Ok((i, render(&loaded, &row.genome, i)?)))
        .collect::<Result<_>>()?;
    let many = sources.len() > 1;
    if o.what == ShowWhat::Source {
        if o.json {
            let out: Vec<Json> = sources
                .iter()
                .map(|(i, s)| serde_json::json!({"specialization": names[*i], "source": s}))
                .collect();
            print_json(&out)?;
        } else {
            for (i, s) in &sources {
                if many {
                    println!("// ===== specialization {} =====", names[*i]);
                }
                print!("{s}");
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let compiler = Compiler::new(
        &loaded.target.target.arch,
        &loaded.config.compile.options,
        loaded.config.compile.max_registers,
        Some(CompileCache::new(CompileCache::default_dir())),
    )?;
    let mut out_json = Vec::new();
    for (i, source) in &sources {
        let compiled = compiler.compile(&CompileRequest {
            name: format!("{}_{}.cu", loaded.family.name, row.hash),
            source: source.clone(),
        })?;
        let text = match o.what {
            ShowWhat::Log => compiled.log.clone(),
            ShowWhat::Ptx => compiled.ptx.clone().ok_or_else(|| {
                anyhow!(
                    "the source did not compile; `evo show {} --log` prints why",
                    row.id
                )
            })?,
            ShowWhat::Sass => {
                let cubin = compiled.cubin.as_ref().ok_or_else(|| {
                    anyhow!(
                        "the source did not compile; `evo show {} --log` prints why",
                        row.id
                    )
                })?;
                let tool = compiler.install().cuobjdump.as_ref().ok_or_else(|| {
                    crate::MissingComponent(
                        "--sass needs cuobjdump; scripts/install-cuda.sh installs it".into(),
                    )
                })?;
                evo_gpu::resources::disassemble(tool, cubin)?
            }
            ShowWhat::Summary | ShowWhat::Source => unreachable!("handled above"),
        };
        if o.json {
            out_json.push(serde_json::json!({
                "specialization": names[*i],
                "arch": compiler.arch(),
                "nvrtc_version": compiler.nvrtc_version(),
                "cached": compiled.cached,
                "text": text,
            }));
        } else {
            if many {
                println!("// ===== specialization {} =====", names[*i]);
            }
            print!("{text}");
            if !text.ends_with('\n') {
                println!();
            }
        }
    }
    if o.json {
        print_json(&out_json)?;
    }
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------- evo lineage

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

fn change_text(changes: &[KnobChange]) -> String {
    if changes.is_empty() {
        return "no knob changed".into();
    }
    changes
        .iter()
        .map(|c| {
            format!(
                "{} {}→{}",
                c.knob,
                c.from.as_deref().unwrap_or("∅"),
                c.to.as_deref().unwrap_or("∅")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
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

pub fn lineage(db: &str, id: &str, run: Option<&str>, json: bool) -> Result<ExitCode> {
    crate::setup::runtime()?.block_on(async {
        let store = open_existing(db).await?;
        let scope = match run {
            Some(r) => Some(find_run(&store, Some(r), db).await?),
            None => None,
        };
        let c = find_candidate(&store, id, scope.as_ref(), db).await?;
        let run = store.run_by_id(c.run_id).await?.expect("candidate's run");
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
        if json {
            print_json(&serde_json::json!({"run": run.name, "candidate": c.id, "lineage": steps}))?;
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "lineage of candidate {} (run `{}`): {} genome(s), oldest first",
            c.id,
            run.name,
            steps.len()
        );
        let mut t = table(&[
            "gen",
            "id",
            "hash",
            "origin",
            "parents",
            "fitness",
            "status",
            "knob changes",
        ]);
        for s in &steps {
            let parents: Vec<String> = s
                .parent_ids
                .iter()
                .map(|p| p.map_or("?".into(), |p| p.to_string()))
                .collect();
            let changes = if s.parent_ids.is_empty() {
                s.genome.replace(',', " ")
            } else if s.changes_from_second.is_empty() {
                change_text(&s.changes)
            } else {
                format!(
                    "from {}: {}\nfrom {}: {}",
                    parents[0],
                    change_text(&s.changes),
                    parents.get(1).map_or("?", String::as_str),
                    change_text(&s.changes_from_second)
                )
            };
            t.add_row(vec![
                s.generation.to_string(),
                s.id.to_string(),
                s.hash[..8.min(s.hash.len())].to_string(),
                s.origin.clone(),
                if parents.is_empty() {
                    "-".into()
                } else {
                    parents.join(", ")
                },
                opt(s.fitness, 4),
                s.status.clone(),
                changes,
            ]);
        }
        println!("{t}");
        Ok(ExitCode::SUCCESS)
    })
}

// ---------------------------------------------------------------- evo diff

pub struct DiffOptions<'a> {
    pub db: &'a str,
    pub a: &'a str,
    pub b: &'a str,
    pub run: Option<&'a str>,
    pub spec: Option<&'a str>,
    pub templates: Option<&'a Path>,
    pub json: bool,
}

pub fn diff(o: DiffOptions) -> Result<ExitCode> {
    let rt = crate::setup::runtime()?;
    let (ra, rb, run_a, run_b) = rt.block_on(async {
        let store = open_existing(o.db).await?;
        let scope = match o.run {
            Some(r) => Some(find_run(&store, Some(r), o.db).await?),
            None => None,
        };
        let a = find_candidate(&store, o.a, scope.as_ref(), o.db).await?;
        let b = find_candidate(&store, o.b, scope.as_ref(), o.db).await?;
        let run_a = store.run_by_id(a.run_id).await?.expect("run");
        let run_b = store.run_by_id(b.run_id).await?.expect("run");
        let ra = candidate_row(&store, &a, &baselines(&store, &run_a).await?).await?;
        let rb = candidate_row(&store, &b, &baselines(&store, &run_b).await?).await?;
        anyhow::Ok((ra, rb, run_a, run_b))
    })?;
    let changes = knob_changes(&ra.knobs, &rb.knobs);

    // Sources: rendered with each candidate's own run (the same family normally).
    let la = load_run(o.templates, &run_a)?;
    let lb = if run_b.id == run_a.id {
        None
    } else {
        Some(load_run(o.templates, &run_b)?)
    };
    let lb_ref = lb.as_ref().unwrap_or(&la);
    let spec_a = la.spec_index(o.spec)?;
    let spec_b = lb_ref.spec_index(o.spec)?;
    let spec_name = spec_names(&la)[spec_a].clone();
    let src_a = render(&la, &ra.genome, spec_a)?;
    let src_b = render(lb_ref, &rb.genome, spec_b)?;
    let unified = similar::TextDiff::from_lines(&src_a, &src_b)
        .unified_diff()
        .context_radius(3)
        .header(
            &format!("candidate {} ({})", ra.id, &ra.hash),
            &format!("candidate {} ({})", rb.id, &rb.hash),
        )
        .to_string();

    let timed_a: Vec<&ShapeRow> = ra.shapes.iter().filter(|s| s.median_us.is_some()).collect();
    let short = compact_shapes(&timed_a.iter().map(|s| s.shape.as_str()).collect::<Vec<_>>());
    let shapes: Vec<Json> = timed_a
        .iter()
        .zip(&short)
        .map(|(sa, name)| {
            let sb = rb.shapes.iter().find(|s| s.shape == sa.shape);
            serde_json::json!({
                "shape": sa.shape,
                "short": name,
                "a_us": sa.median_us,
                "b_us": sb.and_then(|s| s.median_us),
                "b_over_a": match (sa.median_us, sb.and_then(|s| s.median_us)) {
                    (Some(x), Some(y)) if x > 0.0 => Some(y / x),
                    _ => None,
                },
            })
        })
        .collect();
    if o.json {
        print_json(&serde_json::json!({
            "a": {"id": ra.id, "hash": ra.hash, "genome": ra.genome, "fitness": ra.fitness, "status": ra.status},
            "b": {"id": rb.id, "hash": rb.hash, "genome": rb.genome, "fitness": rb.fitness, "status": rb.status},
            "knobs": changes,
            "shapes": shapes,
            "specialization": spec_name,
            "source_diff": unified,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "A = candidate {} [{}] fitness {} ({})\nB = candidate {} [{}] fitness {} ({})",
        ra.id,
        &ra.hash[..8.min(ra.hash.len())],
        opt(ra.fitness, 4),
        ra.status,
        rb.id,
        &rb.hash[..8.min(rb.hash.len())],
        opt(rb.fitness, 4),
        rb.status
    );
    if changes.is_empty() {
        println!("same knobs");
    } else {
        let mut t = table(&["knob", "A", "B"]);
        for c in &changes {
            t.add_row(vec![
                c.knob.clone(),
                c.from.clone().unwrap_or_else(|| "-".into()),
                c.to.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        println!("{t}");
        println!(
            "{} of {} knobs differ",
            changes.len(),
            ra.knobs.len().max(rb.knobs.len())
        );
    }
    if !shapes.is_empty() {
        let mut t = table(&["shape", "A µs", "B µs", "B / A"]);
        for s in &shapes {
            let f = |k: &str, d: usize| opt(s[k].as_f64(), d);
            t.add_row(vec![
                s["short"].as_str().unwrap_or("").to_string(),
                f("a_us", 2),
                f("b_us", 2),
                f("b_over_a", 3),
            ]);
        }
        println!("{t}");
    }
    println!("source diff for specialization {spec_name}:");
    if unified.is_empty() {
        println!("(identical sources)");
    } else {
        print!("{unified}");
    }
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------- evo stats

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
}

/// Order of the gates, and the statuses that stop a candidate at each.
pub const FUNNEL: [(&str, &[Status]); 6] = [
    ("proposed", &[]),
    ("rendered", &[Status::RenderFailed]),
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
        last_invocation_evaluations_per_hour: state.evaluations_per_hour,
        gpu_busy_fraction: state.gpu_busy_fraction,
        evaluation_hours: cands.iter().filter_map(|c| c.eval_ms).sum::<f64>() / 3.6e6,
        by_status,
    })
}

pub fn stats(db: &str, run: Option<&str>, json: bool) -> Result<ExitCode> {
    crate::setup::runtime()?.block_on(async {
        let store = open_existing(db).await?;
        let run = find_run(&store, run, db).await?;
        let s = run_stats(&store, &run).await?;
        if json {
            print_json(&s)?;
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "run `{}` ({}): {} candidates, {} pending, {} generations",
            s.run, s.evaluator, s.candidates, s.pending, s.generations
        );
        let mut t = table(&["status", "gate", "count", "share", "why (most common first)"]);
        let done = (s.candidates - s.pending).max(1) as f64;
        for g in &s.by_status {
            let mut why: Vec<String> = g
                .reasons
                .iter()
                .take(3)
                .filter(|(r, _)| !r.trim().is_empty())
                .map(|(r, n)| format!("{n}× {r}"))
                .collect();
            if g.reasons.len() > 3 {
                why.push(format!("... {} more distinct reasons", g.reasons.len() - 3));
            }
            t.add_row(vec![
                g.status.to_string(),
                g.gate.map_or_else(|| "-".into(), |g| g.to_string()),
                g.count.to_string(),
                format!("{:.1}%", 100.0 * g.count as f64 / done),
                why.join("\n"),
            ]);
        }
        println!("{t}");
        let mut f = table(&["gate funnel", "reached"]);
        for st in &s.funnel {
            f.add_row(vec![st.stage.clone(), st.reached.to_string()]);
        }
        println!("{f}");
        println!(
            "best fitness (evaluated): {}",
            s.best_fitness.map_or("-".into(), |x| format!("{x:.4}x"))
        );
        println!(
            "evaluations per hour: {} over the run ({} h from the first proposal to the last result), {} in the last invocation",
            opt(s.evaluations_per_hour, 0),
            opt(s.wall_hours, 3),
            opt(s.last_invocation_evaluations_per_hour, 0)
        );
        println!(
            "GPU busy fraction (last invocation): {}{}",
            s.gpu_busy_fraction
                .map_or("-".into(), |x| format!("{:.1}%", 100.0 * x)),
            if s.evaluator.starts_with("replay:") {
                " (a replayed run uses no GPU)"
            } else {
                ""
            }
        );
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_take_the_largest_over_specializations() {
        // The shape the GPU search stores (evo-cli/src/search/backend.rs).
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
    fn compact_shapes_drop_shared_parts() {
        let keys = ["B=1,D=64,S=512", "B=2,D=64,S=512", "B=2,D=64,S=2048"];
        assert_eq!(
            compact_shapes(&keys),
            ["B=1,S=512", "B=2,S=512", "B=2,S=2048"]
        );
        assert_eq!(compact_shapes(&["B=1,D=64"]), ["B=1,D=64"]);
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
