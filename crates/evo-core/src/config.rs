//! The search configuration file (`configs/*.toml`).
//!
//! ```toml
//! problem = "gemm"              # which problem (ABI, reference, shapes' meaning)
//! family = "gemm_mma"           # templates/<problem>/<family>.toml; or a list in order of
//!                               # preference, e.g. ["sdpa_fwd_wgmma", "sdpa_fwd_mma"]: the
//!                               # first the target architecture runs (its `min_arch`)
//! templates = "../templates"    # optional; relative to this file
//!
//! [spec]                        # compile-time values shared by every shape
//! DTYPE = "f16"
//!
//! [[shapes]]                    # problem sizes; may override [spec] values
//! M = 1024
//! N = 1024
//! K = 1024
//!
//! [compile]
//! arch = "auto"                 # "auto": the GPU's own, else sm_90a
//! options = ["-std=c++17", "-lineinfo"]
//! max_registers = 0             # 0: no cap
//!
//! [correctness]                 # optional; defaults shown by `CorrectnessConfig`
//! random_trials = 3
//! [correctness.tolerance.f16]
//! rtol = 5e-3
//! [correctness.tolerance.end_to_end]  # problems with encoded inputs (FP8): the bound on the
//! rel_l2 = 0.2                         # error against the original inputs
//!
//! [search]                      # optional; `SearchSection` (strategy, seeds, baseline, ...)
//! regression_shapes = 2         # slower than the baseline by regression_tolerance on this
//!                               # many shapes: `regressed`; 0: off (per-shape exports)
//!
//! [timing]                      # optional; `TimingConfig`
//! [static]                      # optional; `StaticConfig`
//! [timeouts]                    # optional; `TimeoutConfig`
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::value::{Value, Vars};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CompileConfig {
    /// `auto` or an architecture such as `sm_90a`.
    #[serde(default = "default_arch")]
    pub arch: String,
    /// NVRTC options added to evo's own (`--gpu-architecture`, include paths, `-Xptxas -v`).
    #[serde(default = "default_options")]
    pub options: Vec<String>,
    /// `--maxrregcount`; 0 leaves it to the compiler.
    #[serde(default)]
    pub max_registers: u32,
}

fn default_arch() -> String {
    "auto".into()
}

fn default_options() -> Vec<String> {
    vec!["-std=c++17".into(), "-lineinfo".into()]
}

impl Default for CompileConfig {
    fn default() -> Self {
        CompileConfig {
            arch: default_arch(),
            options: default_options(),
            max_registers: 0,
        }
    }
}

/// `[correctness]`: how hard the correctness gate looks.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CorrectnessConfig {
    /// Trials with fresh random inputs per shape (each a new seed).
    pub random_trials: u32,
    /// Also all-zero, large-magnitude and one-hot inputs.
    pub adversarial: bool,
    /// A second launch on the same inputs must give a bitwise-identical output.
    pub repeat_check: bool,
    /// Also check the problem's edge shapes (ragged lengths, length 1, ...).
    pub edge_shapes: bool,
    /// Bytes of guard region before and after every buffer of a call (inputs, output,
    /// scratch): a stray write this far from a buffer is caught (farther ones fault, or are
    /// memcheck's to find).
    pub guard_bytes: usize,
    /// Per-dtype overrides of the problem's error bounds, e.g. `[correctness.tolerance.f16]`;
    /// the key `end_to_end` overrides the end-to-end bound of problems with encoded inputs
    /// (FP8: the error against the original fp16/bf16 inputs). For `sdpa_fwd_fp8_e2e` the
    /// per-dtype bound is the one on the exact answer (reported in its trials, checked
    /// between timed replays); its trials are judged by `sdpa_fwd_fp8`'s tolerance on the
    /// quantization rule's codes, which no key overrides.
    pub tolerance: BTreeMap<String, ToleranceOverride>,
}

impl Default for CorrectnessConfig {
    fn default() -> Self {
        CorrectnessConfig {
            random_trials: 3,
            adversarial: true,
            repeat_check: true,
            edge_shapes: true,
            guard_bytes: 256 << 10,
            tolerance: BTreeMap::new(),
        }
    }
}

/// Overrides of a problem's tolerance (see `evo_kernels::harness::Tolerance`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ToleranceOverride {
    pub rtol: Option<f64>,
    pub atol_of_max: Option<f64>,
    pub atol_floor: Option<f64>,
    pub rel_l2: Option<f64>,
}

