//! Export: the best genome of a run (or one candidate; with `per_shape` the fastest
//! correct genome of each shape, over one run or several runs of any families), rendered
//! and recompiled for every specialization the run covered exactly as the search did
//! (same template, options and architecture; the compile cache hands back the search's
//! own CUBIN when nothing changed), written as `manifest.json` ([`crate::manifest`]), one
//! `kernel.<variant>.cu`, `.ptx` and `.<arch>.cubin` per variant, and the fixed files
//! ([`crate::files`]): `evo_kernel.py` (the PyTorch op, through the CUDA driver),
//! `bench.py` with `sdpa_bench.py` (timing against every SDPA backend), `kernel.h` (C/C++
//! launch helper), `example.cpp` (a C++ program using it) and `README.md`. Per shape, an
//! entry whose run measured its variant less than `min_speedup` times faster than
//! PyTorch's SDPA (or slower) is marked `defer`, so the PyTorch op does not make its user
//! slower than PyTorch where the search measured both.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use evo_core::config::SearchConfig;
use evo_core::Status;
use evo_core::{Genome, Target, Value, Vars};
use evo_gpu::{CompileCache, CompileRequest, Compiler};
use evo_kernels::Problem;
use evo_run::Context as Loaded;
use evo_store::{Candidate, CandidateId, Run, Store};

use crate::files;
use crate::manifest::{
    self, Abi, CompileInfo, Dispatch, DispatchEntry, Manifest, ShapeRecord, Source, Variant,
    MANIFEST, RULE_PER_SHAPE, RULE_SPECIALIZATION, SCHEMA,
};

/// Problems with a PyTorch binding (`evo_kernel.py`): attention, and attention computed
/// through FP8 from the same fp16/bf16 arguments (the quantizer is one of its kernels).
const BOUND_PROBLEMS: [&str; 2] = ["sdpa_fwd", "sdpa_fwd_fp8_e2e"];

/// What to export, from which database, to which folder.
pub struct ExportOptions<'a> {
    /// Run names (`run:NAME|ID` too) or one candidate id; several runs with `per_shape`.
    pub what: &'a [String],
    /// The folder to write: absent or empty, or (with `force`) an earlier artifact.
    pub out: &'a Path,
    /// The population database (a file or `sqlite:` URL; it must exist).
    pub db: &'a str,
    /// The fastest correct genome of each shape, over every run given.
    pub per_shape: bool,
    pub force: bool,
    /// Export genomes the sanitizer gate has not passed (it cannot run here).
    pub unsanitized: bool,
    /// Export builds that differ from the ones the search checked (their compile key
    /// changed since the run: a template, a compile option or NVRTC).
    pub unchecked_build: bool,
    /// With `per_shape`: the speedup over PyTorch's SDPA below which a dispatch entry is
    /// marked `defer` (`evo_kernel.py` then calls PyTorch's SDPA on it):
    /// [`crate::manifest::DEFAULT_MIN_SPEEDUP`] by default, 0 to keep evo's kernels on
    /// every shape (`--keep-slower`).
    pub min_speedup: f64,
    /// The templates folder (default: where each run's config says).
    pub templates: Option<&'a Path>,
}

/// A written artifact: its manifest, and the notes a caller shows (a regressed best, a
/// candidate the sanitizer refused, a compile key that differs from the search's).
pub struct Exported {
    pub manifest: Manifest,
    pub notes: Vec<String>,
}

/// The database file behind `--db`, which must exist (export never creates one); a
/// location evo cannot open is refused as the store refuses it (a usage error).
fn existing_db(db: &str) -> Result<()> {
    if let Some(path) = evo_store::database_file(db)? {
        if !path.is_file() {
            bail!(
                "no population database at {} (give the one the search wrote with --db FILE)",
                path.display()
            );
        }
    }
    Ok(())
}

/// What `RUN|ID` names: a run name, `run:NAME|ID`, or a candidate id (a number).
async fn resolve(store: &Store, what: &str, db: &str) -> Result<(Run, Option<Candidate>)> {
    if let Some(run) = what.strip_prefix("run:") {
        let r = store
            .run(run)
            .await?
            .ok_or_else(|| anyhow!("no run `{run}` in {db} (`evo runs` lists them)"))?;
        return Ok((r, None));
    }
    if let Ok(id) = what.trim().trim_start_matches('#').parse::<i64>() {
        let c = store.candidate(CandidateId(id)).await?.ok_or_else(|| {
            anyhow!("no candidate with id {id} in {db}; to name a run by its id, write run:{id}")
        })?;
        let r = store
            .run_by_id(c.run_id)
            .await?
            .ok_or_else(|| anyhow!("candidate {id} has no run"))?;
        return Ok((r, Some(c)));
    }
    let r = store.run(what).await?.ok_or_else(|| {
        anyhow!("no run `{what}` in {db} and it is not a candidate id (`evo runs` lists the runs)")
    })?;
    Ok((r, None))
}

