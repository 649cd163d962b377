//! Imported baselines: per-shape times measured outside evo (e.g. PyTorch SDPA on the
//! same GPU, by scripts/torch_sdpa_baseline.py), in the `evo-baseline-1` format:
//!
//! ```json
//! {"format": "evo-baseline-1", "source": "torch 2.11 sdpa (auto)", "device": "NVIDIA H200",
//!  "shapes": [{"shape": {"BATCH": 1, "HEADS": 8, "SEQ_Q": 512, "SEQ_KV": 512,
//!              "HEAD_DIM": 64, "CAUSAL": false, "DTYPE": "f16"}, "median_us": 9.9}]}
//! ```

use std::path::Path;

use anyhow::{bail, Context, Result};
use evo_core::{Value, Vars};
use serde::Deserialize;

pub const FORMAT: &str = "evo-baseline-1";

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

pub struct Imported {
    pub source: String,
    pub device: Option<String>,
    pub shapes: Vec<(Vars, f64)>,
}

pub fn load(path: &Path) -> Result<Imported> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading baseline {}", path.display()))?;
    let f: File = serde_json::from_str(&text)
        .with_context(|| format!("baseline {} is not {FORMAT} JSON", path.display()))?;
    if f.format != FORMAT {
        bail!(
            "baseline {} has format `{}`; evo reads `{FORMAT}`",
            path.display(),
            f.format
        );
    }
    let mut shapes = Vec::new();
    for (i, e) in f.shapes.into_iter().enumerate() {
        if !(e.median_us.is_finite() && e.median_us > 0.0) {
            bail!(
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
                other => bail!(
                    "baseline {}: shape #{}: `{k}` = {other} is not an integer, boolean or string",
                    path.display(),
                    i + 1
                ),
            };
            vars.insert(k, value);
        }
        shapes.push((vars, e.median_us));
    }
    Ok(Imported {
        source: format!("import:{} ({})", path.display(), f.source),
        device: f.device,
        shapes,
    })
}
