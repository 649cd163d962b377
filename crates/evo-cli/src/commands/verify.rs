//! `evo verify DIR`: is this artifact intact, and does it still pass on this GPU? The
//! steps are evo-artifact's ([`evo_artifact::verify`]); this prints each one's result
//! before the next (or the report as JSON at the end). Exit 1 when a file or a variant
//! fails; without a GPU it stops after the checks that need none, with exit code 3.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use evo_artifact::manifest::{FileCheck, Manifest};
use evo_artifact::verify::{self, GpuHere, Report};
use evo_kernels::Problem;

use crate::output::{closed_ok, exit_code, outln, print_json, table};

pub fn run(dir: &Path, templates: Option<&Path>, json: bool) -> Result<ExitCode> {
    let (m, mut report) = verify::check_hashes(dir)?;
    let bad = report.bad_files().len();
    let printed = if json {
        Ok(())
    } else {
        print_files(dir, &m, &report)
    };
    if bad > 0 {
        // The verdict is known: a reader that closes stdout early does not change it.
        let printed = printed.and_then(|()| {
            if json {
                print_json(&report)
            } else {
                outln!(
                    "hashes: {} of {} files do not match manifest.json: the artifact was modified; its kernels are not run",
                    bad,
                    report.files.len()
                )
            }
        });
        return exit_code(printed, ExitCode::from(1));
    }
    // From here on a closed stdout only stops the printing: every check still runs, and
    // the exit code is their verdict (`evo verify DIR | head -1` must not pass a bad one).
    closed_ok(printed)?;
    if !json {
        closed_ok(outln!("hashes: ok ({} files)", report.files.len()))?;
    }

    let consistent = verify::check_consistency(dir, &m, templates, &mut report)?;
    let problem = consistent.problem;
    if !json {
        closed_ok(outln!(
            "genomes: every variant's genome matches its hash and renders to its kernel source ({} variant{})",
            m.variants.len(),
            if m.variants.len() == 1 { "" } else { "s" }
        ))?;
        closed_ok(outln!(
            "manifest: consistent with the CUBINs and its launch rule; to check: {}",
            report.plan.join("; ")
        ))?;
        if m.dispatch.mode == "per_shape" {
            let marked = m.dispatch.deferred();
            closed_ok(outln!(
                "dispatch: {}",
                match m.dispatch.min_speedup {
                    Some(min) if min > 0.0 => format!(
                        "marks agree with the manifest's times: {marked} of {} shapes go to PyTorch's SDPA in evo_kernel.py (their run measured evo's variant less than {min}x faster than it)",
                        m.dispatch.table.len()
                    ),
                    Some(_) =>
                        "exported with --keep-slower: evo_kernel.py runs evo's kernels on every shape"
                            .into(),
                    None => "no defer marks (exported before they existed)".into(),
                }
            ))?;
        }
    }

    // The GPU part.
    let (gpus, info) = match crate::setup::gpus("0") {
        Ok(g) => g,
        Err(e) => {
            if json {
                report.ok = false;
                closed_ok(print_json(&report))?;
            }
            return Err(
                e.context("hashes are ok, but the correctness and timing checks cannot run here")
            );
        }
    };
    let here = GpuHere::new(&m, gpus, info, &mut report)?;
    if !json {
        closed_ok(outln!("GPU: {}", report.gpu.as_deref().unwrap_or("")))?;
        for d in &report.differences {
            closed_ok(outln!("  DIFFERENT {d}"))?;
        }
    }
    let rt = crate::setup::runtime()?;
    rt.block_on(verify::run_gates(&m, consistent, here, &mut report))?;
    let all_ok = report.ok;
    let printed = if json {
        print_json(&report)
    } else {
        print_result(&report, problem)
    };
    let code = if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    exit_code(printed, code)
}

/// The artifact, and its files that fail their hash (or are not part of it).
fn print_files(dir: &Path, m: &Manifest, report: &Report) -> Result<()> {
    outln!(
        "artifact {}: {} from run{} {} ({} variant{}), schema {}",
        dir.display(),
        m.problem,
        if m.sources.len() == 1 { "" } else { "s" },
        m.sources
            .iter()
            .map(|s| format!("`{}` ({})", s.run, s.family))
            .collect::<Vec<_>>()
            .join(", "),
        m.variants.len(),
        if m.variants.len() == 1 { "" } else { "s" },
        m.schema
    )?;
    for (name, c) in report.bad_files() {
        match c {
            FileCheck::Missing => outln!("  MISSING   {name}")?,
            FileCheck::Modified { expected, actual } => {
                outln!("  MODIFIED  {name}: sha256 {actual}, the manifest says {expected}")?
            }
            FileCheck::Ok => {}
        }
    }
    for name in &report.extra_files {
        outln!("  note: {name} is not part of the artifact")?;
    }
    Ok(())
}

/// Each variant's result on this GPU, the times and the verdict.
fn print_result(report: &Report, problem: &dyn Problem) -> Result<()> {
    let all_ok = report.ok;
    for v in &report.variants {
        outln!(
            "{}: {}{}{}",
            v.variant,
            if v.status == "evaluated" {
                "correct"
            } else {
                &v.status
            },
            if v.detail.is_empty() {
                String::new()
            } else {
                format!(" ({})", v.detail.lines().next().unwrap_or(""))
            },
            match v.rebuilt_identical {
                Some(true) => "; NVRTC here rebuilds the identical CUBIN",
                Some(false) =>
                    "; NVRTC here builds a different CUBIN from the source (the artifact's was run)",
                None => "",
            }
        )?;
    }
    let mut t = table(&[
        "variant",
        "shape",
        "max abs err",
        "rel L2",
        "now µs",
        "manifest µs",
        "now / manifest",
    ]);
    for s in &report.shapes {
        let f = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.2}"));
        t.add_row(vec![
            s.variant.clone(),
            problem.shape_text(&s.shape),
            s.max_abs_err.map_or("-".into(), |x| format!("{x:.2e}")),
            s.rel_l2.map_or("-".into(), |x| format!("{x:.2e}")),
            f(s.median_us),
            f(s.manifest_us),
            s.ratio.map_or("-".into(), |x| format!("{x:.3}")),
        ]);
    }
    outln!("{t}")?;
    let slower = report
        .shapes
        .iter()
        .filter(|s| s.ratio.is_some_and(|r| r > 1.10))
        .count();
    if slower > 0 {
        outln!(
            "note: {slower} shape(s) more than 10% slower than the manifest's times{} (times are reported, not judged)",
            if report.differences.is_empty() { " on the same GPU, driver and NVRTC" } else { "; see the differences above" }
        )?;
    }
    outln!(
        "{}",
        if all_ok {
            "verify: ok (every variant passed every correctness check on this GPU)"
        } else {
            "verify: FAILED (a variant did not pass the gates on this GPU)"
        }
    )?;
    Ok(())
}
