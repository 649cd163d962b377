//! Tools run over one launch of a variant in a separate `evo run-once` process: the
//! sanitizer gate (compute-sanitizer memcheck, racecheck and synccheck on a small shape,
//! before a variant is reported best or exported, and in `evo check`) and the optional
//! profile gate (Nsight Compute counters). Each tool is skipped with a reason where it is
//! not installed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use evo_core::Vars;
use evo_kernels::Problem;
use serde::{Deserialize, Serialize};

use crate::pipeline::Candidate;
use crate::protocol::ShapeJob;

/// Counters read with `ncu`: tensor pipe, DRAM throughput, occupancy, duration.
pub const NCU_METRICS: &[&str] = &[
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "gpu__time_duration.sum",
];
/// Hopper's wgmma pipe, asked for separately: older ncu versions may not know it.
pub const NCU_HOPPER_METRICS: &[&str] =
    &["sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"];

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ToolReport {
    /// Metric name → (value, unit).
    Metrics {
        metrics: BTreeMap<String, (String, String)>,
    },
    /// compute-sanitizer's error count and its summary lines.
    Sanitizer {
        errors: u64,
        summary: Vec<String>,
    },
    Skipped {
        reason: String,
    },
    Failed {
        reason: String,
    },
}

/// A variant's kernels on one shape, as the evaluator launches them: what `evo run-once
/// --plan` reads (every kernel with its own arguments, tensor maps and scratch).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LaunchPlan {
    pub kernels: Vec<String>,
    pub shape: ShapeJob,
}

/// The tools of the sanitizer gate.
pub const SANITIZERS: [&str; 3] = ["memcheck", "racecheck", "synccheck"];

/// What the sanitizer gate found for one variant.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SanitizerReport {
    /// The shape it launched on.
    pub shape: Vars,
    pub tools: Vec<(String, ToolReport)>,
    /// Wall time of the three tools (run at once).
    pub seconds: f64,
}

impl SanitizerReport {
    /// The first finding (a tool reporting errors or hazards, or one that failed to run),
    /// in words with the tool's summary; `None` when every tool came back clean.
    pub fn finding(&self) -> Option<String> {
        self.tools.iter().find_map(|(tool, r)| match r {
            ToolReport::Sanitizer { errors, summary } if *errors > 0 => Some(format!(
                "compute-sanitizer {tool} reports {errors} error(s) on {}: {}",
                shape_text(&self.shape),
                summary.join(" | ")
            )),
            ToolReport::Failed { reason } => Some(format!(
                "compute-sanitizer {tool} could not judge the variant on {}: {reason}",
                shape_text(&self.shape)
            )),
            _ => None,
        })
    }

    /// Whether every tool was skipped (compute-sanitizer not installed).
    pub fn skipped(&self) -> bool {
        self.tools
            .iter()
            .all(|(_, r)| matches!(r, ToolReport::Skipped { .. }))
    }
}

fn shape_text(v: &Vars) -> String {
    evo_core::Genome::from_vars(v.clone()).canonical()
}

/// The shape the sanitizer gate launches on: the cheapest of the candidate's shapes that
/// still spans several tiles (at least 10⁶ FLOPs: ragged edge shapes such as
/// (1, 2, 77, 130) qualify), else the most expensive one.
pub fn sanitizer_shape(problem: &dyn Problem, c: &Candidate) -> Option<usize> {
    let flops = |i: usize| problem.flops(&c.shapes[i].vars);
    let mut order: Vec<usize> = (0..c.shapes.len()).collect();
    order.sort_by(|a, b| flops(*a).total_cmp(&flops(*b)));
    order
        .iter()
        .copied()
        .find(|&i| flops(i) >= 1e6)
        .or_else(|| order.last().copied())
}

