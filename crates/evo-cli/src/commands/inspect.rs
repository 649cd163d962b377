//! Inspecting a population database after a search: `evo runs`, `evo elites`,
//! `evo show`, `evo lineage`, `evo diff` and `evo stats` print what the read queries of
//! [`evo_run::inspect`] find (and the presentation helpers `evo report` shares: shape
//! labels, varying knobs, compact shape names).
//!
//! Every command here only reads: a missing database file is an error, never created.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{anyhow, Result};
use evo_gpu::{CompileRequest, Compiler};
use evo_run::inspect::{
    baselines, candidate_row, find_candidate, find_run, knob_changes, open_existing, ranked,
    run_stats, CandidateRow, KnobChange, ResourceSummary, ShapeRow,
};
use evo_run::Context;
use serde_json::Value as Json;

use crate::output::{bytes, fitted_table as table, out, outln, print_json};

/// What `evo show` prints instead of the summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShowWhat {
    Summary,
    Source,
    Ptx,
    Sass,
    Log,
}

/// Short labels `s1`, `s2`, ... for the run's shapes (baseline shapes, else measured
/// ones), in the config's order (`order`, from [`evo_run::inspect::shape_order`]; shapes
/// it lacks last), with the full key each stands for.
pub fn shape_labels(
    baselines: &BTreeMap<String, f64>,
    rows: &[CandidateRow],
    order: &[String],
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
    keys.sort_by_key(|k| order.iter().position(|o| o == k).unwrap_or(usize::MAX));
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
            outln!("{db} holds no run yet; start one with `evo search`")?;
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
            "best",
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
                // As `evo search` and `evo report` say it: the best evaluated, else the
                // best regressed (against a fast baseline early kernels all regress).
                match (r.best_fitness, r.best_regressed) {
                    (Some(f), _) => format!("{f:.4}x"),
                    (None, Some(f)) => format!("{f:.4}x\n(regressed)"),
                    (None, None) => "-".into(),
                },
                r.created_at.clone(),
            ]);
        }
        outln!("{t}")?;
        Ok(ExitCode::SUCCESS)
    })
}

// ---------------------------------------------------------------- evo elites

/// Ranks whose per-shape times the compact `evo elites` table shows (`--wide`: all).
const COMPACT_RANKS: usize = 5;

