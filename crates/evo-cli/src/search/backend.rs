//! Where a search gets its results: real GPU evaluation through the gates, or a recorded
//! landscape (the replay evaluator).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use evo_core::{Genome, Space, Vars};
use evo_eval::landscape::Landscape;
use evo_eval::pipeline::{family_candidates, Evaluator, Verdict};
use evo_eval::{Gate, Status};
use evo_kernels::{Family, Specializations};
use evo_store::NewMeasurement;
use tokio::sync::Semaphore;

/// The outcome of one genome over every specialization.
#[derive(Clone, Debug)]
pub struct GenomeResult {
    pub status: Status,
    pub gate: Option<Gate>,
    pub detail: String,
    /// One measurement per shape, as the database stores them.
    pub shapes: Vec<NewMeasurement>,
    pub resources: serde_json::Value,
    pub source_key: Option<String>,
    /// Wall time of the whole evaluation (compile included), ms.
    pub eval_ms: f64,
    /// Time the GPU worker spent on it, ms.
    pub gpu_ms: f64,
}

pub struct GpuBackend {
    pub evaluator: Arc<Evaluator>,
    pub family: Arc<Family>,
    pub space: Arc<Space>,
    pub specs: Arc<Specializations>,
    pub edges: Arc<Vec<Vars>>,
    /// Compilations in flight at once (CPU threads).
    pub compile_limit: Arc<Semaphore>,
    /// One permit per GPU worker: taken after compiling, before evaluating.
    pub gpu_slots: Arc<Semaphore>,
    pub salt: u64,
}

pub enum Backend {
    Gpu(GpuBackend),
    Replay { landscape: Landscape, file: String },
}

fn from_verdicts(verdicts: Vec<Verdict>, started: Instant) -> GenomeResult {
    let failed = verdicts.iter().find(|v| v.status != Status::Evaluated);
    let (status, gate, detail) = match failed {
        Some(v) => (
            v.status,
            v.gate,
            format!("{}: {}", v.label.split('@').nth(1).unwrap_or(""), v.detail),
        ),
        None => (Status::Evaluated, None, String::new()),
    };
    let mut shapes = Vec::new();
    let mut gpu_ms = 0.0;
    for v in &verdicts {
        if let Some(r) = &v.result {
            gpu_ms += r.elapsed_ms;
            for s in &r.shapes {
                let worst = s.worst().cloned().unwrap_or_default();
                shapes.push(NewMeasurement {
                    shape: s.vars.clone(),
                    median_us: s.timing.as_ref().map(|t| t.median_us),
                    p20_us: s.timing.as_ref().map(|t| t.p20_us),
                    p80_us: s.timing.as_ref().map(|t| t.p80_us),
                    samples: s
                        .timing
                        .as_ref()
                        .map(|t| t.samples_us.clone())
                        .unwrap_or_default(),
                    tflops: s.timing.as_ref().map(|t| t.tflops),
                    peak_fraction: s.timing.as_ref().and_then(|t| t.peak_fraction),
                    max_abs_err: Some(worst.max_abs),
                    rel_l2: Some(worst.rel_l2),
                });
            }
        }
    }
    let resources = serde_json::json!(verdicts
        .iter()
        .map(|v| serde_json::json!({
            "specialization": v.label.split('@').nth(1).unwrap_or(""),
            "kernels": v.static_kernels,
            "compile": v.compile,
            "seeds": v.seeds,
        }))
        .collect::<Vec<_>>());
    GenomeResult {
        status,
        gate,
        detail,
        shapes,
        resources,
        source_key: verdicts
            .iter()
            .find_map(|v| v.compile.as_ref().map(|c| c.key.clone())),
        eval_ms: started.elapsed().as_secs_f64() * 1e3,
        gpu_ms,
    }
}

impl Backend {
    pub fn label(&self) -> String {
        match self {
            Backend::Gpu(_) => "gpu".into(),
            Backend::Replay { file, .. } => format!("replay:{file}"),
        }
    }

