//! The frozen artifact's `manifest.json` (schema `evo-artifact-3`): what was exported,
//! from which runs, how to launch it (every kernel of a variant in order, with its own
//! arguments: ABI parameters, scratch buffers, integer expressions, TMA tensor maps),
//! what it measured, and the SHA-256 of every other file. `evo export` writes it,
//! `evo verify` and `evo_kernel.py` read it. No path of the exporting machine is in it:
//! include directories are named by role ([`CUDA_INCLUDE`]).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use evo_core::launch::LaunchRule;
use evo_core::{Expr, Genome, LaunchDims, Value, Vars};
use evo_gpu::resources::KernelResources;
use evo_kernels::harness::{dtype, ArgSlot, ElemType, MappedBuffer};
pub use evo_kernels::problem::{abi_params, AbiParam};
use evo_kernels::{ArgRef, Family, ScratchRule};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The schema this evo writes and reads. A new incompatible layout gets a new number.
pub const SCHEMA: &str = "evo-artifact-3";

/// The file every artifact has; it is not in its own `files` list.
pub const MANIFEST: &str = "manifest.json";

/// The files `evo export` generates from the manifest (besides the variants' and the
/// fixed ones of [`crate::files::fixed_files`]): the C++ header and the README.
pub const KERNEL_H: &str = "kernel.h";
pub const README_MD: &str = "README.md";

/// Stands for the CUDA include folder of the compiling machine in `nvrtc_options`
/// (`-I{cuda_include}`): a role, not a path of the machine that exported.
pub const CUDA_INCLUDE: &str = "{cuda_include}";

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
    /// `best` (one genome, every specialization) or `per_shape` (the fastest genome per
    /// shape, over every run given).
    pub mode: String,
    /// The runs the variants come from (one, or several with `per_shape`).
    pub sources: Vec<Source>,
    /// The GPU the measurements come from (every source's).
    pub device: Option<String>,
    /// CUDA version of the driver the searches ran on, e.g. `CUDA 13.0`.
    pub driver: Option<String>,
    /// NVRTC that compiled the exported files.
    pub nvrtc_version: String,
    /// `--gpu-architecture` of the CUBINs, e.g. `sm_90a`.
    pub arch: String,
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

/// A run the artifact's variants come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub run: String,
    pub run_id: i64,
    /// `gpu` (only real measurements are exported).
    pub evaluator: String,
    pub family: String,
    /// The search config as the run stored it: shapes, tolerances, timing settings.
    /// `evo verify` runs the gates with these settings and re-renders the variants with
    /// its specializations.
    pub config_toml: String,
    /// The run's baseline per shape (canonical shape text → µs), when it had one.
    pub baseline_us: BTreeMap<String, f64>,
    /// What measured each baseline (canonical shape text → [`BASELINE_TORCH`],
    /// [`BASELINE_IMPORT`] or [`BASELINE_GENOME`]): only PyTorch's ([`PYTORCH_BASELINES`])
    /// mark a dispatch entry [`DispatchEntry::defer`], since that is what a deferred call
    /// runs instead. Absent in manifests written before marks existed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub baseline_kind: BTreeMap<String, String>,
    /// NVRTC the search used.
    pub search_nvrtc_version: Option<String>,
    pub compile: CompileInfo,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompileInfo {
    /// The config's options (`[compile] options`).
    pub options: Vec<String>,
    /// `[compile] max_registers` (0: none).
    pub max_registers: u32,
    /// Every option NVRTC got (evo adds the architecture, the include folder and `-v`),
    /// the include folder as `-I{cuda_include}` ([`CUDA_INCLUDE`]).
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

/// One compiled kernel: a genome in one specialization.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    /// Unique in the artifact; names its files.
    pub name: String,
    /// The run it comes from (a `sources` entry) and that run's family.
    pub run: String,
    pub family: String,
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
    /// The variant's kernels in launch order (one stream; the gates timed them as one).
    pub launches: Vec<LaunchRuleText>,
    /// The genome's compile-time integers that launch rules, arguments and scratch
    /// lengths read (the other variables are the shape's).
    pub constants: BTreeMap<String, i64>,
    /// Device buffers the launches share: the caller allocates them per call (their
    /// contents on entry do not matter: the gates poisoned them with NaN).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scratch: Vec<ScratchText>,
    /// Tensors (of `q`, `k`, `v`, `o`: the ABI's pointer names) the family's kernels
    /// read or write only in the contiguous layout (e.g. through TMA tensor maps): the
    /// gates tested them contiguous, so a caller passes them so (the PyTorch binding
    /// copies); every other tensor may have any strides the ABI allows.
    pub contiguous: Vec<String>,
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
    /// The sanitizer gate (compute-sanitizer memcheck, racecheck and synccheck on every
    /// specialization of the genome): `clean`, or `not run: <why>` for an export with
    /// `--unsanitized`. Absent in artifacts written before the gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sanitizer: Option<String>,
    /// The measurements of this genome on the shapes of this specialization.
    pub shapes: Vec<ShapeRecord>,
}