/// Runs the sanitizer gate: `evo run-once` (`exe`) launching the candidate once on
/// [`sanitizer_shape`] under memcheck, racecheck and synccheck on GPU `gpu`.
pub fn sanitize(
    exe: &Path,
    problem: &dyn Problem,
    c: &Candidate,
    gpu: u32,
) -> Result<SanitizerReport, String> {
    let index = sanitizer_shape(problem, c).ok_or("the variant has no shape to launch on")?;
    let s = &c.shapes[index];
    let dir = tempfile_dir()?;
    let source = dir.join("variant.cu");
    let plan = dir.join("plan.json");
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
    };
    write(&source, &c.source)?;
    let launch_plan = LaunchPlan {
        kernels: c.kernels.clone(),
        shape: ShapeJob {
            vars: s.vars.clone(),
            launches: s.launches.clone(),
            timed: false,
            contend_us: None,
            args: s.args.clone(),
            scratch: s.scratch.clone(),
        },
    };
    write(
        &plan,
        &serde_json::to_string(&launch_plan).map_err(|e| e.to_string())?,
    )?;
    let command: Vec<String> = vec![
        exe.display().to_string(),
        "run-once".into(),
        "--problem".into(),
        problem.name().into(),
        "--source".into(),
        source.display().to_string(),
        "--shape".into(),
        shape_text(&s.vars),
        "--plan".into(),
        plan.display().to_string(),
        "--gpu".into(),
        gpu.to_string(),
    ];
    let began = Instant::now();
    // The three tools at once: each is a process that mostly instruments on the CPU, and
    // the GPU (kept idle from the workers meanwhile) runs their few launches side by side.
    let tools = std::thread::scope(|scope| {
        let running: Vec<_> = SANITIZERS
            .iter()
            .map(|t| {
                let command = &command;
                scope.spawn(move || (t.to_string(), sanitizer(t, command)))
            })
            .collect();
        running
            .into_iter()
            .map(|h| h.join().expect("a sanitizer thread"))
            .collect()
    });
    let _ = std::fs::remove_dir_all(&dir);
    Ok(SanitizerReport {
        shape: s.vars.clone(),
        tools,
        seconds: began.elapsed().as_secs_f64(),
    })
}

/// The sanitizer gate's word on a whole variant (every specialization), as a run stores
/// it (a `sanitizer` profile of the candidate) and an export reads it back.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum SanitizerVerdict {
    /// Every tool came back clean on every specialization.
    Clean { reports: Vec<SanitizerReport> },
    /// A tool found something (or failed on the variant): the first finding in words.
    Finding {
        finding: String,
        reports: Vec<SanitizerReport>,
    },
    /// The gate could not run here (no compute-sanitizer, a file that could not be
    /// written): why. Says nothing about the variant.
    NotRun { reason: String },
}

impl SanitizerVerdict {
    /// The profile tool name a run stores the verdict under.
    pub const PROFILE_TOOL: &'static str = "sanitizer";

    /// compute-sanitizer's three tools on every specialization of one variant, all at
    /// once (`exe run-once` on GPU `gpu`); the first finding in specialization order.
    pub fn of(exe: &Path, problem: &dyn Problem, candidates: &[Candidate], gpu: u32) -> Self {
        let results: Vec<Result<SanitizerReport, String>> = std::thread::scope(|scope| {
            let running: Vec<_> = candidates
                .iter()
                .map(|c| scope.spawn(move || sanitize(exe, problem, c, gpu)))
                .collect();
            running
                .into_iter()
                .map(|h| h.join().expect("a sanitizer thread"))
                .collect()
        });
        let mut reports = Vec::new();
        for result in results {
            match result {
                Err(reason) => return SanitizerVerdict::NotRun { reason },
                Ok(r) if r.skipped() => {
                    return SanitizerVerdict::NotRun {
                        reason: "compute-sanitizer was not found on PATH or in /usr/local/cuda/bin"
                            .into(),
                    }
                }
                Ok(r) => {
                    let finding = r.finding();
                    reports.push(r);
                    if let Some(finding) = finding {
                        return SanitizerVerdict::Finding { finding, reports };
                    }
                }
            }
        }
        SanitizerVerdict::Clean { reports }
    }

    /// Wall time of the gate, seconds: the specializations ran at once, so the longest.
    pub fn seconds(&self) -> f64 {
        match self {
            SanitizerVerdict::Clean { reports } | SanitizerVerdict::Finding { reports, .. } => {
                reports.iter().map(|r| r.seconds).fold(0.0, f64::max)
            }
            SanitizerVerdict::NotRun { .. } => 0.0,
        }
    }
}

fn tempfile_dir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!(
        "evo-sanitize-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Finds a CUDA tool on PATH or in the CUDA installation.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    evo_gpu::locate::which(name).or_else(|| {
        ["/usr/local/cuda/bin", "/opt/nvidia/nsight-compute"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file())
    })
}