    /// Evaluates one genome; `None` when `stop` was set before it reached the GPU (it
    /// stays pending). Compilation runs ahead; a GPU slot is taken only after it, and
    /// `stop` is checked then, so Ctrl-C waits for the evaluations on the GPUs, not for
    /// everything compiled ahead.
    pub async fn evaluate(
        &self,
        id: u64,
        genome: &Genome,
        stop: &AtomicBool,
    ) -> Option<GenomeResult> {
        let started = Instant::now();
        Some(match self {
            Backend::Replay { landscape, .. } => {
                // Tests slow the replay down to kill a search mid-generation.
                if let Some(ms) = std::env::var("EVO_REPLAY_DELAY_MS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                {
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                }
                if stop.load(Ordering::SeqCst) {
                    return None;
                }
                replay(landscape, genome, started)
            }
            Backend::Gpu(b) => {
                let candidates =
                    match family_candidates(&b.family, &b.space, &b.specs, genome, &b.edges) {
                        Ok(c) => c,
                        Err(e) => {
                            return Some(GenomeResult {
                                status: Status::RenderFailed,
                                gate: Some(Gate::Render),
                                detail: e,
                                shapes: vec![],
                                resources: serde_json::Value::Null,
                                source_key: None,
                                eval_ms: started.elapsed().as_secs_f64() * 1e3,
                                gpu_ms: 0.0,
                            })
                        }
                    };
                let mut verdicts = Vec::new();
                for (i, c) in candidates.into_iter().enumerate() {
                    let permit = b
                        .compile_limit
                        .clone()
                        .acquire_owned()
                        .await
                        .expect("semaphore open");
                    let (ev, c2) = (b.evaluator.clone(), c.clone());
                    // Compile and read the SASS before taking a GPU slot: on an H200 the
                    // cuobjdump run inside the slot left the GPU idle half the time.
                    let (compiled, sass) = tokio::task::spawn_blocking(move || {
                        let compiled = ev.compile(&c2);
                        let sass = compiled.as_ref().ok().and_then(|c| ev.sass_of(c));
                        (compiled, sass)
                    })
                    .await
                    .expect("compile task");
                    drop(permit);
                    let v = match compiled {
                        Ok(compiled) => {
                            let _slot = b.gpu_slots.acquire().await.expect("semaphore open");
                            if stop.load(Ordering::SeqCst) {
                                return None;
                            }
                            b.evaluator
                                .evaluate_with_sass(c, compiled, sass, id * 16 + i as u64, b.salt)
                                .await
                        }
                        Err(e) => Verdict {
                            label: c.label.clone(),
                            status: Status::CompileFailed,
                            gate: Some(Gate::Compile),
                            detail: e.to_string(),
                            compile: None,
                            static_kernels: vec![],
                            result: None,
                            seeds: vec![],
                        },
                    };
                    let stop = v.status != Status::Evaluated;
                    verdicts.push(v);
                    if stop {
                        break; // the genome has failed; its other specializations need no GPU time
                    }
                }
                from_verdicts(verdicts, started)
            }
        })
    }
}

fn replay(landscape: &Landscape, genome: &Genome, started: Instant) -> GenomeResult {
    let Some(p) = landscape.get(&genome.canonical()) else {
        return GenomeResult {
            status: Status::LaunchFailed,
            gate: None,
            detail: "replay: this genome is not in the recorded landscape".into(),
            shapes: vec![],
            resources: serde_json::Value::Null,
            source_key: None,
            eval_ms: started.elapsed().as_secs_f64() * 1e3,
            gpu_ms: 0.0,
        };
    };
    GenomeResult {
        status: p.status,
        gate: p.gate,
        detail: format!("replay: {}", p.detail),
        shapes: p.shapes.clone(),
        resources: serde_json::json!({"replayed": true}),
        source_key: None,
        eval_ms: started.elapsed().as_secs_f64() * 1e3,
        gpu_ms: p.eval_ms.unwrap_or(0.0),
    }
}
