//! The baseline: per-shape times every fitness is relative to. PyTorch's SDPA measured on
//! the run's GPU when the run starts (`[search] baseline = "torch"`: scripts/
//! torch_sdpa_baseline.py, embedded, run with the machine's python3; where it cannot run,
//! the first seed genome, with a message saying why), imported from a file measured outside
//! evo (`import:FILE`, e.g. written by that script), or a genome of the family evaluated
//! first (`genome:K=V,...`, default the first seed). [`rescore`] replaces a run's baseline
//! and rescores every timed candidate (`evo baseline import`).
//!
//! The file format, `evo-baseline-1`:
//!
//! ```json
//! {"format": "evo-baseline-1", "source": "torch 2.11 sdpa (auto)", "device": "NVIDIA H200",
//!  "shapes": [{"shape": {"BATCH": 1, "HEADS": 8, "SEQ_Q": 512, "SEQ_KV": 512,
//!              "HEAD_DIM": 64, "CAUSAL": false, "DTYPE": "f16"}, "median_us": 9.9}]}
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use evo_core::{shape_key, Genome, Status, Value, Vars};
use evo_kernels::Problem;
use evo_store::{CandidateId, NewCandidate, Origin, Store};
use serde::Deserialize;

use crate::error::{refuse, refused, Result, ResultExt};
use crate::open::JOIN_WAIT;
use crate::scoring::{measurements, result_row, score, times_on};
use crate::{Progress, Run, Stop};

pub const FORMAT: &str = "evo-baseline-1";

/// `[search] baseline = "torch"`.
pub const TORCH: &str = "torch";

/// The script that times PyTorch SDPA the way evo times kernels, and its helper module.
const TORCH_SCRIPT: (&str, &str) = (
    "torch_sdpa_baseline.py",
    include_str!("../../../scripts/torch_sdpa_baseline.py"),
);
const SDPA_BENCH: (&str, &str) = (
    "sdpa_bench.py",
    include_str!("../../../scripts/sdpa_bench.py"),
);

/// How long measuring PyTorch may take before it is given up.
const TORCH_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// The shapes as the script reads them: a TOML file of complete `[[shapes]]` tables.
fn shapes_toml(shapes: &[Vars]) -> String {
    #[derive(serde::Serialize)]
    struct Shapes<'a> {
        shapes: &'a [Vars],
    }
    toml::to_string(&Shapes { shapes }).expect("shape values serialize to TOML")
}

#[derive(Deserialize)]
struct File {
    format: String,
    source: String,
    device: Option<String>,
    shapes: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    shape: serde_json::Map<String, serde_json::Value>,
    median_us: f64,
}

/// Per-shape times from an `evo-baseline-1` file.
pub struct Imported {
    /// The file they were read from.
    pub path: std::path::PathBuf,
    /// The file's own `source` (what measured the times).
    pub measured_by: String,
    pub device: Option<String>,
    pub shapes: Vec<(Vars, f64)>,
}