pub fn elites(db: &str, run: Option<&str>, top: usize, wide: bool, json: bool) -> Result<ExitCode> {
    crate::setup::runtime()?.block_on(async {
        let store = open_existing(db).await?;
        let run = find_run(&store, run, db).await?;
        let rows = ranked(&store, &run, top).await?;
        if json {
            print_json(&serde_json::json!({"run": run.name, "elites": rows}))?;
            return Ok(ExitCode::SUCCESS);
        }
        if rows.is_empty() {
            outln!(
                "run `{}` has no timed candidate yet (`evo stats {}` says why)",
                run.name, run.name
            )?;
            return Ok(ExitCode::SUCCESS);
        }
        let base = baselines(&store, &run).await?;
        let labels = shape_labels(&base, &rows, &evo_run::inspect::shape_order(&run));
        let (varying, common) = varying_knobs(&rows);
        outln!(
            "run `{}` ({}), top {} by fitness (geometric mean of baseline time / time)",
            run.name,
            run.family,
            rows.len()
        )?;
        for (l, k) in &labels {
            // The compact view has the baseline in its shape table.
            let baseline = base.get(k).filter(|_| wide);
            outln!(
                "  {l} = {k}{}",
                baseline.map_or(String::new(), |b| format!("  (baseline {b:.2} µs)"))
            )?;
        }
        if !common.is_empty() {
            outln!("  every row has {}", common.join(" "))?;
        }
        let with_resources = rows.iter().any(|r| r.resources != ResourceSummary::default());
        let mut header: Vec<String> = ["rank", "id", "hash"].map(String::from).to_vec();
        if wide {
            header.push("gen".into());
        }
        header.extend(["fitness", "status", "knobs"].map(String::from));
        if wide {
            header.extend(labels.iter().map(|(l, _)| format!("{l} µs\nTFLOP/s")));
        }
        if with_resources {
            header.extend(["regs", "smem", "spill"].map(String::from));
            if wide {
                header.push("TC ops".into());
            }
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
            ];
            if wide {
                cells.push(r.generation.to_string());
            }
            cells.extend([opt(r.fitness, 4), r.status.clone(), knobs.join("\n")]);
            if wide {
                for (_, key) in &labels {
                    let s = r.shapes.iter().find(|s| &s.shape == key);
                    cells.push(match s {
                        Some(s) => format!("{}\n{}", opt(s.median_us, 2), opt(s.tflops, 1)),
                        None => "-".into(),
                    });
                }
            }
            if with_resources {
                cells.push(opt_u(r.resources.registers));
                cells.push(r.resources.smem_bytes.map_or("-".into(), bytes));
                cells.push(r.resources.spill_bytes.map_or("-".into(), bytes));
                if wide {
                    cells.push(opt_u(r.resources.tensor_ops));
                }
            }
            t.add_row(cells);
        }
        outln!("{t}")?;
        if !wide {
            outln!("{}", shape_table(&rows, &labels, &base))?;
            if rows.len() > COMPACT_RANKS {
                outln!("(times of ranks past #{COMPACT_RANKS}, and TFLOP/s: `--wide`)")?;
            }
        }
        if !with_resources {
            outln!("(no resource record, e.g. a replayed run: no regs/smem/spill columns;\n `evo show ID --log` compiles a candidate and prints its ptxas report)")?;
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The compact `evo elites` view's second table: one row per shape (config order), its
/// baseline time and the time of each of the first [`COMPACT_RANKS`] ranks, in µs.
fn shape_table(
    rows: &[CandidateRow],
    labels: &[(String, String)],
    base: &BTreeMap<String, f64>,
) -> comfy_table::Table {
    let shown = &rows[..rows.len().min(COMPACT_RANKS)];
    let mut header = vec!["µs".to_string(), "baseline".to_string()];
    header.extend(shown.iter().map(|r| format!("#{}", r.rank.unwrap_or(0))));
    let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = table(&header_refs);
    for (label, key) in labels {
        let mut cells = vec![label.clone(), opt(base.get(key).copied(), 2)];
        cells.extend(shown.iter().map(|r| {
            opt(
                r.shapes
                    .iter()
                    .find(|s| &s.shape == key)
                    .and_then(|s| s.median_us),
                2,
            )
        }));
        t.add_row(cells);
    }
    t
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
        outln!(
            "candidate {} of run `{}` ({}), genome hash {}",
            row.id,
            run.name,
            run.family,
            row.hash
        )?;
        outln!("  genome      {}", row.genome)?;
        outln!(
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
        )?;
        outln!(
            "  status      {}{}",
            row.status,
            row.gate
                .as_ref()
                .map_or(String::new(), |g| format!(" at gate {g}"))
        )?;
        if let Some(d) = row.detail.as_ref().filter(|d| !d.trim().is_empty()) {
            outln!("  detail      {d}")?;
        }
        outln!(
            "  fitness     {}",
            row.fitness.map_or("-".into(), |f| format!("{f:.4}x"))
        )?;
        if let Some(ms) = row.eval_ms {
            outln!(
                "  evaluated   {} in {ms:.0} ms",
                row.evaluated_at.as_deref().unwrap_or("-")
            )?;
        }
        let r = &row.resources;
        if *r != ResourceSummary::default() {
            outln!(
                "  resources   {} registers, {} shared, {} spilled, {} tensor-core instructions",
                opt_u(r.registers),
                r.smem_bytes.map_or("-".into(), bytes),
                r.spill_bytes.map_or("-".into(), bytes),
                opt_u(r.tensor_ops)
            )?;
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
            outln!("{t}")?;
        }
        if !edges.is_empty() {
            let worst = |f: fn(&ShapeRow) -> Option<f64>| {
                edges
                    .iter()
                    .filter_map(|s| f(s))
                    .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
            };
            outln!(
                "  {} correctness-only edge shapes: worst max abs err {}, worst rel L2 {}",
                edges.len(),
                worst(|s| s.max_abs_err).map_or("-".into(), |x| format!("{x:.2e}")),
                worst(|s| s.rel_l2).map_or("-".into(), |x| format!("{x:.2e}"))
            )?;
        }
        outln!(
            "  (--source, --ptx, --sass, --log print the kernel; `evo lineage {}` its ancestry)",
            row.id
        )?;
        return Ok(ExitCode::SUCCESS);
    }

    let loaded = Context::of_run(&run, o.templates)?;
    let names = loaded.spec_names();
    let chosen: Vec<usize> = match o.spec {
        Some(s) => vec![loaded.spec_index(Some(s))?],
        None => (0..loaded.specs.specs.len()).collect(),
    };
    let sources: Vec<(usize, String)> = chosen
        .iter()
        .map(|&i| Ok((i, loaded.render(&row.genome, i)?)))
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
                    outln!("// ===== specialization {} =====", names[*i])?;
                }
                out!("{s}")?;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let compiler = Compiler::for_config(&loaded.target.target.arch, &loaded.config.compile)?;
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
                outln!("// ===== specialization {} =====", names[*i])?;
            }
            out!("{text}")?;
            if !text.ends_with('\n') {
                outln!()?;
            }
        }
    }
    if o.json {
        print_json(&out_json)?;
    }
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------- evo lineage

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

