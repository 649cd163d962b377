//! The frozen artifact's `manifest.json` (schema `evo-artifact-1`): what was exported,
//! from which run, how to launch it, what it measured, and the SHA-256 of every other
//! file. `evo export` writes it, `evo verify` and `evo_kernel.py` read it.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use evo_core::{LaunchDims, Vars};
use evo_gpu::resources::KernelResources;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The schema this evo writes and reads. A new incompatible layout gets a new number.
pub const SCHEMA: &str = "evo-artifact-1";

/// The file every artifact has; it is not in its own `files` list.
pub const MANIFEST: &str = "manifest.json";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`SCHEMA`].
    pub schema: String,
    /// The evo that exported it.
    pub evo_version: String,
    /// Seconds since the Unix epoch.
    pub exported_unix: u64,
    pub problem: String,
    pub family: String,
    /// `best` (one genome, every specialization) or `per_shape` (best genome per shape).
    pub mode: String,
    pub source: Provenance,
    /// The GPU the measurements come from.
    pub device: Option<String>,
    /// CUDA version of the driver the search ran on, e.g. `CUDA 13.0`.
    pub driver: Option<String>,
    /// NVRTC that compiled the exported files.
    pub nvrtc_version: String,
    /// NVRTC the search used.
    pub search_nvrtc_version: Option<String>,
    /// `--gpu-architecture` of the CUBINs, e.g. `sm_90a`.
    pub arch: String,
    pub compile: CompileInfo,
    pub abi: Abi,
    /// Names of the compile-time variables (one kernel per assignment).
    pub spec_vars: Vec<String>,
    /// Names of the run-time shape variables.
    pub shape_vars: Vec<String>,
    pub variants: Vec<Variant>,
    pub dispatch: Dispatch,
    /// File name (relative to the artifact folder) → lowercase hex SHA-256, for every
    /// file except `manifest.json` itself.
    pub files: BTreeMap<String, String>,
}

/// Where the artifact came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    pub run: String,
    pub run_id: i64,
    /// `gpu` (only real measurements are exported).
    pub evaluator: String,
    /// The search config as the run stored it: shapes, tolerances, timing settings.
    /// `evo verify` runs the gates with these settings.
    pub config_toml: String,
    /// The run's baseline per shape (canonical shape text → µs), when it had one.
    pub baseline_us: BTreeMap<String, f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompileInfo {
    /// The config's options (`[compile] options`).
    pub options: Vec<String>,
    /// `[compile] max_registers` (0: none).
    pub max_registers: u32,
    /// Every option NVRTC got (evo adds the architecture, the include path and `-v`).
    pub nvrtc_options: Vec<String>,
}

/// The kernel's signature as the problem defines it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Abi {
    /// The `extern "C"` symbol every variant defines.
    pub entry: String,
    /// The problem's ABI text (signature and meaning of every argument).
    pub text: String,
    /// Parameters in order.
    pub params: Vec<AbiParam>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AbiParam {
    pub name: String,
    /// C type as written in the signature (`const T*`, `int`, `long long`, `float`).
    pub ctype: String,
    /// `pointer`, `i32`, `i64` or `f32`: how a caller packs it.
    pub kind: String,
}

/// One compiled kernel: a genome in one specialization.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    /// Unique in the artifact; names its files.
    pub name: String,
    pub candidate_id: i64,
    pub genome: String,
    pub genome_hash: String,
    /// `evaluated` or `regressed` (slower than the run's baseline, but correct).
    pub status: String,
    pub fitness: Option<f64>,
    pub specialization: Vars,
    pub source_file: String,
    pub ptx_file: String,
    pub cubin_file: String,
    /// The source name NVRTC was given (as in the search; `-lineinfo` records it).
    pub nvrtc_name: String,
    pub launch: LaunchRuleText,
    /// Per kernel, from ptxas.
    pub resources: Vec<KernelResources>,
    /// Tensor-core instructions in the SASS, by opcode (when cuobjdump was found).
    pub tensor_ops: Option<BTreeMap<String, u64>>,
    /// Compile cache key of the exported compile.
    pub compile_key: String,
    /// Whether that key equals the one the search recorded: `true` proves the source and
    /// options are the measured ones; `false` means the template, the options or the
    /// CUDA include path differ from the search's machine (see the export's note).
    pub compile_key_matches_search: Option<bool>,
    /// The measurements of this genome on the shapes of this specialization.
    pub shapes: Vec<ShapeRecord>,
}

