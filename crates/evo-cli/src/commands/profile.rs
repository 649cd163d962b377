//! `evo profile` (the optional profile gate) and `evo run-once`, the single launch the
//! profilers wrap.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{anyhow, Context, Result};
use evo_core::config::{inherit_spec, SearchConfig};
use evo_core::{Genome, Target, Vars};
use evo_eval::profile::{self, LaunchPlan, ToolReport};
use evo_eval::protocol::ShapeJob;
use evo_gpu::runtime::Gpu;
use evo_gpu::{CompileCache, CompileRequest, Compiler};
use evo_kernels::harness::InputKind;
use evo_kernels::{handwritten, Specializations};
use serde::Serialize;

use crate::output::{exit_code, outln, print_json, table};
use crate::{setup, UsageError};

pub struct Options<'a> {
    pub file: Option<&'a Path>,
    pub problem: Option<&'a str>,
    pub config: Option<&'a Path>,
    pub genome: Option<&'a str>,
    pub shape: Option<&'a str>,
    pub launch: Option<&'a str>,
    pub tools: &'a str,
    pub gpu: u32,
    pub json: bool,
}

#[derive(Serialize)]
struct Report {
    kernel: String,
    shape: String,
    launch: String,
    /// The `evo run-once` command line that launches the kernel once (what the tools wrap).
    run_once: Vec<String>,
    tools: Vec<(String, ToolReport)>,
}

fn complete(problem: &dyn evo_kernels::Problem, text: &str) -> Result<Vars> {
    complete_with(problem, &Vars::new(), text)
}

/// `--shape` over `spec` (a config's `[spec]`: its DTYPE and CAUSAL unless the shape names
/// them, as the config's own shapes inherit them), completed by the problem.
fn complete_with(problem: &dyn evo_kernels::Problem, spec: &Vars, text: &str) -> Result<Vars> {
    let shape = evo_run::parse_flag_list("--shape", text)?;
    problem
        .complete_shape(&inherit_spec(spec, shape.as_vars()))
        .map_err(|e| anyhow!("--shape: {e}"))
}

/// What `--tools` may name.
const TOOLS: [&str; 5] = ["ncu", "memcheck", "racecheck", "initcheck", "synccheck"];