pub fn lineage(db: &str, id: &str, run: Option<&str>, json: bool) -> Result<ExitCode> {
    crate::setup::runtime()?.block_on(async {
        let store = open_existing(db).await?;
        let scope = match run {
            Some(r) => Some(find_run(&store, Some(r), db).await?),
            None => None,
        };
        let c = find_candidate(&store, id, scope.as_ref(), db).await?;
        let run = store.run_by_id(c.run_id).await?.expect("candidate's run");
        let steps = evo_run::inspect::lineage(&store, &run, &c).await?;
        if json {
            print_json(&serde_json::json!({"run": run.name, "candidate": c.id, "lineage": steps}))?;
            return Ok(ExitCode::SUCCESS);
        }
        outln!(
            "lineage of candidate {} (run `{}`): {} genome(s), oldest first",
            c.id,
            run.name,
            steps.len()
        )?;
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
        outln!("{t}")?;
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
    let la = Context::of_run(&run_a, o.templates)?;
    let lb = if run_b.id == run_a.id {
        None
    } else {
        Some(Context::of_run(&run_b, o.templates)?)
    };
    let lb_ref = lb.as_ref().unwrap_or(&la);
    let spec_a = la.spec_index(o.spec)?;
    let spec_b = lb_ref.spec_index(o.spec)?;
    let spec_name = la.spec_names()[spec_a].clone();
    let src_a = la.render(&ra.genome, spec_a)?;
    let src_b = lb_ref.render(&rb.genome, spec_b)?;
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
    outln!(
        "A = candidate {} [{}] fitness {} ({})\nB = candidate {} [{}] fitness {} ({})",
        ra.id,
        &ra.hash[..8.min(ra.hash.len())],
        opt(ra.fitness, 4),
        ra.status,
        rb.id,
        &rb.hash[..8.min(rb.hash.len())],
        opt(rb.fitness, 4),
        rb.status
    )?;
    if changes.is_empty() {
        outln!("same knobs")?;
    } else {
        let mut t = table(&["knob", "A", "B"]);
        for c in &changes {
            t.add_row(vec![
                c.knob.clone(),
                c.from.clone().unwrap_or_else(|| "-".into()),
                c.to.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        outln!("{t}")?;
        outln!(
            "{} of {} knobs differ",
            changes.len(),
            ra.knobs.len().max(rb.knobs.len())
        )?;
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
        outln!("{t}")?;
    }
    outln!("source diff for specialization {spec_name}:")?;
    if unified.is_empty() {
        outln!("(identical sources)")?;
    } else {
        out!("{unified}")?;
    }
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------- evo stats

pub fn stats(db: &str, run: Option<&str>, json: bool) -> Result<ExitCode> {
    crate::setup::runtime()?.block_on(async {
        let store = open_existing(db).await?;
        let run = find_run(&store, run, db).await?;
        let s = run_stats(&store, &run).await?;
        if json {
            print_json(&s)?;
            return Ok(ExitCode::SUCCESS);
        }
        outln!(
            "run `{}` ({}): {} candidates, {} pending, {} generations",
            s.run, s.evaluator, s.candidates, s.pending, s.generations
        )?;
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
        outln!("{t}")?;
        let mut f = table(&["gate funnel", "reached"]);
        for st in &s.funnel {
            f.add_row(vec![st.stage.clone(), st.reached.to_string()]);
        }
        outln!("{f}")?;
        outln!(
            "best fitness (evaluated): {}",
            s.best_fitness.map_or("-".into(), |x| format!("{x:.4}x"))
        )?;
        outln!(
            "evaluations per hour: {} over the run ({} h from the first proposal to the last result), {} in the last invocation",
            opt(s.evaluations_per_hour, 0),
            opt(s.wall_hours, 3),
            opt(s.last_invocation_evaluations_per_hour, 0)
        )?;
        outln!(
            "GPU busy fraction (last invocation): {}{}",
            s.gpu_busy_fraction
                .map_or("-".into(), |x| format!("{:.1}%", 100.0 * x)),
            if s.evaluator.starts_with("replay:") {
                " (a replayed run uses no GPU)"
            } else {
                ""
            }
        )?;
        if !s.last_invocation_stages.is_empty() {
            let mut t = table(&["stage (last invocation)", "total s", "ms per genome"]);
            for st in &s.last_invocation_stages {
                t.add_row(vec![
                    st.stage.clone(),
                    format!("{:.1}", st.seconds),
                    format!("{:.0}", st.ms_per_genome),
                ]);
            }
            outln!("{t}")?;
            outln!(
                "compile runs on CPU threads ahead of the GPU; sanitizer and the worker's stages hold a GPU; database is this host's waits on the store"
            )?;
        }
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_shapes_drop_shared_parts() {
        let keys = ["B=1,D=64,S=512", "B=2,D=64,S=512", "B=2,D=64,S=2048"];
        assert_eq!(
            compact_shapes(&keys),
            ["B=1,S=512", "B=2,S=512", "B=2,S=2048"]
        );
        assert_eq!(compact_shapes(&["B=1,D=64"]), ["B=1,D=64"]);
    }
}