/// One kernel's launch rule: expressions over the variant's `constants` and the shape
/// variables, using only integers, `+ - * / %`, parentheses and `ceil_div`,
/// `round_up`, `min`, `max` (`/` is integer division of non-negative numbers), so C,
/// C++ and Python evaluate them alike.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchRuleText {
    pub kernel: String,
    pub grid: [String; 3],
    pub block: [String; 3],
    pub shared_bytes: String,
    /// The kernel's own argument list; absent: the ABI's parameters in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<LaunchArg>>,
}

/// One argument of a kernel with its own argument list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum LaunchArg {
    /// The ABI parameter of this name (`abi.params`), with the call's value.
    Param(String),
    /// The device address of the scratch buffer of this name.
    Scratch(String),
    /// An `int` from an integer expression (as in launch rules).
    I32(String),
    /// A `long long` from an integer expression.
    I64(String),
    /// A 128-byte `CUtensorMap` passed by value (`const __grid_constant__`).
    TensorMap(TensorMapText),
}

/// A tiled TMA tensor map (`cuTensorMapEncodeTiled`) over the tensor of an ABI pointer
/// parameter (`param`) or a scratch buffer (`scratch`; exactly one of the two is given),
/// viewed as a tensor of `dims` elements (innermost first; byte strides are the running
/// products of the dimensions, or the `strides` parameters times the element size), read
/// in `box_dims` boxes, with element type the tensor's, no interleave, element strides 1,
/// `swizzle_bytes` shared-memory swizzle (0, 32, 64, 128), L2 promotion 128 bytes,
/// out-of-bounds elements read as zero.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorMapText {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    /// Absent in manifests written before maps over scratch existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch: Option<String>,
    /// The tensor's element type (`f16`, `bf16`, `f32`, `e4m3`, `u8`).
    pub elem: String,
    pub dims: Vec<String>,
    pub box_dims: Vec<String>,
    pub swizzle_bytes: u32,
    /// The ABI integer parameters (in elements) that give the strides of the dimensions after
    /// the first, the call's own; empty (and absent in older manifests): contiguous.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub strides: Vec<String>,
}

impl TensorMapText {
    /// The buffer the map views and its name (an ABI pointer parameter or a scratch buffer);
    /// an error unless exactly one of `param` and `scratch` is given.
    pub fn buffer(&self) -> Result<(MappedBuffer, &str), String> {
        match (&self.param, &self.scratch) {
            (Some(param), None) => Ok((MappedBuffer::Input, param)),
            (None, Some(scratch)) => Ok((MappedBuffer::Scratch, scratch)),
            (p, s) => Err(format!(
                "a tensor map names the tensor it views as `param` or `scratch`, one of the two (it has param {p:?}, scratch {s:?})"
            )),
        }
    }
}

/// A scratch buffer: `len` (an expression) elements of `elem` (`f16`, `bf16`, `f32`,
/// `e4m3`, `u8`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScratchText {
    pub name: String,
    pub elem: String,
    pub len: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeRecord {
    /// Complete shape (specialization and run-time variables).
    pub shape: Vars,
    /// Timed shapes have times; edge shapes were only checked for correctness.
    pub timed: bool,
    /// Each launch rule's value on this shape, in launch order.
    pub launches: Vec<LaunchDims>,
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
    /// Per-shape mode: the speedup over PyTorch's SDPA a variant must have measured on an
    /// entry's shape for `evo_kernel.py` to run it there; every entry below it is marked
    /// [`DispatchEntry::defer`] ([`Manifest::deferral`]). [`DEFAULT_MIN_SPEEDUP`] unless
    /// the export said otherwise, 0 for `--keep-slower` (no entry is marked). `evo verify`
    /// holds the marks to it. Absent in specialization mode (one variant serves every
    /// shape: nothing is marked) and in manifests written before marks existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_speedup: Option<f64>,
    pub table: Vec<DispatchEntry>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DispatchEntry {
    pub specialization: Vars,
    /// Run-time variables (per-shape mode only).
    pub shape: Option<Vars>,
    pub variant: String,
    /// Per-shape mode: the variant's run measured it less than [`Dispatch::min_speedup`]
    /// times faster than PyTorch's SDPA on this shape, or slower ([`Manifest::deferral`]
    /// gives the mark the manifest's numbers call for). `evo_kernel.py` sends the calls
    /// this entry is chosen for to PyTorch's SDPA (fallback reason `slower`); `kernel.h`,
    /// with no SDPA to fall back to, keeps the variant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defer: Option<Deferral>,
}

/// The two times behind a [`DispatchEntry::defer`] mark, in µs: the variant's median on
/// the entry's shape (its `shapes` record) and its run's PyTorch baseline there
/// ([`Source::baseline_us`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deferral {
    pub variant_us: f64,
    pub baseline_us: f64,
}

