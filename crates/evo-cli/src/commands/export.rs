//! `evo export RUN|ID --out DIR`: evo-artifact writes the artifact ([`evo_artifact::export()`]);
//! this prints its notes and what it wrote (or, with `--json`, the manifest).

use std::process::ExitCode;

use anyhow::Result;
use evo_artifact::{ExportOptions, MANIFEST};

use crate::output::outln;

pub fn run(o: ExportOptions, json: bool) -> Result<ExitCode> {
    let rt = crate::setup::runtime()?;
    let evo_artifact::Exported { manifest, notes } = rt.block_on(evo_artifact::export(&o))?;
    if json {
        crate::output::print_json(&manifest)?;
    } else {
        for n in &notes {
            eprintln!("note: {n}");
        }
        outln!(
            "exported run{} {} ({} variant{}) to {}",
            if manifest.sources.len() == 1 { "" } else { "s" },
            manifest
                .sources
                .iter()
                .map(|s| s.run.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            manifest.variants.len(),
            if manifest.variants.len() == 1 {
                ""
            } else {
                "s"
            },
            o.out.display()
        )?;
        let problem = evo_kernels::problem(&manifest.problem).expect("known");
        for v in &manifest.variants {
            let timed: Vec<String> = v
                .shapes
                .iter()
                .filter(|s| s.timed)
                .map(|s| {
                    format!(
                        "{} {:.2} us",
                        problem.shape_text(&s.shape),
                        s.median_us.unwrap_or(f64::NAN)
                    )
                })
                .collect();
            outln!(
                "  {:<18} {} candidate {} of run {} [{}] {}: {}",
                v.name,
                v.family,
                v.candidate_id,
                v.run,
                v.genome_hash,
                v.status,
                timed.join("; ")
            )?;
        }
        if manifest.dispatch.mode == "per_shape" {
            for e in &manifest.dispatch.table {
                let deferred = e.defer.map_or(String::new(), |b| {
                    format!(
                        " (evo_kernel.py: PyTorch's SDPA, {:.2} us against the variant's {:.2} us)",
                        b.baseline_us, b.variant_us
                    )
                });
                outln!("  dispatch {} -> {}{deferred}", e.key_text(), e.variant)?;
            }
        }
        outln!(
            "  files: {} {}",
            MANIFEST,
            manifest.files.keys().cloned().collect::<Vec<_>>().join(" ")
        )?;
        outln!("  check it: evo verify {}", o.out.display())?;
        outln!(
            "  time it against PyTorch SDPA: python3 {}/bench.py",
            o.out.display()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