impl Imported {
    pub fn load(path: &Path) -> Result<Imported> {
        let text = std::fs::read_to_string(path)
            .context(|| format!("reading baseline {}", path.display()))?;
        let f: File = serde_json::from_str(&text)
            .context(|| format!("baseline {} is not {FORMAT} JSON", path.display()))?;
        if f.format != FORMAT {
            refuse!(
                "baseline {} has format `{}`; evo reads `{FORMAT}`",
                path.display(),
                f.format
            );
        }
        let mut shapes = Vec::new();
        for (i, e) in f.shapes.into_iter().enumerate() {
            if !(e.median_us.is_finite() && e.median_us > 0.0) {
                refuse!(
                    "baseline {}: shape #{} has median_us {}",
                    path.display(),
                    i + 1,
                    e.median_us
                );
            }
            let mut vars = Vars::new();
            for (k, v) in e.shape {
                let value = match v {
                    serde_json::Value::Bool(b) => Value::Bool(b),
                    serde_json::Value::Number(n) if n.is_i64() => {
                        Value::Int(n.as_i64().expect("checked"))
                    }
                    serde_json::Value::String(s) => Value::Str(s),
                    other => refuse!(
                        "baseline {}: shape #{}: `{k}` = {other} is not an integer, boolean or string",
                        path.display(),
                        i + 1
                    ),
                };
                vars.insert(k, value);
            }
            // Two times for one shape: which one the fitness is relative to would be
            // whichever comes first; the file is ambiguous.
            if let Some(j) = shapes.iter().position(|(v, _)| *v == vars) {
                refuse!(
                    "baseline {}: shape #{} repeats shape #{} ({}): give each shape one time",
                    path.display(),
                    i + 1,
                    j + 1,
                    shape_key(&vars)
                );
            }
            shapes.push((vars, e.median_us));
        }
        Ok(Imported {
            path: path.to_path_buf(),
            measured_by: f.source,
            device: f.device,
            shapes,
        })
    }

    /// `import:<file> (<measured by>)`, what a run stores as the baselines' source.
    pub fn source(&self) -> String {
        format!("import:{} ({})", self.path.display(), self.measured_by)
    }

    /// The time of each of `shapes` (complete), by canonical key: the file's shapes are
    /// completed with the problem's defaults before they are matched.
    pub fn times_for(
        &self,
        problem: &dyn Problem,
        shapes: &[Vars],
        file: &Path,
    ) -> Result<Vec<(String, f64)>> {
        shapes
            .iter()
            .map(|shape| {
                let key = shape_key(shape);
                let t = self
                    .shapes
                    .iter()
                    .find(|(v, _)| {
                        problem
                            .complete_shape(v)
                            .is_ok_and(|c| shape_key(&c) == key)
                    })
                    .map(|(_, t)| *t)
                    .ok_or_else(|| {
                        refused!("baseline {} has no time for shape {key}", file.display())
                    })?;
                Ok((key, t))
            })
            .collect()
    }
}

/// The run's baseline time of each configured shape.
pub(crate) struct Baseline {
    /// The configured shapes' keys, in config order.
    pub keys: Vec<String>,
    pub times: Vec<f64>,
    /// GPU time spent evaluating the baseline genome here, ms.
    pub gpu_ms: f64,
}

async fn stored(store: &Store, run: evo_store::RunId) -> Result<BTreeMap<String, f64>> {
    Ok(store
        .baselines(run)
        .await?
        .into_iter()
        .map(|b| (b.shape, b.median_us))
        .collect())
}