impl Deferral {
    /// evo's speedup over PyTorch's SDPA on the entry's shape (below 1: slower).
    pub fn speedup(&self) -> f64 {
        self.baseline_us / self.variant_us
    }
}

/// [`Dispatch::min_speedup`] of a per-shape export that names none: evo's kernel replaces
/// PyTorch's SDPA in `evo_kernel.py` only where its search measured it at least 5% faster.
/// A smaller lead in the search's CUDA-graph times did not hold in a user's eager loop: at
/// (4,16,4096,128) f16 a variant 1.01x faster than cuDNN under graphs ran 0.94-0.97x in
/// eager loops on an H100 (docs/RESULTS.md, sessions 17 and 18), the eager-over-graph
/// excess of the power-bound long kernels differing by up to 5 points between them.
pub const DEFAULT_MIN_SPEEDUP: f64 = 1.05;

/// [`Source::baseline_kind`]: PyTorch's SDPA timed when the run started (`[search]
/// baseline = "torch"`).
pub const BASELINE_TORCH: &str = "torch";
/// [`Source::baseline_kind`]: times `evo baseline import` read from a file (what
/// scripts/torch_sdpa_baseline.py writes: PyTorch's SDPA measured outside evo).
pub const BASELINE_IMPORT: &str = "import";
/// [`Source::baseline_kind`]: a genome of the run's family (`[search] baseline =
/// "genome:..."`, or the first seed where PyTorch could not be timed).
pub const BASELINE_GENOME: &str = "genome";

/// The baseline kinds that time PyTorch's SDPA, the call a marked entry defers to; a
/// faster genome baseline says nothing about PyTorch and marks nothing.
pub const PYTORCH_BASELINES: [&str; 2] = [BASELINE_TORCH, BASELINE_IMPORT];

impl Dispatch {
    /// How many entries are marked [`DispatchEntry::defer`].
    pub fn deferred(&self) -> usize {
        self.table.iter().filter(|e| e.defer.is_some()).count()
    }
}