/// Why a candidate cannot be exported, or `None` when it can.
fn unexportable(c: &Candidate) -> Option<String> {
    match c.status {
        None => Some(format!(
            "candidate {} has not been evaluated yet (pending); resume the search or pick an evaluated one (`evo elites`)",
            c.id
        )),
        Some(s) if s.has_fitness() => None,
        Some(s) => Some(format!(
            "candidate {} is `{s}`{}{}: only candidates that passed every gate (evaluated, or regressed: correct but slower than the baseline) can be exported",
            c.id,
            c.gate.map(|g| format!(" at the {g} gate")).unwrap_or_default(),
            c.detail
                .as_deref()
                .filter(|d| !d.is_empty())
                .map(|d| format!(" ({})", d.lines().next().unwrap_or("")))
                .unwrap_or_default()
        )),
    }
}

/// The run's config, family, target, specializations and space, as the search had them.
fn load(run: &Run, templates: Option<&Path>) -> Result<Loaded> {
    if run.arch.is_none() {
        bail!(
            "run `{}` recorded no architecture; cannot recompile it",
            run.name
        );
    }
    Ok(Loaded::of_run(run, templates)?)
}

/// A run's config (its stored text), with its family from `templates` (or where the
/// config says), for the architecture it ran on: what export and verify render with.
pub(crate) fn load_config(
    run: &str,
    config_path: &Path,
    config_toml: &str,
    arch: &str,
    templates: Option<&Path>,
) -> Result<Loaded> {
    let config = SearchConfig::parse(config_path, config_toml)
        .with_context(|| format!("the config stored with run `{run}`"))?;
    let target = evo_run::TargetChoice {
        target: Target::from_arch(arch)?,
        reason: format!("the architecture run `{run}` used"),
    };
    Ok(Loaded::load(config, templates, target)?)
}

/// A short name for a specialization, e.g. `f16_hd64` or `bf16_hd128_causal`: string
/// values as they are, integers after the initials of their variable, true booleans
/// by name, false ones left out.
pub fn spec_tag(problem: &dyn Problem, spec: &Vars) -> String {
    let mut parts = Vec::new();
    for d in problem.spec_vars() {
        match spec.get(d.name) {
            Some(Value::Str(s)) => parts.push(s.clone()),
            Some(Value::Int(i)) => {
                let initials: String = d
                    .name
                    .split('_')
                    .filter_map(|w| w.chars().next())
                    .collect::<String>()
                    .to_lowercase();
                parts.push(format!("{initials}{i}"));
            }
            Some(Value::Bool(true)) => parts.push(d.name.to_lowercase()),
            _ => {}
        }
    }
    let tag: String = parts
        .join("_")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if tag.starts_with(|c: char| c.is_ascii_digit()) || tag.is_empty() {
        format!("v{tag}")
    } else {
        tag
    }
}

/// The specialization part of a complete shape.
fn spec_of(problem: &dyn Problem, shape: &Vars) -> Vars {
    problem
        .spec_vars()
        .iter()
        .filter_map(|d| shape.get(d.name).map(|v| (d.name.to_string(), v.clone())))
        .collect()
}

/// The run-time part of a complete shape.
fn runtime_of(problem: &dyn Problem, shape: &Vars) -> Vars {
    problem
        .shape_vars()
        .iter()
        .filter_map(|d| shape.get(d.name).map(|v| (d.name.to_string(), v.clone())))
        .collect()
}

/// The name the search gave NVRTC for a genome in a specialization (it lands in
/// -lineinfo's debug sections), so a fresh compile gives the search's bytes too.
pub(crate) fn nvrtc_name(genome: &Genome, spec: &Vars) -> String {
    format!(
        "{}@{}.cu",
        genome.canonical(),
        Genome::from_vars(spec.clone()).canonical()
    )
    .replace(['/', ' '], "_")
}

/// One variant's files, before they are written.
struct Built {
    variant: Variant,
    source: String,
    ptx: String,
    cubin: Vec<u8>,
}

/// What the sanitizer gate says of a candidate at export.
enum Gated {
    /// The manifest's word: `clean`, or `not run: <why>` with `--unsanitized`.
    Passed(String),
    /// A finding, in words.
    Rejected(String),
}