impl Run {
    /// The run's baseline: as stored; a joining host waits for the first host to set
    /// it; otherwise set now, from the config's `[search] baseline`.
    pub(crate) async fn baseline(&self, stop: &Stop, progress: &dyn Progress) -> Result<Baseline> {
        let keys: Vec<String> = self
            .context
            .specs
            .shapes
            .iter()
            .map(|(_, v)| shape_key(v))
            .collect();
        let mut times = stored(&self.store, self.id).await?;
        let missing = |t: &BTreeMap<String, f64>| keys.iter().any(|k| !t.contains_key(k));
        if self.joined {
            // Another host measures it; wait while one is alive (a run whose hosts all
            // stopped before measuring it would otherwise keep this one for 10 minutes).
            let waited = Instant::now();
            let mut looked = None::<Instant>;
            while missing(&times) {
                if waited.elapsed() > JOIN_WAIT || stop.is_requested() {
                    refuse!("run `{}` has no baseline after 10 minutes: is its first host (evo search) running?", self.name);
                }
                if looked.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    looked = Some(Instant::now());
                    if self.other_live_hosts().await?.is_empty() {
                        refuse!("run `{}` has no baseline, and no other host is working on it (its hosts stopped or died before measuring one): continue it with `evo search --resume {}`, which measures it, and join after that", self.name, self.name);
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                times = stored(&self.store, self.id).await?;
            }
        }
        let mut gpu_ms = 0.0;
        if missing(&times) {
            let spec = self.context.config.search.baseline.clone();
            match spec.as_deref() {
                Some(s) if s.starts_with("import:") => {
                    self.import_baseline(&s["import:".len()..], progress)
                        .await?
                }
                Some(TORCH) => {
                    if let Err(why) = self.torch_baseline(progress).await {
                        progress.note(&format!(
                            "PyTorch SDPA cannot be measured here ({why}): the baseline is the first seed genome instead"
                        ));
                        gpu_ms = self.evaluate_baseline(None, progress).await?;
                    }
                }
                other => gpu_ms = self.evaluate_baseline(other, progress).await?,
            }
            times = stored(&self.store, self.id).await?;
        }
        Ok(Baseline {
            times: keys.iter().map(|k| times[k]).collect(),
            keys,
            gpu_ms,
        })
    }

    /// `import:FILE`, relative to the config's folder.
    async fn import_baseline(&self, file: &str, progress: &dyn Progress) -> Result<()> {
        let config = &self.context.config;
        let file = config.path.parent().unwrap_or(Path::new(".")).join(file);
        let imported = Imported::load(&file)?;
        let shapes = self.context.configured_shapes();
        let source = imported.source();
        let rows: Vec<(String, f64, String)> = imported
            .times_for(self.context.family.problem, &shapes, &file)?
            .into_iter()
            .map(|(k, t)| (k, t, source.clone()))
            .collect();
        if let (Some(d), Some(ours)) = (&imported.device, &self.device) {
            if d != ours {
                progress.note(&format!("warning: the baseline was measured on {d}, this GPU is {ours}: fitness compares across GPUs"));
            }
        }
        self.store.set_baselines(self.id, &rows).await?;
        Ok(())
    }

    /// `torch`: scripts/torch_sdpa_baseline.py (embedded) run with python3 on the run's
    /// first GPU, before any kernel of the run; its `default` backend's time per shape
    /// becomes the baseline. `Err`: why it could not run (the caller falls back).
    async fn torch_baseline(&self, progress: &dyn Progress) -> std::result::Result<(), String> {
        let problem = &self.context.config.problem;
        if problem != "sdpa_fwd" {
            return Err(format!(
                "problem {problem} has no PyTorch counterpart evo measures"
            ));
        }
        let Some(gpu) = self.first_gpu else {
            return Err("the replay evaluator runs no GPU".into());
        };
        let dir = tempfile::tempdir().map_err(|e| format!("no temporary folder: {e}"))?;
        let shapes = self.context.configured_shapes();
        let files = [
            (TORCH_SCRIPT.0, TORCH_SCRIPT.1.to_string()),
            (SDPA_BENCH.0, SDPA_BENCH.1.to_string()),
            ("shapes.toml", shapes_toml(&shapes)),
        ];
        for (name, text) in &files {
            std::fs::write(dir.path().join(name), text)
                .map_err(|e| format!("writing {name}: {e}"))?;
        }
        progress.note(&format!(
            "measuring PyTorch SDPA on GPU {gpu} for the baseline ({} shapes, scripts/torch_sdpa_baseline.py)",
            shapes.len()
        ));
        let out = dir.path().join("baseline.json");
        let mut command = std::process::Command::new("python3");
        command
            .arg(TORCH_SCRIPT.0)
            .arg("shapes.toml")
            .arg("--out")
            .arg(&out)
            .current_dir(dir.path())
            .env("CUDA_VISIBLE_DEVICES", gpu.to_string());
        let ran = tokio::task::spawn_blocking(move || {
            evo_eval::profile::output_within(&mut command, TORCH_TIMEOUT)
        })
        .await
        .map_err(|e| format!("the measuring task failed: {e}"))?;
        let output = match ran {
            Ok(o) => o,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err("python3 is not installed".into())
            }
            Err(e) => return Err(format!("python3 failed: {e}")),
        };
        tracing::info!(stdout = %String::from_utf8_lossy(&output.stdout), "torch baseline");
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no message");
            return Err(format!(
                "scripts/torch_sdpa_baseline.py exited with {}: {}",
                output.status,
                last.trim()
            ));
        }
        let imported = Imported::load(&out).map_err(|e| e.to_string())?;
        let times = imported
            .times_for(self.context.family.problem, &shapes, &out)
            .map_err(|e| e.to_string())?;
        let source = format!("torch: {}", imported.measured_by);
        let rows: Vec<(String, f64, String)> = times
            .into_iter()
            .map(|(k, t)| (k, t, source.clone()))
            .collect();
        progress.note(&format!(
            "baseline: {} on {}, {}",
            imported.measured_by,
            imported.device.as_deref().unwrap_or("this GPU"),
            rows.iter()
                .map(|(_, t, _)| format!("{t:.2}"))
                .collect::<Vec<_>>()
                .join(" / ")
                + " µs per shape"
        ));
        self.store
            .set_baselines(self.id, &rows)
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// `genome:K=V,...`, else the first seed, else the first valid genome: evaluated
    /// here, recorded with fitness 1. Returns the GPU time it took, ms.
    async fn evaluate_baseline(&self, spec: Option<&str>, progress: &dyn Progress) -> Result<f64> {
        let space = &self.context.space;
        let text = match spec {
            Some(s) => s
                .strip_prefix("genome:")
                .ok_or_else(|| {
                    refused!(
                        "[search] baseline must be `torch`, `genome:K=V,...` or `import:FILE`, not `{s}`"
                    )
                })?
                .to_string(),
            None => match self.seeds.first() {
                Some(g) => g.canonical(),
                None => space
                    .iter_valid()
                    .next()
                    .ok_or_else(|| refused!("the space has no valid genome"))?
                    .canonical(),
            },
        };
        let written = Genome::parse(&text).context(|| "baseline genome".into())?;
        let genome = space
            .complete(&written)
            .context(|| "baseline genome".into())?;
        if space.rejection(&genome).is_some() {
            refuse!("the baseline genome {text} violates a constraint");
        }
        let store = &self.store;
        // A baseline stored before a knob existed is stored under its own hash.
        let mut stored = store.candidate_by_hash(self.id, &genome.hash().0).await?;
        if stored.is_none() && written != genome {
            stored = store.candidate_by_hash(self.id, &written.hash().0).await?;
        }
        let id = match stored {
            Some(c) => c.id,
            None => {
                store
                    .insert_candidates(
                        self.id,
                        &[NewCandidate::new(genome.clone(), 0, Origin::Baseline)],
                    )
                    .await?[0]
            }
        };
        progress.note(&format!("evaluating the baseline genome {text}"));
        let never = std::sync::atomic::AtomicBool::new(false);
        let r = self
            .backend
            .evaluate(0, &genome, &never, None, None)
            .await
            .expect("not stopped");
        if r.status != Status::Evaluated {
            store
                .record_result(id, &result_row(&r, None), &measurements(&r))
                .await
                .ok();
            refuse!(
                "the baseline genome {text} is {}: {}",
                r.status.name(),
                r.detail
            );
        }
        let mut rows = Vec::new();
        for shape in &self.context.configured_shapes() {
            let key = shape_key(shape);
            let t = evo_core::median_on(&r.shapes, &key)
                .ok_or_else(|| refused!("the baseline genome has no time for shape {key}"))?;
            rows.push((key, t, format!("genome:{}", genome.hash())));
        }
        store.set_baselines(self.id, &rows).await?;
        store
            .record_result(id, &result_row(&r, Some(1.0)), &measurements(&r))
            .await?;
        Ok(r.gpu_ms)
    }
}

