//! `evo export-landscape`: a run's measurements as a landscape file for the replay
//! evaluator.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{anyhow, Context, Result};
use evo_eval::landscape::{Landscape, Point, ShapePoint, FORMAT};
use evo_store::Store;

pub fn export(run: &str, out: &Path, db: &str) -> Result<ExitCode> {
    let rt = crate::setup::runtime()?;
    rt.block_on(async {
        let store = Store::open(db)
            .await
            .with_context(|| format!("opening {db}"))?;
        let r = store
            .run(run)
            .await?
            .ok_or_else(|| anyhow!("no run `{run}` in {db}"))?;
        let mut landscape = Landscape {
            format: FORMAT.into(),
            problem: r.problem.clone(),
            family: r.family.clone(),
            device: r.device.clone().unwrap_or_default(),
            source: format!("run {} ({})", r.name, r.evaluator),
            points: Default::default(),
        };
        for c in store.candidates(r.id).await? {
            let Some(status) = c.status.clone() else {
                continue;
            };
            let shapes = store
                .measurements(c.id)
                .await?
                .into_iter()
                .map(|m| ShapePoint {
                    shape: m.shape,
                    median_us: m.median_us,
                    p20_us: m.p20_us,
                    p80_us: m.p80_us,
                    tflops: m.tflops,
                    max_abs_err: m.max_abs_err,
                    rel_l2: m.rel_l2,
                })
                .collect();
            // A regressed genome was evaluated; whether it regresses depends on the
            // baseline of the run that replays it.
            let status = if status == "regressed" {
                "evaluated".to_string()
            } else {
                status
            };
            landscape.points.insert(
                c.genome.clone(),
                Point {
                    status,
                    gate: c.gate.clone(),
                    detail: c.detail.clone().unwrap_or_default(),
                    shapes,
                    eval_ms: c.eval_ms,
                },
            );
        }
        landscape
            .save(out)
            .with_context(|| format!("writing {}", out.display()))?;
        println!(
            "{} genomes of run {} written to {}",
            landscape.points.len(),
            r.name,
            out.display()
        );
        Ok(ExitCode::SUCCESS)
    })
}