/// The family's launch rule with the genome's compile-time values bound: expressions
/// over `constants` and the shape variables, using only integers, `+ - * / %`,
/// parentheses and `ceil_div`, `round_up`, `min`, `max` (`/` is integer division of
/// non-negative numbers), so C, C++ and Python evaluate them alike.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchRuleText {
    pub kernel: String,
    pub grid: [String; 3],
    pub block: [String; 3],
    pub shared_bytes: String,
    pub constants: BTreeMap<String, i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeRecord {
    /// Complete shape (specialization and run-time variables).
    pub shape: Vars,
    /// Timed shapes have times; edge shapes were only checked for correctness.
    pub timed: bool,
    /// The launch rule's value on this shape.
    pub launch: LaunchDims,
    pub median_us: Option<f64>,
    pub p20_us: Option<f64>,
    pub p80_us: Option<f64>,
    pub tflops: Option<f64>,
    pub max_abs_err: Option<f64>,
    pub rel_l2: Option<f64>,
}

/// How a caller picks a variant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dispatch {
    /// `specialization` or `per_shape`.
    pub mode: String,
    pub rule: String,
    pub table: Vec<DispatchEntry>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DispatchEntry {
    pub specialization: Vars,
    /// Run-time variables (per-shape mode only).
    pub shape: Option<Vars>,
    pub variant: String,
}

pub const RULE_SPECIALIZATION: &str = "Pick the variant whose specialization (every spec \
variable, e.g. DTYPE from the tensors' dtype, HEAD_DIM from their last dimension, CAUSAL \
from the call) equals the call's; there is at most one. A call with no matching \
specialization is refused.";

pub const RULE_PER_SHAPE: &str = "Among the entries whose specialization equals the \
call's (none: refused), take the entry whose shape equals the call's run-time \
variables exactly; if none does, the nearest: the smallest sum over the run-time \
variables of |log2(call value / entry value)|, ties to the earlier entry.";

impl Manifest {
    pub fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading {} (is {} an artifact written by `evo export`?)",
                path.display(),
                dir.display()
            )
        })?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        match value.get("schema").and_then(|s| s.as_str()) {
            Some(SCHEMA) => {}
            Some(other) => bail!(
                "{} has schema `{other}`; this evo reads `{SCHEMA}` (use the evo that exported it)",
                path.display()
            ),
            None => bail!("{} has no `schema` field", path.display()),
        }
        serde_json::from_value(value).with_context(|| format!("parsing {}", path.display()))
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// How one listed file compares with its recorded hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum FileCheck {
    Ok,
    Missing,
    Modified { expected: String, actual: String },
}

/// Each listed file with its check, and the folder's files the manifest does not name.
pub type FileChecks = (Vec<(String, FileCheck)>, Vec<String>);