/// What [`rescore`] did.
pub struct Rescored {
    pub run: String,
    /// Where the new baseline came from.
    pub source: String,
    /// The new time of each configured shape.
    pub times: Vec<(String, f64)>,
    /// Candidates rescored, how many of them regressed, the best evaluated fitness.
    pub rescored: usize,
    pub regressed: usize,
    pub best: Option<f64>,
}

/// `evo baseline import FILE --run RUN`: replaces a run's baseline with imported
/// per-shape times and rescores every candidate that reached timing, in one
/// transaction. A resumed search then uses the new baseline.
pub async fn rescore(store: &Store, run: &str, file: &Path, db: &str) -> Result<Rescored> {
    let r = store
        .run(run)
        .await?
        .ok_or_else(|| refused!("no run `{run}` in {db}"))?;
    let config = crate::context::stored_config(&r)?;
    let problem = evo_kernels::problem(&config.problem)
        .ok_or_else(|| refused!("unknown problem `{}`", config.problem))?;
    let imported = Imported::load(file)?;
    let shapes = config
        .shapes
        .iter()
        .map(|s| problem.complete_shape(s).map_err(crate::RunError::Refused))
        .collect::<Result<Vec<_>>>()?;
    let times = imported.times_for(problem, &shapes, file)?;
    let keys: Vec<String> = times.iter().map(|(k, _)| k.clone()).collect();
    let baseline: Vec<f64> = times.iter().map(|(_, t)| *t).collect();
    let mut updates: Vec<(CandidateId, Status, Option<f64>)> = Vec::new();
    for c in store.candidates(r.id).await? {
        let Some(status) = c.status.filter(|s| s.has_fitness()) else {
            continue;
        };
        let ms = store.measurements(c.id).await?;
        let (status, fitness) = score(
            status,
            &baseline,
            &times_on(ms.iter().map(|m| &m.measured), &keys),
            &config.search,
        );
        updates.push((c.id, status, fitness));
    }
    let rows: Vec<(String, f64, String)> = times
        .iter()
        .map(|(k, t)| (k.clone(), *t, imported.source()))
        .collect();
    store.rebase(r.id, &rows, &updates).await?;
    Ok(Rescored {
        run: r.name,
        source: imported.source(),
        times,
        rescored: updates.len(),
        regressed: updates.iter().filter(|u| u.1 == Status::Regressed).count(),
        best: updates
            .iter()
            .filter(|u| u.1 == Status::Evaluated)
            .filter_map(|u| u.2)
            .fold(None::<f64>, |b, f| Some(b.map_or(f, |b| b.max(f)))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_reach_the_script_as_written() {
        let shape: Vars = [
            ("BATCH".to_string(), Value::Int(2)),
            ("CAUSAL".to_string(), Value::Bool(true)),
            ("DTYPE".to_string(), Value::Str("bf16".into())),
        ]
        .into_iter()
        .collect();
        #[derive(Deserialize)]
        struct Back {
            shapes: Vec<Vars>,
        }
        let back: Back = toml::from_str(&shapes_toml(&[shape.clone(), shape.clone()])).unwrap();
        assert_eq!(back.shapes, [shape.clone(), shape]);
    }

    /// A file with two times for one shape is refused (the fitness would be relative to
    /// whichever came first); one time per shape loads.
    #[test]
    fn a_shape_timed_twice_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("b.json");
        let write = |times: &[f64]| {
            let shapes: Vec<serde_json::Value> = times
                .iter()
                .map(|t| serde_json::json!({"shape": {"M": 64, "N": 32, "K": 16}, "median_us": t}))
                .collect();
            let doc = serde_json::json!({"format": FORMAT, "source": "test", "shapes": shapes});
            std::fs::write(&file, doc.to_string()).unwrap();
        };
        write(&[9.5]);
        assert_eq!(Imported::load(&file).unwrap().shapes.len(), 1);
        write(&[9.5, 1.0]);
        let e = Imported::load(&file).err().expect("refused").to_string();
        assert!(e.contains("shape #2 repeats shape #1"), "{e}");
    }
}