impl DispatchEntry {
    /// What the entry matches, as canonical texts: the specialization, a space, and the
    /// run-time shape (empty in specialization mode).
    pub fn key_text(&self) -> String {
        format!(
            "{} {}",
            Genome::from_vars(self.specialization.clone()).canonical(),
            self.shape
                .as_ref()
                .map(|s| Genome::from_vars(s.clone()).canonical())
                .unwrap_or_default()
        )
    }
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
    pub(crate) fn read(dir: &Path) -> Result<Manifest> {
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

    /// The mark a per-shape dispatch entry calls for by the manifest's own numbers and its
    /// [`Dispatch::min_speedup`] ([`Manifest::deferral_at`]); `None` without a
    /// `min_speedup` (specialization mode, older manifests). `evo export` marks by it and
    /// `evo verify` checks the marks against it.
    pub fn deferral(&self, e: &DispatchEntry) -> Result<Option<Deferral>> {
        match self.dispatch.min_speedup {
            Some(min_speedup) => self.deferral_at(e, min_speedup),
            None => Ok(None),
        }
    }

    /// Both times when a per-shape entry's variant's run has a PyTorch baseline
    /// ([`PYTORCH_BASELINES`]) on the entry's shape (key: [`evo_core::shape_key`] of the
    /// specialization and the run-time variables, as the store's) and the variant's median
    /// there is less than `min_speedup` times faster than it; `None` in specialization
    /// mode, without such a baseline or time, or where the variant is that much faster.
    pub fn deferral_at(&self, e: &DispatchEntry, min_speedup: f64) -> Result<Option<Deferral>> {
        let Some((v, source, key)) = self.entry_measurements(e)? else {
            return Ok(None);
        };
        let variant_us = v
            .shapes
            .iter()
            .find(|s| evo_core::shape_key(&s.shape) == key)
            .and_then(|s| s.median_us);
        Ok(
            match (
                Self::pytorch_baseline(source, &key),
                source.baseline_us.get(&key),
                variant_us,
            ) {
                (true, Some(&baseline_us), Some(variant_us))
                    if baseline_us < min_speedup * variant_us =>
                {
                    Some(Deferral {
                        variant_us,
                        baseline_us,
                    })
                }
                _ => None,
            },
        )
    }

    /// Whether a per-shape dispatch entry's run has a PyTorch baseline ([`PYTORCH_BASELINES`])
    /// on the entry's shape, the comparison [`Manifest::deferral`] needs; `None` in
    /// specialization mode.
    pub fn has_pytorch_baseline(&self, e: &DispatchEntry) -> Result<Option<bool>> {
        Ok(self
            .entry_measurements(e)?
            .map(|(_, source, key)| Self::pytorch_baseline(source, &key)))
    }

    fn pytorch_baseline(source: &Source, key: &str) -> bool {
        source
            .baseline_kind
            .get(key)
            .is_some_and(|k| PYTORCH_BASELINES.contains(&k.as_str()))
    }

    /// A per-shape entry's variant, that variant's run and the entry's shape key
    /// ([`evo_core::shape_key`] of the specialization and the run-time variables, as the
    /// store's); `None` in specialization mode.
    fn entry_measurements(&self, e: &DispatchEntry) -> Result<Option<(&Variant, &Source, String)>> {
        let Some(shape) = &e.shape else {
            return Ok(None);
        };
        let v = self
            .variants
            .iter()
            .find(|v| v.name == e.variant)
            .ok_or_else(|| {
                anyhow!(
                    "dispatch entry {} names variant {}, which the manifest does not have",
                    e.key_text(),
                    e.variant
                )
            })?;
        let source = self.source_of(v)?;
        let mut full = e.specialization.clone();
        full.extend(shape.clone());
        Ok(Some((v, source, evo_core::shape_key(&full))))
    }

    /// The run a variant comes from.
    pub(crate) fn source_of(&self, v: &Variant) -> Result<&Source> {
        self.sources.iter().find(|s| s.run == v.run).ok_or_else(|| {
            anyhow!(
                "variant {} names run `{}`, which is not among the manifest's sources",
                v.name,
                v.run
            )
        })
    }
}

/// `options` with the CUDA include folder `include` written as its role
/// (`-I{cuda_include}`), so that no path of this machine lands in the manifest.
pub fn portable_options(options: &[String], include: &Path) -> Vec<String> {
    let here = format!("-I{}", include.display());
    options
        .iter()
        .map(|o| {
            if *o == here {
                format!("-I{CUDA_INCLUDE}")
            } else {
                o.clone()
            }
        })
        .collect()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// How one listed file compares with its recorded hash (JSON: `{"state": "ok"}`,
/// `{"state": "missing"}`, `{"state": "modified", "expected": …, "actual": …}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum FileCheck {
    Ok,
    Missing,
    Modified { expected: String, actual: String },
}

/// Each listed file with its check, and the folder's files the manifest does not name.
pub type FileChecks = (Vec<(String, FileCheck)>, Vec<String>);

/// Every file an artifact needs besides `manifest.json`, each with what needs it: the
/// fixed files ([`crate::files::fixed_files`]), the generated ones ([`KERNEL_H`],
/// [`README_MD`]) and each variant's source, PTX and CUBIN (`evo_kernel.py` and
/// `kernel.h` load a CUBIN by the name its variant gives). `evo export` writes and hashes
/// every one of them, so an artifact whose `files` lacks one was edited.
pub fn needed_files(m: &Manifest) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = crate::files::fixed_files()
        .iter()
        .map(|(name, _)| name.to_string())
        .chain([KERNEL_H.to_string(), README_MD.to_string()])
        .map(|name| (name, "a file every artifact holds".to_string()))
        .collect();
    for v in &m.variants {
        for (field, name) in [
            ("source_file", &v.source_file),
            ("ptx_file", &v.ptx_file),
            ("cubin_file", &v.cubin_file),
        ] {
            out.push((name.clone(), format!("the {field} of variant {}", v.name)));
        }
    }
    out
}