/// The sanitizer gate before a genome leaves evo: the verdict the run stored (a search
/// sanitizes each new best), else compute-sanitizer now on this machine's GPU 0 (stored
/// for the next export). A gate that cannot run here refuses the export, unless
/// `unsanitized` (then a note says so).
async fn sanitizer_gate(
    store: &Store,
    l: &Loaded,
    c: &Candidate,
    unsanitized: bool,
    notes: &mut Vec<String>,
) -> Result<Gated> {
    use evo_eval::profile::SanitizerVerdict;
    let stored = store
        .profiles(c.id)
        .await?
        .into_iter()
        .rev()
        .filter(|p| p.tool == SanitizerVerdict::PROFILE_TOOL)
        .find_map(|p| serde_json::from_value::<SanitizerVerdict>(p.metrics).ok())
        .filter(|v| !matches!(v, SanitizerVerdict::NotRun { .. }));
    let stored_genome = c.parse_genome()?;
    let genome = l.space.complete(&stored_genome).unwrap_or(stored_genome);
    let verdict = match stored {
        Some(v) => v,
        None => {
            let here = match evo_gpu::device::probe() {
                Ok(info) if !info.devices.is_empty() => {
                    let candidates = evo_eval::pipeline::family_candidates(
                        &l.family,
                        &l.space,
                        &l.specs,
                        &genome,
                        &l.edge_shapes(),
                    )
                    .map_err(|e| anyhow!("genome of candidate {}: {e}", c.id))?;
                    let exe = std::env::current_exe().context("finding the evo executable")?;
                    let problem = l.family.problem;
                    tokio::task::spawn_blocking(move || {
                        SanitizerVerdict::of(&exe, problem, &candidates, 0)
                    })
                    .await
                    .context("the sanitizer thread")?
                }
                Ok(_) => SanitizerVerdict::NotRun {
                    reason: "the driver sees no GPU".into(),
                },
                Err(e) => SanitizerVerdict::NotRun {
                    reason: format!("no GPU here ({e})"),
                },
            };
            if !matches!(here, SanitizerVerdict::NotRun { .. }) {
                let profile = evo_store::NewProfile {
                    tool: SanitizerVerdict::PROFILE_TOOL.into(),
                    shape: None,
                    metrics: serde_json::to_value(&here)?,
                };
                store.insert_profile(c.id, &profile).await?;
            }
            here
        }
    };
    match verdict {
        SanitizerVerdict::Clean { .. } => Ok(Gated::Passed("clean".into())),
        SanitizerVerdict::Finding { finding, .. } => Ok(Gated::Rejected(format!(
            "candidate {} ({}) fails the sanitizer gate: {finding}",
            c.id,
            genome.canonical()
        ))),
        SanitizerVerdict::NotRun { reason } if unsanitized => {
            notes.push(format!(
                "candidate {} is exported without the sanitizer gate ({reason}); the manifest says `not run`",
                c.id
            ));
            Ok(Gated::Passed(format!("not run: {reason}")))
        }
        SanitizerVerdict::NotRun { reason } => bail!(
            "candidate {} ({}) has not been through compute-sanitizer (memcheck, racecheck, synccheck) and it cannot run here: {reason}. Export on a machine with a GPU and compute-sanitizer, or pass --unsanitized to export it anyway (the manifest records it)",
            c.id,
            genome.canonical()
        ),
    }
}

fn build_variant(
    run: &str,
    l: &Loaded,
    compiler: &Compiler,
    candidate: &Candidate,
    spec_index: usize,
    name: String,
    measurements: &[evo_store::Measurement],
) -> Result<Built> {
    let problem = l.family.problem;
    // A genome stored before a knob existed is completed with the family's defaults:
    // the variant records the completed genome and its hash (the candidate id and the
    // run's stored hash still name the row).
    let genome = l
        .space
        .complete(&candidate.parse_genome()?)
        .with_context(|| format!("genome of candidate {}", candidate.id))?;
    if let Some(r) = l.space.rejection(&genome) {
        bail!(
            "genome {} of candidate {} violates constraint `{}` with the current family file; the template changed since the run",
            genome.canonical(),
            candidate.id,
            r.constraint
        );
    }
    let spec = &l.specs.specs[spec_index];
    let source = l.family.render(&l.space, &genome, spec_index)?;
    let nvrtc_name = nvrtc_name(&genome, spec);
    let compiled = compiler.compile(&CompileRequest {
        name: nvrtc_name.clone(),
        source: source.clone(),
    })?;
    if !compiled.success {
        bail!(
            "genome {} ({}) no longer compiles:\n{}",
            genome.canonical(),
            Genome::from_vars(spec.clone()).canonical(),
            compiled.log
        );
    }
    let (Some(ptx), Some(cubin)) = (compiled.ptx.clone(), compiled.cubin.clone()) else {
        bail!("NVRTC returned no PTX or CUBIN for {name}");
    };
    let spec_text = Genome::from_vars(spec.clone()).canonical();
    let search_key = candidate
        .resources
        .as_ref()
        .and_then(|r| r.as_array())
        .and_then(|specs| {
            specs.iter().find(|s| {
                s.get("specialization").and_then(|x| x.as_str()) == Some(spec_text.as_str())
            })
        })
        .and_then(|s| s.pointer("/compile/key"))
        .and_then(|k| k.as_str())
        .map(str::to_string);
    let tensor_ops = compiler
        .sass_counts(&cubin)
        .and_then(|r| r.ok())
        .and_then(|m| m.get(problem.entry()).map(|c| c.tensor.clone()));

    // The launches with the genome's compile-time values bound. Any measured shape of
    // the specialization places the problem's argument lists in the ABI.
    let vars = l.space.vars(&genome, spec_index)?;
    let probe = measurements
        .iter()
        .map(|m| &m.measured.shape)
        .find(|s| spec_of(problem, s) == *spec)
        .ok_or_else(|| {
            anyhow!(
                "candidate {} has no measurement for specialization {}",
                candidate.id,
                Genome::from_vars(spec.clone()).canonical()
            )
        })?;
    let params = manifest::abi_params(problem.abi())
        .map_err(|e| anyhow!("problem {}: {e}", problem.name()))?;
    let texts = manifest::launch_texts(&l.family, &params, &vars, probe)
        .map_err(|e| anyhow!("family {}: {e}", l.family.name))?;
    let mut shapes = Vec::new();
    for m in measurements {
        if spec_of(problem, &m.measured.shape) != *spec {
            continue;
        }
        let dims = l
            .family
            .launch_dims(&vars, &m.measured.shape)
            .with_context(|| format!("launch rule on {}", m.shape))?;
        shapes.push(ShapeRecord {
            shape: m.measured.shape.clone(),
            timed: m.median_us.is_some(),
            launches: dims.into_iter().map(|(_, d)| d).collect(),
            median_us: m.median_us,
            p20_us: m.p20_us,
            p80_us: m.p80_us,
            tflops: m.tflops,
            max_abs_err: m.max_abs_err,
            rel_l2: m.rel_l2,
        });
    }
    if !shapes.iter().any(|s| s.timed) {
        bail!(
            "candidate {} has no timed measurement for specialization {spec_text}; nothing to freeze",
            candidate.id
        );
    }
    let variant = Variant {
        run: run.to_string(),
        family: l.family.name.clone(),
        contiguous: l.family.contiguous.clone(),
        source_file: format!("kernel.{name}.cu"),
        ptx_file: format!("kernel.{name}.ptx"),
        cubin_file: format!("kernel.{name}.{}.cubin", compiled.arch),
        name,
        nvrtc_name,
        candidate_id: candidate.id.0,
        genome: genome.canonical(),
        genome_hash: genome.hash().0,
        status: candidate
            .status
            .map(|s| s.name().to_string())
            .unwrap_or_default(),
        fitness: candidate.fitness,
        specialization: spec.clone(),
        launches: texts.launches,
        constants: texts.constants,
        scratch: texts.scratch,
        resources: compiled.kernels.clone(),
        tensor_ops,
        compile_key_matches_search: search_key.map(|k| k == compiled.key),
        sanitizer: None,
        compile_key: compiled.key.clone(),
        shapes,
    };
    Ok(Built {
        variant,
        source,
        ptx,
        cubin,
    })
}