/// Checks every file of `manifest.files`; also lists files in the folder that the
/// manifest does not name (Python's `__pycache__` is ignored).
pub fn check_files(dir: &Path, m: &Manifest) -> Result<FileChecks> {
    let mut out = Vec::new();
    for (name, expected) in &m.files {
        if name.contains("..") || name.starts_with('/') {
            bail!("manifest names a file outside the artifact: {name}");
        }
        let check = match std::fs::read(dir.join(name)) {
            Ok(bytes) => {
                let actual = sha256_hex(&bytes);
                if &actual == expected {
                    FileCheck::Ok
                } else {
                    FileCheck::Modified {
                        expected: expected.clone(),
                        actual,
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => FileCheck::Missing,
            Err(e) => return Err(anyhow!(e).context(format!("reading {}", name))),
        };
        out.push((name.clone(), check));
    }
    let mut extra = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let name = entry?.file_name().to_string_lossy().to_string();
        if name != MANIFEST && name != "__pycache__" && !m.files.contains_key(&name) {
            extra.push(name);
        }
    }
    extra.sort();
    Ok((out, extra))
}

/// The parameters of an ABI text's first line-spanning signature
/// `extern "C" __global__ void NAME(TYPE name, ...)`.
pub fn abi_params(abi: &str) -> Result<Vec<AbiParam>, String> {
    let open = abi.find('(').ok_or("the ABI text has no `(`")?;
    let close = abi[open..]
        .find(')')
        .map(|i| open + i)
        .ok_or("the ABI text has no `)`")?;
    let mut params = Vec::new();
    for part in abi[open + 1..close].split(',') {
        let part = part.split_whitespace().collect::<Vec<_>>().join(" ");
        let split = part
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .ok_or_else(|| format!("cannot read parameter `{part}`"))?;
        let (ctype, name) = (
            part[..=split].trim().to_string(),
            part[split + 1..].to_string(),
        );
        if name.is_empty() || ctype.is_empty() {
            return Err(format!("cannot read parameter `{part}`"));
        }
        let kind = if ctype.ends_with('*') {
            "pointer"
        } else {
            match ctype.as_str() {
                "int" => "i32",
                "long long" | "int64_t" => "i64",
                "float" => "f32",
                other => {
                    return Err(format!(
                        "parameter `{name}` has type `{other}`, which the artifact cannot pack"
                    ))
                }
            }
        };
        params.push(AbiParam {
            name,
            ctype,
            kind: kind.into(),
        });
    }
    Ok(params)
}

/// Checks that a launch expression uses only what C, C++ and Python evaluate alike
/// (see [`LaunchRuleText`]).
pub fn portable_expr(source: &str) -> Result<(), String> {
    const FUNCTIONS: [&str; 4] = ["ceil_div", "round_up", "min", "max"];
    let mut chars = source.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_alphabetic() || c == '_' {
            let mut word = String::from(c);
            while let Some(&n) = chars.peek() {
                if n.is_ascii_alphanumeric() || n == '_' {
                    word.push(n);
                    chars.next();
                } else {
                    break;
                }
            }
            let mut rest = chars.clone();
            while rest.peek().is_some_and(|c| c.is_whitespace()) {
                rest.next();
            }
            if rest.peek() == Some(&'(') && !FUNCTIONS.contains(&word.as_str()) {
                return Err(format!("function `{word}` in `{source}`"));
            }
            if word == "true" || word == "false" || word == "if" {
                return Err(format!("`{word}` in `{source}`"));
            }
        } else if !(c.is_ascii_digit()
            || c.is_whitespace()
            || matches!(c, '+' | '-' | '*' | '/' | '%' | '(' | ')' | ','))
        {
            return Err(format!("`{c}` in `{source}`"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_params_of_every_problem() {
        let sdpa = abi_params(evo_kernels::problem("sdpa_fwd").unwrap().abi()).unwrap();
        assert_eq!(sdpa.len(), 21);
        assert_eq!(sdpa[0].name, "q");
        assert_eq!(sdpa[0].ctype, "const T*");
        assert_eq!(sdpa[0].kind, "pointer");
        assert_eq!(sdpa[3].name, "o");
        assert_eq!(sdpa[4].name, "batch");
        assert_eq!(sdpa[4].kind, "i32");
        assert_eq!(sdpa[8].name, "q_batch_stride");
        assert_eq!(sdpa[8].kind, "i64");
        assert_eq!(sdpa[20].name, "softmax_scale");
        assert_eq!(sdpa[20].kind, "f32");
        let gemm = abi_params(evo_kernels::problem("gemm").unwrap().abi()).unwrap();
        let names: Vec<&str> = gemm.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "m", "n", "k", "lda", "ldb", "ldc"]);
        assert!(abi_params("void f(double x)")
            .unwrap_err()
            .contains("double"));
    }

    #[test]
    fn portable_expressions() {
        assert!(portable_expr("ceil_div(SEQ_Q, BLOCK_M)").is_ok());
        assert!(portable_expr("(NUM_WARPS + 1) * 32 % 7 / 2").is_ok());
        assert!(portable_expr("if(A, 1, 2)").is_err());
        assert!(portable_expr("A && B").is_err());
        assert!(portable_expr("A == 2").is_err());
        assert!(portable_expr("log2(A)").is_err());
    }
}