/// `[timing]`: CUDA-graph timing with inputs rotated past the L2 size.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TimingConfig {
    pub enabled: bool,
    /// Warm-up before measuring, per shape.
    pub warmup_ms: f64,
    pub min_samples: u32,
    pub max_samples: u32,
    /// Stop once (p80 - p20) / median is at most this (after `min_samples`).
    pub target_spread: f64,
    /// Each sample replays a graph of launches lasting about this long.
    pub sample_ms: f64,
    /// Input sets rotated per sample so their bytes exceed this multiple of the L2 size.
    pub l2_multiple: f64,
    /// Most input sets to allocate.
    pub max_input_sets: u32,
    /// Time limit for sampling one shape.
    pub budget_ms: f64,
}

impl Default for TimingConfig {
    fn default() -> Self {
        TimingConfig {
            enabled: true,
            warmup_ms: 20.0,
            min_samples: 10,
            max_samples: 100,
            target_spread: 0.02,
            sample_ms: 2.0,
            l2_multiple: 2.0,
            max_input_sets: 64,
            budget_ms: 3000.0,
        }
    }
}

/// `[static]`: rejection rules applied to resource usage before any launch.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StaticConfig {
    /// Reject a kernel that spills more than this many bytes (stores + loads).
    pub max_spill_bytes: u32,
    /// Time a kernel whose wgmma instructions ptxas serialized (its notice "Potential
    /// Performance Loss: wgmma.mma_async instructions are serialized"); by default such a
    /// kernel is rejected before any launch: it runs well below the same code unserialized.
    pub allow_wgmma_serialization: bool,
    /// Reject a kernel using more registers per thread than this.
    pub max_registers: u32,
    /// Reject a launch that fits fewer blocks than this on one multiprocessor.
    pub min_blocks_per_sm: u32,
    /// Reject a kernel whose SASS shows no tensor-core instruction (needs cuobjdump).
    pub require_tensor_ops: bool,
    /// Tensor-core opcodes (e.g. "HGMMA") each kernel's SASS must contain (needs
    /// cuobjdump); a family adds its own (`require_sass` in the family file).
    pub require_sass: Vec<String>,
    /// Per kernel name, the opcodes required of that kernel instead of `require_sass`
    /// (set from a family whose launches give their own `require_sass`; not a config key).
    #[serde(skip)]
    pub kernel_require_sass: BTreeMap<String, Vec<String>>,
}

impl StaticConfig {
    /// These rules plus the opcodes a family requires.
    pub fn requiring(mut self, opcodes: &[String]) -> StaticConfig {
        for op in opcodes {
            if !self.require_sass.contains(op) {
                self.require_sass.push(op.clone());
            }
        }
        self
    }

    /// These rules plus a family's opcodes: `family` in every kernel except those listed
    /// in `per_kernel`, which require their own opcodes instead (plus this config's).
    pub fn requiring_per_kernel(
        self,
        family: &[String],
        per_kernel: &[(String, Vec<String>)],
    ) -> StaticConfig {
        let config_ops = self.require_sass.clone();
        let mut out = self.requiring(family);
        for (kernel, ops) in per_kernel {
            let mut all = config_ops.clone();
            for op in ops {
                if !all.contains(op) {
                    all.push(op.clone());
                }
            }
            out.kernel_require_sass.insert(kernel.clone(), all);
        }
        out
    }

    /// The opcodes kernel `name` must contain.
    pub fn sass_required_of(&self, name: &str) -> &[String] {
        self.kernel_require_sass
            .get(name)
            .unwrap_or(&self.require_sass)
    }
}

impl Default for StaticConfig {
    fn default() -> Self {
        StaticConfig {
            max_spill_bytes: 0,
            allow_wgmma_serialization: false,
            max_registers: 255,
            min_blocks_per_sm: 1,
            require_tensor_ops: false,
            require_sass: Vec::new(),
            kernel_require_sass: BTreeMap::new(),
        }
    }
}

/// `[timeouts]`: the watchdog's deadlines for a GPU worker.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TimeoutConfig {
    /// A new worker must report ready within this.
    pub startup_s: f64,
    /// Base allowance for one variant (module load, reference compile).
    pub job_base_s: f64,
    /// Added per shape checked.
    pub per_shape_s: f64,
    /// Added per shape timed (on top of the timing budget).
    pub per_timed_shape_s: f64,
}