pub fn run(templates: Option<&Path>, o: Options) -> Result<ExitCode> {
    // `--tools` before anything runs (or a GPU is looked for): a usage error, whatever
    // this machine has.
    // `none`: no tool, only the source, the plan and the `evo run-once` line.
    let mut asked: Vec<&str> = o
        .tools
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect();
    if asked == ["none"] {
        asked.clear();
    } else {
        if let Some(other) = asked.iter().find(|t| !TOOLS.contains(t)) {
            crate::usage!(
                "--tools: unknown tool `{other}`; give some of {}, or none",
                TOOLS.join(", ")
            );
        }
        if asked.is_empty() {
            crate::usage!(
                "--tools names no tool; give some of {}, or none",
                TOOLS.join(", ")
            );
        }
    }
    setup::gpus(&o.gpu.to_string())?;
    // What to launch: a source file, a problem, a shape and a launch rule.
    let (problem, source_path, shape, launch): (
        &'static dyn evo_kernels::Problem,
        std::path::PathBuf,
        Vars,
        Launch,
    ) = match (o.file, o.config, o.genome) {
        (Some(file), None, None) => {
            let name = o
                .problem
                .ok_or_else(|| UsageError("--problem is required with a file".into()))?;
            let problem = evo_kernels::problem(name)
                .ok_or_else(|| UsageError(format!("unknown problem `{name}`")))?;
            let source = std::fs::read_to_string(file)
                .with_context(|| format!("reading {}", file.display()))?;
            let launch = o
                .launch
                .map(str::to_string)
                .or(handwritten::header(&source).launch)
                .ok_or_else(|| {
                    anyhow!(
                        "{}: no launch rule (`// evo-launch:` or --launch)",
                        file.display()
                    )
                })?;
            let shape = complete(
                problem,
                o.shape
                    .ok_or_else(|| UsageError("--shape is required with a file".into()))?,
            )?;
            (problem, file.to_path_buf(), shape, Launch::Rule(launch))
        }
        (None, Some(cfg), Some(genome)) => {
            let mut config = SearchConfig::load(cfg)?;
            let root = evo_run::templates_root(templates, &config)?;
            let (_, info) = setup::gpus(&o.gpu.to_string())?;
            let d = &info.devices[o.gpu as usize];
            let target = Target::from_arch(&Target::arch_for_capability(
                d.compute_capability.0,
                d.compute_capability.1,
            ))?;
            let family = evo_run::context::load_family(&root, &mut config, &target)?;
            let problem = family.problem;
            let shape = match o.shape {
                Some(s) => complete_with(problem, &config.spec, s)?,
                None => problem
                    .complete_shape(&config.shapes[0])
                    .map_err(|e| anyhow!(e))?,
            };
            let specs = Specializations::new(problem, target, std::slice::from_ref(&shape))
                .map_err(|e| anyhow!(e))?;
            let space = family.space(specs.contexts())?;
            let g = evo_run::parse_flag_list("--genome", genome)?;
            let g = space.complete(&g)?;
            let source = family.render(&space, &g, 0)?;
            let vars = space.vars(&g, 0)?;
            let dims = family.launch_dims(&vars, &shape)?;
            // Every kernel of the variant with its own arguments and scratch, as the
            // evaluator launches them.
            let plan = LaunchPlan {
                kernels: dims.iter().map(|(k, _)| k.clone()).collect(),
                shape: ShapeJob {
                    vars: shape.clone(),
                    launches: dims.iter().map(|(_, d)| *d).collect(),
                    timed: false,
                    contend_us: None,
                    args: family.launch_args(&vars, &shape).map_err(|e| anyhow!(e))?,
                    scratch: family
                        .scratch_specs(&vars, &shape)
                        .map_err(|e| anyhow!(e))?,
                },
            };
            let path = std::env::temp_dir().join(format!("evo-profile-{}.cu", g.hash()));
            std::fs::write(&path, source)?;
            let plan_path = path.with_extension("plan.json");
            std::fs::write(&plan_path, serde_json::to_string(&plan)?)?;
            let launch = dims
                .iter()
                .map(|(k, d)| {
                    format!(
                        "{k}: grid = {}, {}, {}; block = {}, {}, {}; shared_bytes = {}",
                        d.grid[0],
                        d.grid[1],
                        d.grid[2],
                        d.block[0],
                        d.block[1],
                        d.block[2],
                        d.shared_bytes
                    )
                })
                .collect::<Vec<_>>()
                .join(" | ");
            (problem, path, shape, Launch::Plan(plan_path, launch))
        }
        _ => crate::usage!("give a kernel file with --problem, or -c CONFIG with -g GENOME"),
    };
    let shape_text = Genome::from_vars(shape.clone()).canonical();
    let exe = std::env::current_exe()?;
    let mut command: Vec<String> = vec![
        exe.display().to_string(),
        "run-once".into(),
        "--problem".into(),
        problem.name().into(),
        "--source".into(),
        source_path.display().to_string(),
        "--shape".into(),
        shape_text.clone(),
        "--gpu".into(),
        o.gpu.to_string(),
    ];
    let launch = match launch {
        Launch::Rule(rule) => {
            command.extend(["--launch".to_string(), rule.clone()]);
            rule
        }
        Launch::Plan(path, text) => {
            command.extend(["--plan".to_string(), path.display().to_string()]);
            text
        }
    };
    let kernel = problem.entry();
    let mut tools = Vec::new();
    for tool in asked {
        // The compute-sanitizer tools; `asked` holds only names of TOOLS.
        let report = match tool {
            "ncu" => profile::ncu(&command, kernel),
            _ => profile::sanitizer(tool, &command),
        };
        tools.push((tool.to_string(), report));
    }
    let report = Report {
        kernel: source_path.display().to_string(),
        shape: shape_text,
        launch,
        run_once: command,
        tools,
    };
    let clean = report.tools.iter().all(|(_, r)| match r {
        ToolReport::Sanitizer { errors, .. } => *errors == 0,
        ToolReport::Failed { .. } => false,
        _ => true,
    });
    let printed = if o.json {
        print_json(&report)
    } else {
        print_human(&report)
    };
    let code = if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    exit_code(printed, code)
}

fn print_human(report: &Report) -> Result<()> {
    outln!("{} on {} ({})", report.kernel, report.shape, report.launch)?;
    if report.tools.is_empty() {
        // (Quoted for a shell; an argument with a NUL byte, which none has, would be left as is.)
        let line = shlex::try_join(report.run_once.iter().map(String::as_str))
            .unwrap_or_else(|_| report.run_once.join(" "));
        outln!("launch it once with: {line}")?;
        return Ok(());
    }
    let mut t = table(&["tool", "result"]);
    for (tool, r) in &report.tools {
        let text = match r {
            ToolReport::Metrics { metrics } => metrics
                .iter()
                .map(|(k, (v, u))| format!("{k} = {v} {u}"))
                .collect::<Vec<_>>()
                .join("\n"),
            ToolReport::Sanitizer { errors, summary } => {
                format!("{errors} errors\n{}", summary.join("\n"))
            }
            ToolReport::Skipped { reason } => format!("skipped: {reason}"),
            ToolReport::Failed { reason } => format!("FAILED: {reason}"),
        };
        t.add_row(vec![tool.clone(), text]);
    }
    outln!("{t}")?;
    Ok(())
}

/// How `evo run-once` launches: one kernel with the problem's ABI by a launch rule, or a
/// family variant's plan (every kernel with its arguments and scratch).
enum Launch {
    Rule(String),
    /// The plan's file and its launches as text.
    Plan(std::path::PathBuf, String),
}