/// What measured a baseline, from the store's `source` text (`torch: ...`, `import:FILE
/// (...)`, `genome:HASH`; see evo_run::baseline): a [`Source::baseline_kind`] word, with
/// no path of this machine in it.
fn baseline_kind(source: &str) -> &'static str {
    if source.starts_with("torch:") {
        manifest::BASELINE_TORCH
    } else if source.starts_with("import:") {
        manifest::BASELINE_IMPORT
    } else if source.starts_with("genome:") {
        manifest::BASELINE_GENOME
    } else {
        "other"
    }
}

/// The note for per-shape entries whose run has no PyTorch baseline on their shape (a
/// genome baseline, e.g. `configs/sdpa_wgmma_quick.toml`'s first seed): nothing tells the
/// export whether PyTorch's SDPA is faster there, so they keep evo's kernels.
fn unchecked_against_pytorch(m: &Manifest) -> Result<Option<String>> {
    let mut runs: Vec<&str> = Vec::new();
    let mut n = 0;
    for e in &m.dispatch.table {
        if m.has_pytorch_baseline(e)? == Some(false) {
            n += 1;
            let run = m
                .variants
                .iter()
                .find(|v| v.name == e.variant)
                .map_or("?", |v| v.run.as_str());
            if !runs.contains(&run) {
                runs.push(run);
            }
        }
    }
    if n == 0 {
        return Ok(None);
    }
    let runs = runs
        .iter()
        .map(|r| format!("`{r}`"))
        .collect::<Vec<_>>()
        .join(", ");
    Ok(Some(format!(
        "{n} of {} shapes were not measured against PyTorch's SDPA (the baseline of run {runs} there is not PyTorch's): evo_kernel.py runs evo's kernels on them whether or not PyTorch is faster. To let the export check them, import PyTorch's times into the run first: `python3 scripts/torch_sdpa_baseline.py CONFIG --out FILE` on the search's GPU, then `evo baseline import --run RUN FILE`",
        m.dispatch.table.len()
    )))
}