/// Whether a file name of the manifest stays inside the artifact folder: relative, with
/// no `..` (nor `.`, a root or a drive prefix) among its components.
fn inside_artifact(name: &str) -> bool {
    !name.is_empty()
        && !name.contains("..")
        && !name.starts_with('/')
        && Path::new(name)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// Checks every file of `manifest.files`; also lists files in the folder that the
/// manifest does not name (Python's `__pycache__` is ignored). Refused (an error, before
/// any file is read): a name outside the artifact folder, and a manifest that lists no
/// hash for a file the artifact needs ([`needed_files`]): without one, that file could
/// be changed unseen.
pub(crate) fn check_files(dir: &Path, m: &Manifest) -> Result<FileChecks> {
    let needed = needed_files(m);
    for name in m.files.keys().chain(needed.iter().map(|(name, _)| name)) {
        if !inside_artifact(name) {
            bail!("manifest names a file outside the artifact: `{name}`");
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    let unlisted: Vec<String> = needed
        .iter()
        .filter(|(name, _)| !m.files.contains_key(name) && seen.insert(name.as_str()))
        .map(|(name, why)| format!("{name} ({why})"))
        .collect();
    if !unlisted.is_empty() {
        bail!(
            "manifest.json's `files` lists no SHA-256 for {} file{} the artifact needs: {}; such a file could be changed unseen, so the artifact is not checked (its `files` was edited). Export it again with `evo export`",
            unlisted.len(),
            if unlisted.len() == 1 { "" } else { "s" },
            unlisted.join(", ")
        );
    }
    let mut out = Vec::new();
    for (name, expected) in &m.files {
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

/// A variant's launches as the manifest states them (see [`Variant::launches`]).
pub(crate) struct LaunchTexts {
    pub launches: Vec<LaunchRuleText>,
    pub constants: BTreeMap<String, i64>,
    pub scratch: Vec<ScratchText>,
}

/// The manifest's text of `family`'s launches for a genome (`vars`: its compile-time
/// variables), with ABI arguments named after `params`. `shape` is any complete shape of
/// the specialization (it places the problem's argument lists in the ABI). Refused:
/// expressions C and Python would not evaluate alike, and compile-time variables that
/// are not integers.
pub(crate) fn launch_texts(
    family: &Family,
    params: &[AbiParam],
    vars: &Vars,
    shape: &Vars,
) -> Result<LaunchTexts, String> {
    let problem = family.problem;
    let abi = problem.args(shape);
    if abi.len() != params.len() {
        return Err(format!(
            "problem {} has {} ABI arguments but its ABI text names {}",
            problem.name(),
            abi.len(),
            params.len()
        ));
    }
    let shape_names: Vec<&str> = problem.shape_vars().iter().map(|d| d.name).collect();
    let mut constants = BTreeMap::new();
    let mut text = |what: &str, e: &Expr| -> Result<String, String> {
        portable_expr(e.source()).map_err(|why| {
            format!("{what}: {why}; the artifact needs expressions C and Python evaluate alike")
        })?;
        for v in e.variables() {
            if shape_names.contains(&v.as_str()) {
                continue;
            }
            match vars.get(&v) {
                Some(Value::Int(i)) => {
                    constants.insert(v, *i);
                }
                other => return Err(format!("{what} reads `{v}` = {other:?}, not an integer")),
            }
        }
        Ok(e.source().to_string())
    };
    // An ABI slot (an input or the output) by its parameter name.
    let slot_name = |slot: ArgSlot| -> Result<String, String> {
        abi.iter()
            .position(|a| *a == slot)
            .map(|i| params[i].name.clone())
            .ok_or_else(|| format!("{slot:?} is not an argument of the ABI"))
    };
    let lists = problem.arg_lists(shape);
    let mut launches = Vec::new();
    for (rule, args) in family.launches.iter().zip(&family.launch_args) {
        let label = |l: &str| format!("launch rule {l} of `{}`", rule.kernel);
        let grid = [0, 1, 2].map(|i| text(&label(&format!("grid[{i}]")), &rule.grid[i]));
        let block = [0, 1, 2].map(|i| text(&label(&format!("block[{i}]")), &rule.block[i]));
        let shared_bytes = text(&label("shared_bytes"), &rule.shared_bytes)?;
        let [g0, g1, g2] = grid;
        let [b0, b1, b2] = block;
        let args = match args {
            None => None,
            Some(refs) => {
                let mut out = Vec::new();
                let what = format!("arguments of `{}`", rule.kernel);
                for r in refs {
                    match r {
                        ArgRef::Slot(ArgSlot::Scratch(i)) => {
                            out.push(LaunchArg::Scratch(family.scratch[*i].name.clone()))
                        }
                        ArgRef::Slot(s @ (ArgSlot::Input(_) | ArgSlot::Output)) => {
                            out.push(LaunchArg::Param(slot_name(*s)?))
                        }
                        ArgRef::Slot(other) => {
                            return Err(format!("{what}: literal {other:?} has no name"))
                        }
                        ArgRef::Abi(i) => out.push(LaunchArg::Param(
                            params
                                .get(*i)
                                .ok_or_else(|| format!("{what}: ABI argument {i}"))?
                                .name
                                .clone(),
                        )),
                        ArgRef::List(name) => {
                            let range = evo_kernels::arg_list(&lists, name)
                                .map_err(|e| format!("{what}: {e}"))?;
                            for p in params.get(range).ok_or_else(|| {
                                format!("{what}: argument list `{name}` runs past the ABI")
                            })? {
                                out.push(LaunchArg::Param(p.name.clone()));
                            }
                        }
                        ArgRef::I32(e) => out.push(LaunchArg::I32(text(&what, e)?)),
                        ArgRef::I64(e) => out.push(LaunchArg::I64(text(&what, e)?)),
                        ArgRef::TensorMap {
                            buffer,
                            of,
                            dims,
                            boxes,
                            swizzle,
                            strides,
                        } => out.push(LaunchArg::TensorMap(TensorMapText {
                            param: match of {
                                MappedBuffer::Input => Some(slot_name(ArgSlot::Input(*buffer))?),
                                MappedBuffer::Scratch => None,
                            },
                            scratch: match of {
                                MappedBuffer::Input => None,
                                MappedBuffer::Scratch => Some(
                                    family
                                        .scratch
                                        .get(*buffer)
                                        .ok_or_else(|| format!("{what}: no scratch {buffer}"))?
                                        .name
                                        .clone(),
                                ),
                            },
                            elem: match of {
                                MappedBuffer::Input => {
                                    problem
                                        .inputs(shape)
                                        .get(*buffer)
                                        .ok_or_else(|| format!("{what}: no input {buffer}"))?
                                        .elem
                                }
                                MappedBuffer::Scratch => {
                                    family.scratch[*buffer].elem.unwrap_or_else(|| dtype(shape))
                                }
                            }
                            .dtype_name()
                            .to_string(),
                            dims: dims
                                .iter()
                                .map(|e| text(&what, e))
                                .collect::<Result<_, _>>()?,
                            box_dims: boxes
                                .iter()
                                .map(|e| text(&what, e))
                                .collect::<Result<_, _>>()?,
                            swizzle_bytes: {
                                // A number in the artifact: the genome's value.
                                let scope = evo_core::expr::Scope::from_vars(vars);
                                swizzle
                                    .eval_int(&scope)
                                    .map_err(|e| format!("{what}: tensor map swizzle: {e}"))
                                    .and_then(|b| {
                                        evo_kernels::swizzle_bytes(b)
                                            .map_err(|e| format!("{what}: {e}"))
                                    })?
                            },
                            strides: strides.iter().map(|&i| params[i].name.clone()).collect(),
                        })),
                    }
                }
                Some(out)
            }
        };
        launches.push(LaunchRuleText {
            kernel: rule.kernel.clone(),
            grid: [g0?, g1?, g2?],
            block: [b0?, b1?, b2?],
            shared_bytes,
            args,
        });
    }
    let scratch = family
        .scratch
        .iter()
        .map(|s| {
            Ok(ScratchText {
                name: s.name.clone(),
                elem: s
                    .elem
                    .unwrap_or_else(|| dtype(shape))
                    .dtype_name()
                    .to_string(),
                len: text(&format!("scratch `{}`", s.name), &s.len)?,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(LaunchTexts {
        launches,
        constants,
        scratch,
    })
}

/// A variant's launches as evo runs them: the rules, each kernel's argument list
/// (`None`: the ABI), the scratch rules and the constants as variables, read back from
/// the manifest (the inverse of [`launch_texts`]).
pub(crate) struct VariantLaunches {
    pub rules: Vec<LaunchRule>,
    pub args: Vec<Option<Vec<ArgRef>>>,
    pub scratch: Vec<ScratchRule>,
    pub constants: Vars,
}

impl VariantLaunches {
    /// Reads `v`'s launches; `params` are the manifest's ABI parameters, `abi` the
    /// problem's arguments for any shape (to find the input a tensor map reads).
    pub(crate) fn of(v: &Variant, params: &[AbiParam], abi: &[ArgSlot]) -> Result<VariantLaunches> {
        let at = |what: &str| format!("{}: {what}", v.name);
        let parse = |s: &String| Expr::parse(s).with_context(|| at("launch expression"));
        let param = |name: &str| {
            params
                .iter()
                .position(|p| p.name == name)
                .ok_or_else(|| anyhow!("{}", at(&format!("no ABI parameter `{name}`"))))
        };
        let scratch_index = |name: &str| {
            v.scratch
                .iter()
                .position(|s| s.name == name)
                .ok_or_else(|| anyhow!("{}", at(&format!("no scratch `{name}`"))))
        };
        let mut rules = Vec::new();
        let mut args = Vec::new();
        for l in &v.launches {
            rules.push(LaunchRule {
                kernel: l.kernel.clone(),
                grid: [parse(&l.grid[0])?, parse(&l.grid[1])?, parse(&l.grid[2])?],
                block: [
                    parse(&l.block[0])?,
                    parse(&l.block[1])?,
                    parse(&l.block[2])?,
                ],
                shared_bytes: parse(&l.shared_bytes)?,
            });
            args.push(match &l.args {
                None => None,
                Some(list) => Some(
                    list.iter()
                        .map(|a| {
                            Ok(match a {
                                LaunchArg::Param(name) => ArgRef::Abi(param(name)?),
                                LaunchArg::Scratch(name) => {
                                    ArgRef::Slot(ArgSlot::Scratch(scratch_index(name)?))
                                }
                                LaunchArg::I32(e) => ArgRef::I32(parse(e)?),
                                LaunchArg::I64(e) => ArgRef::I64(parse(e)?),
                                LaunchArg::TensorMap(t) => {
                                    let (buffer, of) =
                                        match t.buffer().map_err(|e| anyhow!("{}", at(&e)))? {
                                            (MappedBuffer::Input, name) => {
                                                let ArgSlot::Input(input) = abi[param(name)?]
                                                else {
                                                    bail!(
                                                        "{}",
                                                        at(&format!(
                                                        "tensor map over `{name}`, not an input"
                                                    ))
                                                    );
                                                };
                                                (input, MappedBuffer::Input)
                                            }
                                            (MappedBuffer::Scratch, name) => {
                                                (scratch_index(name)?, MappedBuffer::Scratch)
                                            }
                                        };
                                    ArgRef::TensorMap {
                                        buffer,
                                        of,
                                        dims: t.dims.iter().map(parse).collect::<Result<_>>()?,
                                        boxes: t
                                            .box_dims
                                            .iter()
                                            .map(parse)
                                            .collect::<Result<_>>()?,
                                        swizzle: Expr::int(t.swizzle_bytes.into()),
                                        strides: t
                                            .strides
                                            .iter()
                                            .map(|name| param(name))
                                            .collect::<Result<_>>()?,
                                    }
                                }
                            })
                        })
                        .collect::<Result<Vec<_>>>()?,
                ),
            });
        }
        let scratch = v
            .scratch
            .iter()
            .map(|s| {
                let elem = Some(ElemType::from_dtype(&s.elem).ok_or_else(|| {
                    anyhow!(
                        "{}",
                        at(&format!(
                            "scratch `{}` of element type `{}`",
                            s.name, s.elem
                        ))
                    )
                })?);
                Ok(ScratchRule {
                    name: s.name.clone(),
                    elem,
                    len: parse(&s.len)?,
                })
            })
            .collect::<Result<_>>()?;
        let constants = v
            .constants
            .iter()
            .map(|(k, x)| (k.clone(), Value::Int(*x)))
            .collect();
        Ok(VariantLaunches {
            rules,
            args,
            scratch,
            constants,
        })
    }

    /// Whether a kernel takes its own argument list or there is scratch.
    pub(crate) fn is_multi_arg(&self) -> bool {
        !self.scratch.is_empty() || self.args.iter().any(Option::is_some)
    }
}

/// Checks that a launch expression uses only what C, C++ and Python evaluate alike
/// (see [`LaunchRuleText`]).
pub(crate) fn portable_expr(source: &str) -> Result<(), String> {
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

    /// A tensor map as manifests wrote it before scratch maps (`param` only) reads as a map
    /// over that input and writes back unchanged; a scratch map names `scratch`; one naming
    /// both, or neither, is refused in words.
    #[test]
    fn tensor_map_texts_name_an_input_or_a_scratch_buffer() {
        let old = r#"{"tensor_map": {"param": "q", "elem": "f16", "dims": ["HEAD_DIM", "SEQ_Q"], "box_dims": ["64", "BLOCK_M"], "swizzle_bytes": 128}}"#;
        let arg: LaunchArg = serde_json::from_str(old).unwrap();
        let LaunchArg::TensorMap(t) = &arg else {
            panic!("{arg:?}")
        };
        assert_eq!(t.buffer(), Ok((MappedBuffer::Input, "q")));
        let back: serde_json::Value = serde_json::to_value(&arg).unwrap();
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(old).unwrap()
        );
        let scratch = old.replace(r#""param": "q""#, r#""scratch": "q8""#);
        let LaunchArg::TensorMap(t) = serde_json::from_str(&scratch).unwrap() else {
            panic!()
        };
        assert_eq!(t.buffer(), Ok((MappedBuffer::Scratch, "q8")));
        for bad in [
            old.replace(r#""param": "q""#, r#""param": "q", "scratch": "q8""#),
            old.replace(r#""param": "q", "#, ""),
        ] {
            let LaunchArg::TensorMap(t) = serde_json::from_str(&bad).unwrap() else {
                panic!()
            };
            let e = t.buffer().unwrap_err();
            assert!(e.contains("`param` or `scratch`, one of the two"), "{e}");
        }
    }

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
        // The end-to-end FP8 problem takes sdpa_fwd's arguments (an exported artifact of it is
        // called as attention is).
        let e2e = abi_params(evo_kernels::problem("sdpa_fwd_fp8_e2e").unwrap().abi()).unwrap();
        assert_eq!(e2e, sdpa);
        let gemm = abi_params(evo_kernels::problem("gemm").unwrap().abi()).unwrap();
        let names: Vec<&str> = gemm.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "m", "n", "k", "lda", "ldb", "ldc"]);
        assert!(abi_params("void f(double x)")
            .unwrap_err()
            .contains("double"));
    }

    /// What the manifest says of a family's launches reads back to the same launches:
    /// for every family with its own argument lists or scratch (tensor maps, argument
    /// lists, i64 expressions, scratch of fixed and DTYPE element types), the arguments,
    /// scratch and launch dimensions through the manifest equal the family's own, on a
    /// ragged shape.
    #[test]
    fn launches_read_back_from_the_manifest_equal_the_familys() {
        let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../templates");
        let mut checked = 0;
        for (problem, family) in [
            ("sdpa_fwd", "sdpa_fwd_wgmma"),
            ("sdpa_fwd", "sdpa_fwd_wgmma_splitkv"),
            ("sdpa_fwd", "sdpa_fwd_mma_splitkv"),
            ("sdpa_fwd_fp8_e2e", "sdpa_fwd_fp8_e2e_mma"),
            ("sdpa_fwd_fp8_e2e", "sdpa_fwd_fp8_e2e_split"),
            ("sdpa_fwd_fp8_e2e", "sdpa_fwd_fp8_e2e_ws"),
            ("sdpa_fwd_fp8_e2e", "sdpa_fwd_fp8_e2e_ws_cluster"),
        ] {
            let f = Family::load(&root, problem, family).unwrap();
            assert!(f.is_multi_arg(), "{family}");
            let shape: Vars = [
                ("BATCH", Value::Int(3)),
                ("HEADS", Value::Int(5)),
                ("SEQ_Q", Value::Int(77)),
                ("SEQ_KV", Value::Int(1000)),
                ("HEAD_DIM", Value::Int(128)),
                ("CAUSAL", Value::Bool(true)),
                ("DTYPE", Value::Str("bf16".into())),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            let target = evo_core::Target::from_arch("sm_90a").unwrap();
            let specs =
                evo_kernels::Specializations::new(f.problem, target, std::slice::from_ref(&shape))
                    .unwrap();
            let space = f.space(specs.contexts()).unwrap();
            let params = abi_params(f.problem.abi()).unwrap();
            assert_eq!(params.len(), f.problem.args(&shape).len());
            for g in space.iter_valid().take(8) {
                let vars = space.vars(&g, 0).unwrap();
                let texts = launch_texts(&f, &params, &vars, &shape).unwrap();
                let v = Variant {
                    name: "v".into(),
                    run: "r".into(),
                    family: family.into(),
                    candidate_id: 1,
                    genome: g.canonical(),
                    genome_hash: g.hash().0,
                    status: "evaluated".into(),
                    fitness: None,
                    specialization: Vars::new(),
                    source_file: String::new(),
                    ptx_file: String::new(),
                    cubin_file: String::new(),
                    nvrtc_name: String::new(),
                    launches: texts.launches,
                    constants: texts.constants,
                    scratch: texts.scratch,
                    contiguous: f.contiguous.clone(),
                    resources: vec![],
                    tensor_ops: None,
                    compile_key: String::new(),
                    compile_key_matches_search: None,
                    sanitizer: Some("clean".into()),
                    shapes: vec![],
                };
                // Through JSON, as a reader gets it.
                let v: Variant = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
                let back = VariantLaunches::of(&v, &params, &f.problem.args(&shape)).unwrap();
                assert!(back.is_multi_arg());
                assert_eq!(
                    evo_kernels::resolve_launch_args(
                        f.problem,
                        &back.rules,
                        &back.args,
                        &back.scratch,
                        &back.constants,
                        &shape
                    )
                    .unwrap(),
                    f.launch_args(&vars, &shape).unwrap(),
                    "{family} {}",
                    g.canonical()
                );
                assert_eq!(
                    evo_kernels::resolve_scratch(&back.scratch, &back.constants, &shape).unwrap(),
                    f.scratch_specs(&vars, &shape).unwrap()
                );
                let mut all = back.constants.clone();
                all.extend(shape.clone());
                let dims: Vec<LaunchDims> =
                    back.rules.iter().map(|r| r.eval(&all).unwrap()).collect();
                let want: Vec<LaunchDims> = f
                    .launch_dims(&vars, &shape)
                    .unwrap()
                    .into_iter()
                    .map(|(_, d)| d)
                    .collect();
                assert_eq!(dims, want);
                checked += 1;
            }
        }
        assert!(checked >= 33, "{checked}");
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