/// Compiles `source` for the GPU, launches it once on random inputs (every kernel of the
/// plan in order, with its arguments, tensor maps and scratch; or one kernel with the
/// problem's ABI by `launch`), and exits.
pub fn run_once(
    problem: &str,
    source: &Path,
    shape: &str,
    launch: Option<&str>,
    plan: Option<&Path>,
    gpu: u32,
) -> Result<ExitCode> {
    let problem = evo_kernels::problem(problem)
        .ok_or_else(|| UsageError(format!("unknown problem `{problem}`")))?;
    let shape = complete(problem, shape)?;
    let plan = match (launch, plan) {
        (Some(launch), None) => {
            let rule =
                handwritten::parse_launch(problem, launch).map_err(|e| anyhow!("--launch: {e}"))?;
            LaunchPlan {
                kernels: vec![rule.kernel.clone()],
                shape: ShapeJob {
                    vars: shape.clone(),
                    launches: vec![rule.eval(&shape)?],
                    timed: false,
                    contend_us: None,
                    args: vec![],
                    scratch: vec![],
                },
            }
        }
        (None, Some(path)) => serde_json::from_str(
            &std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?,
        )
        .with_context(|| format!("{} is not a launch plan", path.display()))?,
        _ => crate::usage!("give --launch or --plan"),
    };
    let g = Gpu::open(gpu as i32)?;
    let (major, minor) = g.info.compute_capability;
    let compiler = Compiler::new(
        &Target::arch_for_capability(major, minor),
        &["-std=c++17".to_string(), "-lineinfo".to_string()],
        0,
        Some(CompileCache::new(CompileCache::default_dir())),
    )?;
    let compiled = compiler.compile(&CompileRequest {
        name: source.display().to_string(),
        source: std::fs::read_to_string(source)?,
    })?;
    let cubin = compiled
        .cubin
        .filter(|_| compiled.success)
        .ok_or_else(|| anyhow!("compile failed:\n{}", compiled.log))?;
    let module = g.load_module(&cubin)?;
    let mut functions = Vec::new();
    for (kernel, dims) in plan.kernels.iter().zip(&plan.shape.launches) {
        let f = module.function(kernel)?;
        f.set_max_dynamic_smem(dims.shared_bytes)?;
        functions.push(f);
    }
    // The plain call (contiguous tensors, default scalars).
    let call = problem.default_call(&shape);
    let inputs = problem.generate(&shape, &call, InputKind::Random, 1);
    let bufs = inputs
        .iter()
        .map(|t| g.alloc(t.bytes.len()))
        .collect::<Result<Vec<_>, _>>()?;
    for (b, t) in bufs.iter().zip(&inputs) {
        g.upload(b, &t.bytes)?;
    }
    let out_spec = problem.output(&shape);
    let out = g.alloc(out_spec.len * out_spec.elem.size())?;
    let scratch = plan
        .shape
        .scratch
        .iter()
        .map(|t| g.alloc(t.len * t.elem.size()))
        .collect::<Result<Vec<_>, _>>()?;
    let ptrs: Vec<u64> = bufs.iter().map(|b| b.ptr()).collect();
    let scratch_ptrs: Vec<u64> = scratch.iter().map(|b| b.ptr()).collect();
    let pointers = evo_eval::worker::CallPointers {
        inputs: &ptrs,
        output: out.ptr(),
        scratch: &scratch_ptrs,
    };
    let abi = problem.call_args(&shape, &call);
    for (i, (f, dims)) in functions.iter().zip(&plan.shape.launches).enumerate() {
        let slots = match plan.shape.args.get(i) {
            Some(own) => evo_kernels::bind_abi(own, &abi).map_err(|e| anyhow!(e))?,
            None => abi.clone(),
        };
        let args = evo_eval::worker::bind_args(&slots, &pointers).map_err(|e| anyhow!(e))?;
        g.launch(f, dims, &args)?;
    }
    g.synchronize()?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use evo_core::Value;

    use super::*;

    /// A `--shape` given with a config takes the config's `[spec]` values it does not name
    /// (a causal bf16 config profiles causal bf16 kernels), and its own where it names them.
    #[test]
    fn a_shape_inherits_the_config_s_spec() {
        let sdpa = evo_kernels::problem("sdpa_fwd").unwrap();
        let spec = Vars::from([
            ("CAUSAL".to_string(), Value::Bool(true)),
            ("DTYPE".to_string(), Value::Str("bf16".into())),
        ]);
        let dims = "BATCH=1,HEADS=2,SEQ_Q=77,SEQ_KV=77,HEAD_DIM=64";
        let shape = complete_with(sdpa, &spec, dims).unwrap();
        assert_eq!(shape["CAUSAL"], Value::Bool(true));
        assert_eq!(shape["DTYPE"], Value::Str("bf16".into()));
        assert_eq!(shape["SEQ_Q"], Value::Int(77));
        let named = complete_with(sdpa, &spec, &format!("{dims},CAUSAL=false")).unwrap();
        assert_eq!(named["CAUSAL"], Value::Bool(false));
        assert_eq!(named["DTYPE"], Value::Str("bf16".into()));
        // Without a config: the problem's defaults.
        assert_eq!(complete(sdpa, dims).unwrap()["CAUSAL"], Value::Bool(false));
    }
}