/// Marks every per-shape entry whose run measured its variant less than the manifest's
/// `min_speedup` times faster than PyTorch's SDPA ([`Manifest::deferral`]), so
/// `evo_kernel.py` does not make a PyTorch user slower than PyTorch; with `min_speedup` 0
/// (`--keep-slower`) marks none. Returns the note naming those shapes with both times
/// (with `--keep-slower`: the shapes where PyTorch was faster), and what becomes of them.
fn mark_deferrals(m: &mut Manifest) -> Result<Option<String>> {
    let min_speedup = m.dispatch.min_speedup.unwrap_or(0.0);
    let keep_slower = min_speedup <= 0.0;
    let mut named = Vec::new();
    for i in 0..m.dispatch.table.len() {
        let e = &m.dispatch.table[i];
        let mark = if keep_slower {
            m.deferral_at(e, 1.0)?
        } else {
            m.deferral(e)?
        };
        let Some(mark) = mark else {
            continue;
        };
        let e = &mut m.dispatch.table[i];
        named.push(format!(
            "{} (PyTorch's SDPA {:.2} µs, {} {:.2} µs: evo {:.2}x)",
            e.key_text(),
            mark.baseline_us,
            e.variant,
            mark.variant_us,
            mark.speedup()
        ));
        if !keep_slower {
            e.defer = Some(mark);
        }
    }
    if named.is_empty() {
        return Ok(None);
    }
    let n = named.len();
    let shapes = if n == 1 { "shape" } else { "shapes" };
    Ok(Some(if keep_slower {
        format!(
            "--keep-slower: evo_kernel.py runs evo's kernels on {n} {shapes} where their run measured PyTorch's SDPA faster: {}",
            named.join("; ")
        )
    } else {
        format!(
            "{n} {shapes} go to PyTorch's SDPA in evo_kernel.py (fallback reason `slower`, as do calls whose nearest searched shape is one of them), because their run measured evo's fastest variant less than {min_speedup}x faster than it: {}. kernel.h keeps the variants (C++ has no SDPA to fall back to); --min-speedup sets the threshold, --keep-slower exports evo's kernels there too",
            named.join("; ")
        )
    }))
}

/// Makes `out` ready: created, or empty, or (with `--force`) an earlier artifact whose
/// files are removed.
fn prepare_out(out: &Path, force: bool) -> Result<()> {
    if out.exists() {
        if !out.is_dir() {
            bail!("{} exists and is not a folder", out.display());
        }
        let entries: Vec<_> = std::fs::read_dir(out)?.collect::<Result<_, _>>()?;
        if !entries.is_empty() {
            if !force {
                bail!(
                    "{} exists and is not empty; choose another --out or pass --force to replace the artifact in it",
                    out.display()
                );
            }
            // Only files of an earlier artifact are removed; anything else stays.
            if let Ok(old) = Manifest::read(out) {
                for name in old.files.keys() {
                    let _ = std::fs::remove_file(out.join(name));
                }
                let _ = std::fs::remove_file(out.join(MANIFEST));
            }
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))
}

/// Writes the artifact `o` asks for into `o.out` (see the module's text); prints nothing.
pub async fn export(o: &ExportOptions<'_>) -> crate::error::Result<Exported> {
    existing_db(o.db)?;
    let (manifest, notes) = export_async(o).await?;
    Ok(Exported { manifest, notes })
}

/// One run given to `evo export`: as it searched, with its compiler and the candidates
/// that passed every gate (or the one candidate asked for), each with its measurements.
struct Input {
    run: Run,
    loaded: Loaded,
    compiler: Compiler,
    timed: Vec<(Candidate, Vec<evo_store::Measurement>)>,
}

/// Which variants to build: (input, candidate of that input, specialization index of
/// that input's config, variant name), and the dispatch table that names them.
struct Choice {
    chosen: Vec<(usize, usize, usize, String)>,
    table: Vec<DispatchEntry>,
    notes: Vec<String>,
}