/// Splits one CSV line with double-quoted fields.
pub fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    fields.push(cur);
    fields
}

/// Metric rows of `ncu --csv` output for kernels named `kernel`.
pub fn parse_ncu_csv(text: &str, kernel: &str) -> BTreeMap<String, (String, String)> {
    let mut header: Option<Vec<String>> = None;
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with('"')) {
        let f = csv_fields(line);
        match &header {
            None => header = Some(f),
            Some(h) => {
                let col = |name: &str| h.iter().position(|x| x == name).and_then(|i| f.get(i));
                let (Some(k), Some(name), Some(unit), Some(value)) = (
                    col("Kernel Name"),
                    col("Metric Name"),
                    col("Metric Unit"),
                    col("Metric Value"),
                ) else {
                    continue;
                };
                if k == kernel {
                    out.insert(name.clone(), (value.clone(), unit.clone()));
                }
            }
        }
    }
    out
}

/// Runs `ncu` on `command` (which launches the kernel once) for kernels named `kernel`.
pub fn ncu(command: &[String], kernel: &str) -> ToolReport {
    let Some(tool) = find_tool("ncu") else {
        return ToolReport::Skipped {
            reason: "ncu (Nsight Compute) not found on PATH or in /usr/local/cuda/bin".into(),
        };
    };
    let run = |metrics: &[&str]| {
        Command::new(&tool)
            .args([
                "--csv",
                "--target-processes",
                "all",
                "--kernel-name",
                kernel,
                "--launch-count",
                "1",
                "--metrics",
            ])
            .arg(metrics.join(","))
            .args(command)
            .output()
    };
    let all: Vec<&str> = NCU_METRICS
        .iter()
        .chain(NCU_HOPPER_METRICS)
        .copied()
        .collect();
    let mut out = run(&all);
    if out.as_ref().map(|o| !o.status.success()).unwrap_or(false) {
        out = run(NCU_METRICS);
    }
    match out {
        Err(e) => ToolReport::Failed {
            reason: format!("cannot run ncu: {e}"),
        },
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout);
            let metrics = parse_ncu_csv(&text, kernel);
            if metrics.is_empty() {
                let err = String::from_utf8_lossy(&o.stderr);
                ToolReport::Failed {
                    reason: format!(
                        "ncu reported no metrics ({}): {}",
                        o.status,
                        err.lines()
                            .chain(text.lines())
                            .filter(|l| l.contains("ERR") || l.contains("rror"))
                            .take(5)
                            .collect::<Vec<_>>()
                            .join(" | ")
                    ),
                }
            } else {
                ToolReport::Metrics { metrics }
            }
        }
    }
}

/// Runs `compute-sanitizer --tool <tool>` (memcheck, racecheck, initcheck, synccheck).
pub fn sanitizer(tool: &str, command: &[String]) -> ToolReport {
    let Some(bin) = find_tool("compute-sanitizer") else {
        return ToolReport::Skipped {
            reason: "compute-sanitizer not found on PATH or in /usr/local/cuda/bin".into(),
        };
    };
    match output_within(
        Command::new(&bin)
            .args(["--tool", tool, "--error-exitcode", "99"])
            .args(command)
            .env(evo_gpu::runtime::SYNC_ALLOC_ENV, "1"),
        SANITIZER_TIMEOUT,
    ) {
        Err(e) => ToolReport::Failed {
            reason: format!("cannot run compute-sanitizer: {e}"),
        },
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout).to_string()
                + &String::from_utf8_lossy(&o.stderr);
            let errors = sanitizer_errors(&text);
            match errors {
                Some(errors) => ToolReport::Sanitizer {
                    errors,
                    summary: sanitizer_summary(&text),
                },
                None => ToolReport::Failed {
                    reason: format!(
                        "no ERROR SUMMARY from compute-sanitizer ({}): {}",
                        o.status,
                        text.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
                    ),
                },
            }
        }
    }
}