impl Default for TimeoutConfig {
    fn default() -> Self {
        TimeoutConfig {
            startup_s: 60.0,
            job_base_s: 20.0,
            per_shape_s: 5.0,
            per_timed_shape_s: 5.0,
        }
    }
}

/// The strategy's own parameters (the `[search]` keys every strategy reads). Deserializes
/// from a partial table: missing fields take their [`Default`] values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchParams {
    /// Proposals per generation.
    pub population: usize,
    /// K: how many of the best genomes breed and count as elites in the insights.
    pub elites: usize,
    /// Relative share of a generation's slots filled by mutating one elite.
    pub mutation_share: f64,
    /// Relative share filled by uniform crossover of two elites.
    pub crossover_share: f64,
    /// Relative share filled by uniformly random valid genomes (exploration).
    pub exploration_share: f64,
    /// A mutation moves between 1 and this many knobs (at least 1).
    pub max_knob_moves: usize,
    /// 0..=1: how strongly mutation prefers values common among elites (0 = uniform).
    pub insight_weight: f64,
    /// The run's seed; each generation's RNG derives from it and the generation number.
    pub seed: u64,
}

impl Default for SearchParams {
    fn default() -> Self {
        SearchParams {
            population: 32,
            elites: 8,
            mutation_share: 0.6,
            crossover_share: 0.25,
            exploration_share: 0.15,
            max_knob_moves: 2,
            insight_weight: 0.5,
            seed: 0,
        }
    }
}

impl SearchParams {
    /// Splits `slots` into (mutations, crossovers, random genomes) by the shares, rounding
    /// crossovers and random genomes to the nearest integer and giving mutation the rest.
    /// Negative or non-finite shares count as 0; if all are 0, every slot is a mutation.
    pub fn split(&self, slots: usize) -> (usize, usize, usize) {
        let clean = |x: f64| if x.is_finite() && x > 0.0 { x } else { 0.0 };
        let (m, c, e) = (
            clean(self.mutation_share),
            clean(self.crossover_share),
            clean(self.exploration_share),
        );
        let total = m + c + e;
        if total == 0.0 {
            return (slots, 0, 0);
        }
        let share = |x: f64| ((slots as f64) * x / total).round() as usize;
        let random = share(e).min(slots);
        let cross = share(c).min(slots - random);
        (slots - random - cross, cross, random)
    }
}

/// `[search]`: the strategy and its parameters ([`SearchParams`], flat in the same
/// table), the baseline, and the stopping and regression rules.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SearchSection {
    /// "surrogate" (surrogate-assisted evolution, the default), "evolution", "random" or
    /// "exhaustive".
    pub strategy: String,
    /// Population, elites, shares, knob moves, insight weight and seed.
    #[serde(flatten)]
    pub params: SearchParams,
    /// Genomes evaluated in generation 0 (canonical `K=V,...`).
    pub seeds: Vec<String>,
    /// The fitness baseline: `torch` (PyTorch's `scaled_dot_product_attention`, measured on
    /// the run's GPU when the run starts, by scripts/torch_sdpa_baseline.py; the first seed
    /// genome instead, with a message, where PyTorch cannot run), `genome:K=V,...` (a genome
    /// of the family, evaluated first; default: the first seed genome, else the first valid
    /// genome) or `import:FILE` (an evo-baseline-1 JSON file of per-shape times, e.g. PyTorch
    /// SDPA measured on the same GPU by that script), relative to the config's folder.
    pub baseline: Option<String>,
    /// Stop after this many generations without a better best fitness (0: never).
    pub patience: u32,
    /// A candidate more than this much slower than the baseline (0.10 = 10%) ...
    pub regression_tolerance: f64,
    /// ... on at least this many shapes is `regressed`: it is timed no further once its
    /// timed shapes make it so (a genome stopped before its last shape has no fitness; one
    /// timed on every shape keeps its own). 0 turns the rule off, so every correct genome is
    /// timed on every shape (what a search for `evo export --per-shape` needs: a genome slow
    /// on some shapes may be the fastest on others).
    pub regression_shapes: usize,
    /// Per GPU: how many of a generation's last genomes may still be in evaluation when
    /// the next generation is proposed (their results join the history of the advance
    /// after), so the GPUs do not wait for the next generation's first compiles. 0:
    /// every result is in before the next generation is proposed. The run's last
    /// generation always waits for every result.
    pub overlap: usize,
    /// Keys neither this section nor [`SearchParams`] knows: refused by
    /// [`SearchConfig::parse`] (serde's `deny_unknown_fields` does not work with
    /// `flatten`; a map flattened after the struct collects what it left).
    #[serde(flatten, skip_serializing)]
    unknown: BTreeMap<String, toml::Value>,
}