/// The fastest timed candidate of every shape any input measured (`--per-shape`), over
/// every input: one dispatch entry per (specialization, shape), one variant per
/// (input, candidate, specialization) that wins a shape.
fn choose_per_shape(inputs: &[Input]) -> Result<Choice> {
    let mut chosen: Vec<(usize, usize, usize, String)> = Vec::new();
    let mut table = Vec::new();
    let mut seen = Vec::new();
    for input in inputs {
        let problem = input.loaded.family.problem;
        for (_, shape) in &input.loaded.specs.shapes {
            let key = evo_store::shape_key(shape);
            if seen.contains(&key) {
                continue;
            }
            seen.push(key.clone());
            let mut best: Option<(usize, usize, f64)> = None;
            for (r, other) in inputs.iter().enumerate() {
                for (ci, (_, ms)) in other.timed.iter().enumerate() {
                    let t = ms.iter().find(|m| m.shape == key).and_then(|m| m.median_us);
                    if let Some(t) = t {
                        if best.is_none_or(|b| t < b.2) {
                            best = Some((r, ci, t));
                        }
                    }
                }
            }
            let (r, ci, _) = best.ok_or_else(|| {
                anyhow!(
                    "no candidate of run{} {} was timed on {key}",
                    if inputs.len() == 1 { "" } else { "s" },
                    inputs
                        .iter()
                        .map(|i| format!("`{}`", i.run.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
            let spec = spec_of(problem, shape);
            let winner = &inputs[r];
            let spec_index = winner
                .loaded
                .specs
                .specs
                .iter()
                .position(|s| *s == spec)
                .ok_or_else(|| {
                    anyhow!(
                        "run `{}` timed {key} but its config has no such specialization",
                        winner.run.name
                    )
                })?;
            let c = &winner.timed[ci].0;
            let base = format!(
                "{}_{}",
                spec_tag(problem, &winner.loaded.specs.specs[spec_index]),
                &c.hash[..8]
            );
            // The same genome may win shapes in two runs (e.g. the same family searched
            // twice): each keeps its own variant, with its own run's measurements.
            let name = match chosen
                .iter()
                .find(|(a, b, sp, _)| (*a, *b, *sp) == (r, ci, spec_index))
            {
                Some((_, _, _, n)) => n.clone(),
                None => {
                    let mut name = base.clone();
                    let mut k = 2;
                    while chosen.iter().any(|(_, _, _, n)| *n == name) {
                        name = format!("{base}_{k}");
                        k += 1;
                    }
                    chosen.push((r, ci, spec_index, name.clone()));
                    name
                }
            };
            table.push(DispatchEntry {
                specialization: spec,
                shape: Some(runtime_of(problem, shape)),
                variant: name,
                // Marked once the manifest holds the variants' times (export_async).
                defer: None,
            });
        }
    }
    Ok(Choice {
        chosen,
        table,
        notes: Vec::new(),
    })
}

/// The fittest candidate of the one input (or the candidate asked for) in every
/// specialization of its run.
fn choose_best(input: &Input, picked: bool) -> Choice {
    let timed = &input.timed;
    let best = if picked {
        0
    } else {
        // Evaluated beats regressed; then the highest fitness, then the oldest.
        let rank = |c: &Candidate| {
            (
                c.status == Some(Status::Evaluated),
                c.fitness.unwrap_or(f64::MIN),
            )
        };
        let mut order: Vec<usize> = (0..timed.len()).collect();
        order.sort_by(|a, b| {
            let (ra, rb) = (rank(&timed[*a].0), rank(&timed[*b].0));
            rb.0.cmp(&ra.0).then(rb.1.total_cmp(&ra.1)).then(a.cmp(b))
        });
        order[0]
    };
    let mut notes = Vec::new();
    let c = &timed[best].0;
    if c.status == Some(Status::Regressed) {
        notes.push(format!(
            "candidate {} is the fittest, but `regressed`: correct, and slower than the run's baseline on some shapes (fitness {:.3})",
            c.id,
            c.fitness.unwrap_or(f64::NAN)
        ));
    }
    let problem = input.loaded.family.problem;
    let mut chosen = Vec::new();
    let mut table = Vec::new();
    for (spec_index, spec) in input.loaded.specs.specs.iter().enumerate() {
        let name = spec_tag(problem, spec);
        chosen.push((0, best, spec_index, name.clone()));
        table.push(DispatchEntry {
            specialization: spec.clone(),
            shape: None,
            variant: name,
            defer: None,
        });
    }
    Choice {
        chosen,
        table,
        notes,
    }
}

async fn export_async(o: &ExportOptions<'_>) -> Result<(Manifest, Vec<String>)> {
    let store = Store::open(o.db)
        .await
        .context("opening the population database")?;
    if o.what.is_empty() {
        bail!("give the run to export (a run name, run:NAME|ID, or a candidate id)");
    }
    let mut resolved: Vec<(Run, Option<Candidate>)> = Vec::new();
    for what in o.what {
        resolved.push(resolve(&store, what, o.db).await?);
    }
    if o.what.len() > 1 {
        if let Some(c) = resolved.iter().find_map(|(_, c)| c.as_ref()) {
            bail!(
                "candidate {} names one genome, which is exported alone; to combine runs give run names with --per-shape",
                c.id
            );
        }
        for (i, (run, _)) in resolved.iter().enumerate() {
            if resolved[..i].iter().any(|(r, _)| r.id == run.id) {
                bail!("run `{}` is named twice", run.name);
            }
        }
        if !o.per_shape {
            bail!(
                "several runs are combined per shape: add --per-shape (the fastest correct variant of each shape over every run); their fitnesses, relative to each run's own baseline, do not compare"
            );
        }
    }
    for (run, _) in &resolved {
        if run.evaluator.starts_with("replay:") {
            bail!(
                "run `{}` was answered by the replay evaluator ({}): its times are recorded ones, not measurements of kernels this run compiled; export from a run searched on a GPU (--evaluator gpu)",
                run.name,
                run.evaluator
            );
        }
        if !BOUND_PROBLEMS.contains(&run.problem.as_str()) {
            bail!(
                "run `{}` is for problem `{}`; evo export writes artifacts for {:?} (the ones with a PyTorch binding)",
                run.name,
                run.problem,
                BOUND_PROBLEMS
            );
        }
    }
    // The fastest per shape compares times: they must come from one kind of GPU and
    // compile for one architecture.
    let first = &resolved[0].0;
    for (run, _) in &resolved[1..] {
        for (what, a, b) in [
            ("GPU", &first.device, &run.device),
            ("architecture", &first.arch, &run.arch),
            (
                "problem",
                &Some(first.problem.clone()),
                &Some(run.problem.clone()),
            ),
        ] {
            if a != b {
                bail!(
                    "runs `{}` and `{}` differ in {what} ({} vs {}): export runs of one GPU and architecture together, so their times compare",
                    first.name,
                    run.name,
                    a.as_deref().unwrap_or("unknown"),
                    b.as_deref().unwrap_or("unknown")
                );
            }
        }
    }
    let picked = resolved[0].1.clone();
    if let Some(c) = &picked {
        if let Some(why) = unexportable(c) {
            bail!(why);
        }
        if o.per_shape {
            bail!("--per-shape picks the best genome of each shape of a run; give a run, not candidate {}", c.id);
        }
    }

    let mut inputs = Vec::new();
    for (run, c) in resolved {
        let loaded = load(&run, o.templates)?;
        // A variant freezes one candidate per specialization: without --per-shape, one timed
        // on a shape of every specialization of the run.
        let problem = loaded.family.problem;
        let timed_in_every_spec = |ms: &[evo_store::Measurement]| {
            loaded.specs.specs.iter().all(|spec| {
                ms.iter()
                    .any(|m| m.median_us.is_some() && spec_of(problem, &m.measured.shape) == *spec)
            })
        };
        // Every candidate that passed the gates, with its measurements.
        let mut timed: Vec<(Candidate, Vec<evo_store::Measurement>)> = Vec::new();
        let mut partly_timed = 0;
        match c {
            Some(c) => {
                let ms = store.measurements(c.id).await?;
                timed.push((c, ms));
            }
            None => {
                for c in store.candidates(run.id).await? {
                    if unexportable(&c).is_none() {
                        let ms = store.measurements(c.id).await?;
                        if o.per_shape || timed_in_every_spec(&ms) {
                            timed.push((c, ms));
                        } else {
                            partly_timed += 1;
                        }
                    }
                }
            }
        }
        if timed.is_empty() {
            let statuses = store
                .status_counts(run.id)
                .await?
                .iter()
                .map(|(s, n)| format!("{s} {n}"))
                .collect::<Vec<_>>()
                .join(", ");
            if partly_timed > 0 {
                bail!(
                    "run `{}` has no candidate timed in every specialization ({statuses}): the timing of a `regressed` candidate stops once it is slower than the run's baseline; search longer, or export with --per-shape",
                    run.name
                );
            }
            bail!(
                "run `{}` has no candidate that passed every gate ({statuses}); nothing to export",
                run.name
            );
        }
        let compiler = Compiler::new(
            &loaded.target.target.arch,
            &loaded.config.compile.options,
            loaded.config.compile.max_registers,
            Some(CompileCache::new(CompileCache::default_dir())),
        )?;
        inputs.push(Input {
            run,
            loaded,
            compiler,
            timed,
        });
    }
    let problem = inputs[0].loaded.family.problem;

    // The fastest candidates, each through the sanitizer gate; one it rejects gives way to
    // the next fastest (a candidate named on the command line is refused instead).
    let mut sanitized: BTreeMap<i64, String> = BTreeMap::new();
    let (mut skipped, mut gate_notes) = (Vec::new(), Vec::new());
    let (chosen, table, mut notes) = loop {
        let choice = if o.per_shape {
            choose_per_shape(&inputs)?
        } else {
            choose_best(&inputs[0], picked.is_some())
        };
        let mut rejected: Vec<(usize, i64)> = Vec::new();
        for (r, ci, _, _) in &choice.chosen {
            let input = &inputs[*r];
            let c = &input.timed[*ci].0;
            if sanitized.contains_key(&c.id.0) || rejected.iter().any(|(_, id)| *id == c.id.0) {
                continue;
            }
            match sanitizer_gate(&store, &input.loaded, c, o.unsanitized, &mut gate_notes).await? {
                Gated::Passed(word) => {
                    sanitized.insert(c.id.0, word);
                }
                Gated::Rejected(why) if picked.is_some() => bail!("{why}; it is not exported"),
                Gated::Rejected(why) => {
                    skipped.push(why);
                    rejected.push((*r, c.id.0));
                }
            }
        }
        if rejected.is_empty() {
            let mut notes = choice.notes;
            notes.extend(
                skipped
                    .iter()
                    .map(|why| format!("{why}; the next fastest candidate was taken")),
            );
            notes.append(&mut gate_notes);
            break (choice.chosen, choice.table, notes);
        }
        for (r, id) in rejected {
            inputs[r].timed.retain(|(c, _)| c.id.0 != id);
            if inputs[r].timed.is_empty() {
                bail!(
                    "run `{}` has no candidate left that passes the sanitizer gate: {}",
                    inputs[r].run.name,
                    skipped.join("; ")
                );
            }
        }
    };

    let mut built = Vec::new();
    for (r, ci, spec_index, name) in &chosen {
        let input = &inputs[*r];
        let (c, ms) = &input.timed[*ci];
        let mut b = build_variant(
            &input.run.name,
            &input.loaded,
            &input.compiler,
            c,
            *spec_index,
            name.clone(),
            ms,
        )?;
        b.variant.sanitizer = sanitized.get(&c.id.0).cloned();
        built.push(b);
    }
    // The gates ran on the search's build of each genome: one whose compile key differs
    // here (its source, options or NVRTC changed since the run) is not what they checked.
    let named = |matches: Option<bool>| -> Vec<&str> {
        built
            .iter()
            .filter(|b| b.variant.compile_key_matches_search == matches)
            .map(|b| b.variant.name.as_str())
            .collect()
    };
    let changed = named(Some(false));
    if !changed.is_empty() {
        if !o.unchecked_build {
            bail!(
                "{}: the kernel built here is not the one the search checked (its compile key changed: a template, a compile option or the NVRTC version differs from the run's), so no gate has run on it. Export with the templates, config and NVRTC of the search, or pass --unchecked-build to export it anyway (the manifest records it) and gate it with `evo verify DIR` on a GPU",
                changed.join(", ")
            );
        }
        notes.push(format!(
            "{}: exported with --unchecked-build: built differently from the search's build, which the gates checked and the manifest's times are of; `evo verify DIR` gates this build on a GPU",
            changed.join(", ")
        ));
    }
    let unknown = named(None);
    if !unknown.is_empty() {
        notes.push(format!(
            "{}: the run stored no compile key, so whether this build is the one the search checked is unknown; `evo verify DIR` gates it on a GPU",
            unknown.join(", ")
        ));
    }

    prepare_out(o.out, o.force)?;
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    let mut write = |name: &str, bytes: &[u8]| -> Result<()> {
        std::fs::write(o.out.join(name), bytes)
            .with_context(|| format!("writing {}", o.out.join(name).display()))?;
        files.insert(name.to_string(), manifest::sha256_hex(bytes));
        Ok(())
    };
    for b in &built {
        write(&b.variant.source_file, b.source.as_bytes())?;
        write(&b.variant.ptx_file, b.ptx.as_bytes())?;
        write(&b.variant.cubin_file, &b.cubin)?;
    }
    let params = manifest::abi_params(problem.abi())
        .map_err(|e| anyhow!("the ABI of {}: {e}", problem.name()))?;
    let mut sources = Vec::new();
    for input in &inputs {
        let run = &input.run;
        let baselines = store.baselines(run.id).await?;
        sources.push(Source {
            run: run.name.clone(),
            run_id: run.id.0,
            evaluator: run.evaluator.clone(),
            family: input.loaded.family.name.clone(),
            config_toml: run.config_toml.clone(),
            baseline_us: baselines
                .iter()
                .map(|b| (b.shape.clone(), b.median_us))
                .collect(),
            baseline_kind: baselines
                .iter()
                .map(|b| (b.shape.clone(), baseline_kind(&b.source).to_string()))
                .collect(),
            search_nvrtc_version: run.nvrtc_version.clone(),
            compile: CompileInfo {
                options: input.loaded.config.compile.options.clone(),
                max_registers: input.loaded.config.compile.max_registers,
                nvrtc_options: manifest::portable_options(
                    input.compiler.options(),
                    &input.compiler.install().include,
                ),
            },
        });
    }
    let first = &inputs[0];
    let mut m = Manifest {
        schema: SCHEMA.into(),
        evo_version: env!("CARGO_PKG_VERSION").into(),
        exported_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        problem: problem.name().into(),
        mode: if o.per_shape { "per_shape" } else { "best" }.into(),
        sources,
        device: first.run.device.clone(),
        driver: first.run.driver.clone(),
        nvrtc_version: first.compiler.nvrtc_version().into(),
        arch: first.compiler.arch().into(),
        abi: Abi {
            entry: problem.entry().into(),
            text: problem.abi().into(),
            params,
        },
        spec_vars: problem.spec_vars().iter().map(|d| d.name.into()).collect(),
        shape_vars: problem.shape_vars().iter().map(|d| d.name.into()).collect(),
        variants: built.into_iter().map(|b| b.variant).collect(),
        dispatch: Dispatch {
            mode: if o.per_shape {
                "per_shape"
            } else {
                "specialization"
            }
            .into(),
            rule: if o.per_shape {
                RULE_PER_SHAPE
            } else {
                RULE_SPECIALIZATION
            }
            .into(),
            min_speedup: o.per_shape.then_some(o.min_speedup.max(0.0)),
            table,
        },
        files: BTreeMap::new(),
    };
    if o.per_shape {
        notes.extend(mark_deferrals(&mut m)?);
        notes.extend(unchecked_against_pytorch(&m)?);
    }
    for (name, text) in files::fixed_files() {
        write(name, text.as_bytes())?;
    }
    write(manifest::KERNEL_H, files::kernel_h(&m)?.as_bytes())?;
    write(manifest::README_MD, files::readme(&m).as_bytes())?;
    m.files = files;
    let text = serde_json::to_string_pretty(&m)? + "\n";
    std::fs::write(o.out.join(MANIFEST), text)
        .with_context(|| format!("writing {}", o.out.join(MANIFEST).display()))?;
    // The sanitizer verdicts stored here folded into the database file.
    store.close().await;
    Ok((m, notes))
}