/// The error count in compute-sanitizer's output: `ERROR SUMMARY: N errors` (memcheck,
/// initcheck, synccheck) or `RACECHECK SUMMARY: H hazards displayed (E errors, W warnings)`.
/// How long one compute-sanitizer tool may run on one launch before it is stopped (and
/// the variant fails the gate): the gate's shape is small, so this only ends hangs.
pub const SANITIZER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Runs `command` to completion with its output captured, killing it after `limit`
/// (an error that says so).
pub fn output_within(
    command: &mut Command,
    limit: std::time::Duration,
) -> std::io::Result<std::process::Output> {
    use std::io::Read;
    use wait_timeout::ChildExt;
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    // Read both pipes while waiting: a full pipe would stall the tool.
    fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            bytes
        })
    }
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let status = match child.wait_timeout(limit)? {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("it ran past {} s and was stopped", limit.as_secs()),
            ));
        }
    };
    Ok(std::process::Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// The lines of a compute-sanitizer report worth keeping with a verdict: what it found and
/// where (its banner and blank `=========` lines left out), at most 12, then the summary.
pub fn sanitizer_summary(text: &str) -> Vec<String> {
    let tool_lines = text.lines().filter_map(|l| {
        let rest = l.trim_start().strip_prefix("=========")?.trim();
        (!rest.is_empty() && !rest.starts_with("COMPUTE-SANITIZER")).then(|| rest.to_string())
    });
    let (summary, findings): (Vec<String>, Vec<String>) =
        tool_lines.partition(|l| l.contains("SUMMARY"));
    findings.into_iter().take(12).chain(summary).collect()
}

pub fn sanitizer_errors(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        if let Some(rest) = l.split("ERROR SUMMARY:").nth(1) {
            return rest.split_whitespace().next()?.parse().ok();
        }
        let rest = l.split("RACECHECK SUMMARY:").nth(1)?;
        let inner = rest.split('(').nth(1)?;
        inner.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_tool_that_hangs_is_stopped() {
        let t = std::time::Instant::now();
        let e = output_within(
            Command::new("sleep").arg("30"),
            std::time::Duration::from_millis(200),
        )
        .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(t.elapsed() < std::time::Duration::from_secs(10));
        let o = output_within(
            Command::new("sh").args(["-c", "echo out; echo err >&2"]),
            std::time::Duration::from_secs(30),
        )
        .unwrap();
        assert!(o.status.success());
        assert_eq!(
            (o.stdout.as_slice(), o.stderr.as_slice()),
            (&b"out\n"[..], &b"err\n"[..])
        );
    }

    #[test]
    fn sanitizer_reports_keep_what_was_found_and_where() {
        let text = "========= COMPUTE-SANITIZER\n\
            ========= Error: Race reported between Write access at evo_sdpa+0x1a40 in variant.cu:212\n\
            =========     and Read access at evo_sdpa+0x2b10 in variant.cu:301 [128 hazards]\n\
            =========\n\
            ========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n";
        let s = sanitizer_summary(text);
        assert_eq!(s.len(), 3, "{s:?}");
        assert!(s[0].starts_with("Error: Race reported") && s[0].contains("variant.cu:212"));
        assert!(s[2].starts_with("RACECHECK SUMMARY"));
        assert_eq!(sanitizer_errors(text), Some(1));
    }

    #[test]
    fn sanitizer_summaries() {
        use super::sanitizer_errors;
        assert_eq!(
            sanitizer_errors("========= ERROR SUMMARY: 7 errors"),
            Some(7)
        );
        assert_eq!(
            sanitizer_errors(
                "========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warnings)"
            ),
            Some(2)
        );
        assert_eq!(sanitizer_errors("========= COMPUTE-SANITIZER"), None);
    }

    use super::*;

    #[test]
    fn ncu_csv() {
        let text = r#"==PROF== Connected to process 12
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","12","evo","h","gemm","1","13","(256, 1, 1)","(8, 8, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","41.52"
"0","12","evo","h","gemm","1","13","(256, 1, 1)","(8, 8, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","27.1"
"1","12","evo","h","gemm_reference_f16","1","13","(16, 16, 1)","(8, 8, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","99"
"#;
        let m = parse_ncu_csv(text, "gemm");
        assert_eq!(
            m["dram__throughput.avg.pct_of_peak_sustained_elapsed"],
            ("41.52".into(), "%".into())
        );
        // Only the named kernel's rows, not the reference's.
        assert_eq!(m["gpu__time_duration.sum"].0, "27.1");
        assert_eq!(csv_fields(r#""a,b","c""d",e"#), vec!["a,b", "c\"d", "e"]);
    }
}