impl Default for SearchSection {
    fn default() -> Self {
        SearchSection {
            strategy: "surrogate".into(),
            params: SearchParams::default(),
            seeds: Vec::new(),
            baseline: None,
            patience: 0,
            regression_tolerance: 0.10,
            regression_shapes: 2,
            overlap: 6,
            unknown: BTreeMap::new(),
        }
    }
}

impl SearchSection {
    /// The keys `[search]` takes, in the order they are documented.
    pub fn known_keys() -> Vec<String> {
        let all = SearchSection {
            baseline: Some(String::new()),
            ..SearchSection::default()
        };
        toml::Table::try_from(all)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default()
    }
}

/// `family = "name"` or `family = ["first choice", "fallback", ...]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
enum FamilyField {
    One(String),
    Choices(Vec<String>),
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    problem: String,
    family: FamilyField,
    templates: Option<PathBuf>,
    #[serde(default)]
    spec: toml::Table,
    #[serde(default)]
    shapes: Vec<toml::Table>,
    #[serde(default)]
    compile: CompileConfig,
    #[serde(default)]
    correctness: CorrectnessConfig,
    #[serde(default)]
    timing: TimingConfig,
    #[serde(default, rename = "static")]
    static_rules: StaticConfig,
    #[serde(default)]
    timeouts: TimeoutConfig,
    #[serde(default)]
    search: SearchSection,
}

/// A loaded configuration; shapes already carry the `[spec]` values they inherit.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SearchConfig {
    pub path: PathBuf,
    pub problem: String,
    /// The family searched: the config's own, or the one chosen from `families` for the
    /// target architecture (evo-run's context loading sets it).
    pub family: String,
    /// Every family the config names, in its order of preference (one for most configs).
    pub families: Vec<String>,
    /// Templates folder named by the config, resolved against the config's folder.
    pub templates: Option<PathBuf>,
    /// The `[spec]` values, which every shape of `shapes` already carries; a shape given
    /// elsewhere for this config (`evo profile --shape`) inherits them too.
    pub spec: Vars,
    pub shapes: Vec<Vars>,
    pub compile: CompileConfig,
    pub correctness: CorrectnessConfig,
    pub timing: TimingConfig,
    pub static_rules: StaticConfig,
    pub timeouts: TimeoutConfig,
    pub search: SearchSection,
    /// The file's text, kept with a run so it can be resumed and inspected.
    pub text: String,
}

/// `shape` with the values of `spec` (a config's `[spec]`) it does not name: a config's own
/// shapes, and one given elsewhere for it (`evo profile --shape`, `evo check --shape`).
pub fn inherit_spec(spec: &Vars, shape: &Vars) -> Vars {
    let mut vars = spec.clone();
    vars.extend(shape.clone());
    vars
}

fn table_to_vars(path: &Path, what: &str, table: &toml::Table) -> Result<Vars, ConfigError> {
    table
        .iter()
        .map(|(k, v)| {
            Value::from_toml(v)
                .map(|v| (k.clone(), v))
                .ok_or_else(|| ConfigError::Invalid {
                    path: path.to_path_buf(),
                    message: format!(
                        "{what}: `{k}` must be an integer, boolean or string, not {}",
                        v.type_str()
                    ),
                })
        })
        .collect()
}

/// The `[search]`, `[timing]`, `[timeouts]` and `[correctness.tolerance.*]` values outside
/// what the search can work with, in words naming each key and its allowed range.
fn out_of_range(
    search: &SearchSection,
    timing: &TimingConfig,
    timeouts: &TimeoutConfig,
    correctness: &CorrectnessConfig,
) -> Option<String> {
    let p = &search.params;
    let share_keys = [
        ("mutation_share", p.mutation_share),
        ("crossover_share", p.crossover_share),
        ("exploration_share", p.exploration_share),
    ];
    let mut problems = Vec::new();
    if p.population == 0 {
        problems.push("[search] population must be at least 1 (genomes per generation)".into());
    }
    if p.elites == 0 || p.elites > p.population.max(1) {
        problems.push(format!(
            "[search] elites must be from 1 to population ({}), not {}",
            p.population, p.elites
        ));
    }
    for (key, v) in share_keys {
        if !(0.0..=1.0).contains(&v) {
            problems.push(format!("[search] {key} must be from 0 to 1, not {v}"));
        }
    }
    if share_keys.iter().all(|(_, v)| *v == 0.0) {
        problems.push("[search] mutation_share, crossover_share and exploration_share are all 0: give at least one a share".into());
    }
    if p.max_knob_moves == 0 {
        problems.push("[search] max_knob_moves must be at least 1".into());
    }
    if !(0.0..=1.0).contains(&p.insight_weight) {
        problems.push(format!(
            "[search] insight_weight must be from 0 to 1, not {}",
            p.insight_weight
        ));
    }
    if !(search.regression_tolerance >= 0.0 && search.regression_tolerance.is_finite()) {
        problems.push(format!(
            "[search] regression_tolerance must be 0 or more (0.10 = 10% slower), not {}",
            search.regression_tolerance
        ));
    }
    for (key, v) in [
        ("budget_ms", timing.budget_ms),
        ("sample_ms", timing.sample_ms),
        ("l2_multiple", timing.l2_multiple),
    ] {
        if !(v > 0.0 && v.is_finite()) {
            problems.push(format!("[timing] {key} must be more than 0, not {v}"));
        }
    }
    for (key, v) in [
        ("warmup_ms", timing.warmup_ms),
        ("target_spread", timing.target_spread),
    ] {
        if !(v >= 0.0 && v.is_finite()) {
            problems.push(format!("[timing] {key} must be 0 or more, not {v}"));
        }
    }
    if timing.min_samples == 0 || timing.max_samples < timing.min_samples {
        problems.push(format!(
            "[timing] min_samples must be at least 1 and max_samples at least min_samples, not {} and {}",
            timing.min_samples, timing.max_samples
        ));
    }
    if timing.max_input_sets == 0 {
        problems.push("[timing] max_input_sets must be at least 1".into());
    }
    for (key, v) in [
        ("startup_s", timeouts.startup_s),
        ("job_base_s", timeouts.job_base_s),
        ("per_shape_s", timeouts.per_shape_s),
        ("per_timed_shape_s", timeouts.per_timed_shape_s),
    ] {
        if !(v > 0.0 && v.is_finite()) {
            problems.push(format!(
                "[timeouts] {key} must be more than 0 seconds, not {v}"
            ));
        }
    }
    for (dtype, t) in &correctness.tolerance {
        for (key, v) in [
            ("rtol", t.rtol),
            ("atol_of_max", t.atol_of_max),
            ("atol_floor", t.atol_floor),
            ("rel_l2", t.rel_l2),
        ] {
            if let Some(v) = v.filter(|v| !(*v >= 0.0 && v.is_finite())) {
                problems.push(format!(
                    "[correctness.tolerance.{dtype}] {key} must be 0 or more, not {v}"
                ));
            }
        }
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

impl SearchConfig {
    pub fn load(path: &Path) -> Result<SearchConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Parses config text; `path` is used for messages and to resolve `templates`.
    pub fn parse(path: &Path, text: &str) -> Result<SearchConfig, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let spec = table_to_vars(path, "[spec]", &raw.spec)?;
        if raw.shapes.is_empty() {
            return Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                message: "no [[shapes]]: give at least one problem size".into(),
            });
        }
        let shapes = raw
            .shapes
            .iter()
            .enumerate()
            .map(|(i, t)| {
                Ok(inherit_spec(
                    &spec,
                    &table_to_vars(path, &format!("shape #{}", i + 1), t)?,
                ))
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        if let Some(key) = raw.search.unknown.keys().next() {
            return Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                message: format!(
                    "[search]: unknown key `{key}`; known: {}",
                    SearchSection::known_keys().join(", ")
                ),
            });
        }
        if let Some(message) =
            out_of_range(&raw.search, &raw.timing, &raw.timeouts, &raw.correctness)
        {
            return Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                message,
            });
        }
        let families = match raw.family {
            FamilyField::One(f) => vec![f],
            FamilyField::Choices(list) => list,
        };
        if families.is_empty() || families.iter().any(|f| f.trim().is_empty()) {
            return Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                message: "`family` must name a family, or list families in order of preference"
                    .into(),
            });
        }
        if families.len() > 1
            && (!raw.search.seeds.is_empty()
                || raw
                    .search
                    .baseline
                    .as_deref()
                    .is_some_and(|b| b.starts_with("genome:")))
        {
            return Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                message: "[search] seeds and a `genome:` baseline are genomes of one family; a config naming several families cannot have them (name one family, or use baseline = \"torch\" or \"import:FILE\")".into(),
            });
        }
        let base = path.parent().unwrap_or(Path::new("."));
        Ok(SearchConfig {
            path: path.to_path_buf(),
            problem: raw.problem,
            family: families[0].clone(),
            families,
            templates: raw.templates.map(|t| base.join(t)),
            spec,
            shapes,
            compile: raw.compile,
            correctness: raw.correctness,
            timing: raw.timing,
            static_rules: raw.static_rules,
            timeouts: raw.timeouts,
            search: raw.search,
            text: text.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_list_is_read_in_order_and_excludes_one_family_genomes() {
        let head = "problem = \"sdpa_fwd\"\nfamily = [\"sdpa_fwd_wgmma\", \"sdpa_fwd_mma\"]\n[[shapes]]\nBATCH = 1\n";
        let c = SearchConfig::parse(Path::new("c.toml"), head).unwrap();
        assert_eq!(c.families, ["sdpa_fwd_wgmma", "sdpa_fwd_mma"]);
        assert_eq!(c.family, "sdpa_fwd_wgmma");
        let one = SearchConfig::parse(
            Path::new("c.toml"),
            &head.replace(
                "family = [\"sdpa_fwd_wgmma\", \"sdpa_fwd_mma\"]",
                "family = \"sdpa_fwd_mma\"",
            ),
        )
        .unwrap();
        assert_eq!(one.families, ["sdpa_fwd_mma"]);
        for extra in [
            "[search]\nseeds = [\"A=1\"]\n",
            "[search]\nbaseline = \"genome:A=1\"\n",
        ] {
            let e =
                SearchConfig::parse(Path::new("c.toml"), &format!("{head}{extra}")).unwrap_err();
            assert!(e.to_string().contains("several families"), "{e}");
        }
        let ok = SearchConfig::parse(
            Path::new("c.toml"),
            &format!("{head}[search]\nbaseline = \"torch\"\n"),
        );
        assert!(ok.is_ok());
        let e = SearchConfig::parse(
            Path::new("c.toml"),
            &head.replace("[\"sdpa_fwd_wgmma\", \"sdpa_fwd_mma\"]", "[]"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("must name a family"), "{e}");
    }

    #[test]
    fn values_out_of_range_name_the_key_and_the_range() {
        let base =
            "problem = \"gemm\"\nfamily = \"gemm_mma\"\n[[shapes]]\nM = 64\nN = 32\nK = 16\n";
        let parse =
            |extra: &str| SearchConfig::parse(Path::new("c.toml"), &format!("{base}{extra}"));
        assert!(parse("").is_ok());
        assert!(parse("[search]\npopulation = 1\nelites = 1\n").is_ok());
        for (extra, needle) in [
            (
                "[search]\npopulation = 0\n",
                "population must be at least 1",
            ),
            (
                "[timeouts]\nstartup_s = -1\n",
                "[timeouts] startup_s must be more than 0 seconds, not -1",
            ),
            (
                "[correctness.tolerance.f16]\nrtol = -1.0\n",
                "[correctness.tolerance.f16] rtol must be 0 or more, not -1",
            ),
            (
                "[search]\nelites = 40\n",
                "elites must be from 1 to population (32), not 40",
            ),
            (
                "[search]\nmutation_share = -1.0\n",
                "mutation_share must be from 0 to 1, not -1",
            ),
            (
                "[search]\ncrossover_share = 2.0\n",
                "crossover_share must be from 0 to 1, not 2",
            ),
            (
                "[search]\nmutation_share = 0.0\ncrossover_share = 0.0\nexploration_share = 0.0\n",
                "are all 0",
            ),
            (
                "[search]\nmax_knob_moves = 0\n",
                "max_knob_moves must be at least 1",
            ),
            (
                "[search]\ninsight_weight = 1.5\n",
                "insight_weight must be from 0 to 1",
            ),
            (
                "[search]\nregression_tolerance = -0.1\n",
                "regression_tolerance must be 0 or more",
            ),
            (
                "[timing]\nbudget_ms = -5.0\n",
                "[timing] budget_ms must be more than 0, not -5",
            ),
            (
                "[timing]\nmin_samples = 10\nmax_samples = 5\n",
                "max_samples at least min_samples",
            ),
        ] {
            let e = parse(extra).unwrap_err().to_string();
            assert!(
                e.contains(needle) && e.starts_with("config c.toml"),
                "{extra}: {e}"
            );
        }
    }

    #[test]
    fn shapes_inherit_spec() {
        let c = SearchConfig::parse(
            Path::new("configs/x.toml"),
            r#"
problem = "gemm"
family = "gemm_mma"
templates = "../templates"
[spec]
DTYPE = "f16"
[[shapes]]
M = 64
N = 32
K = 16
[[shapes]]
M = 8
N = 8
K = 8
DTYPE = "bf16"
"#,
        )
        .unwrap();
        assert_eq!(c.shapes.len(), 2);
        assert_eq!(c.shapes[0]["DTYPE"], Value::Str("f16".into()));
        assert_eq!(c.shapes[1]["DTYPE"], Value::Str("bf16".into()));
        // The [spec] alone, for shapes given elsewhere (evo profile --shape).
        assert_eq!(
            c.spec,
            Vars::from([("DTYPE".to_string(), Value::Str("f16".into()))])
        );
        assert_eq!(c.templates, Some(PathBuf::from("configs/../templates")));
        assert_eq!(c.compile, CompileConfig::default());
        assert_eq!(c.correctness, CorrectnessConfig::default());
        assert_eq!(c.timing, TimingConfig::default());
    }

    #[test]
    fn gate_sections_parse() {
        let c = SearchConfig::parse(
            Path::new("x.toml"),
            r#"
problem = "gemm"
family = "gemm_mma"
[[shapes]]
M = 8
[correctness]
random_trials = 5
[correctness.tolerance.bf16]
rtol = 0.02
[timing]
enabled = false
[static]
max_spill_bytes = 64
allow_wgmma_serialization = true
[timeouts]
job_base_s = 5.0
"#,
        )
        .unwrap();
        assert_eq!(c.correctness.random_trials, 5);
        assert!(
            c.correctness.adversarial,
            "unset fields keep their defaults"
        );
        assert_eq!(c.correctness.tolerance["bf16"].rtol, Some(0.02));
        assert!(!c.timing.enabled);
        assert_eq!(c.static_rules.max_spill_bytes, 64);
        assert!(c.static_rules.allow_wgmma_serialization);
        assert!(!StaticConfig::default().allow_wgmma_serialization);
        assert_eq!(c.timeouts.job_base_s, 5.0);
    }

    #[test]
    fn errors_name_the_problem() {
        let p = Path::new("c.toml");
        let e = SearchConfig::parse(
            p,
            "problem = \"gemm\"\nfamily = \"x\"\ntypo = 1\n[[shapes]]\nM=1\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("c.toml") && e.contains("typo") && e.contains("line 3"),
            "{e}"
        );
        let e = SearchConfig::parse(p, "problem = \"gemm\"\nfamily = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no [[shapes]]"), "{e}");
        let e = SearchConfig::parse(
            p,
            "problem = \"gemm\"\nfamily = \"x\"\n[[shapes]]\nM = 1.5\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("`M` must be an integer"), "{e}");
    }

    #[test]
    fn search_section_takes_the_strategy_parameters_flat() {
        let p = Path::new("s.toml");
        let head = "problem = \"gemm\"\nfamily = \"x\"\n[[shapes]]\nM = 1\n[search]\n";
        let c = SearchConfig::parse(
            p,
            &format!("{head}population = 8\nseed = 7\npatience = 3\n"),
        )
        .unwrap();
        assert_eq!((c.search.params.population, c.search.params.seed), (8, 7));
        assert_eq!(c.search.params.elites, SearchParams::default().elites);
        assert_eq!(c.search.patience, 3);
        let e = SearchConfig::parse(p, &format!("{head}popluation = 8\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("s.toml") && e.contains("`popluation`") && e.contains("population"),
            "{e}"
        );
        assert_eq!(SearchSection::known_keys().len(), 15);
    }
}
