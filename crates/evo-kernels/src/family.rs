//! Declarative kernel families: `templates/<problem>/<family>.toml` + a Tera template.
//!
//! Loading a family checks everything that can be checked without a compiler: the TOML
//! shape (unknown keys are errors), knob value lists, that every expression parses and
//! reads only known variables (knobs, derived values, the problem's specialization,
//! target limits, and for launch rules the shape), that a launch rule exists, that the
//! template and the shared `common/` headers parse, that a valid genome renders with no
//! undefined variable, and that every knob changes the rendered source. Errors name the
//! file and, where there is one, the line.
//!
//! Several kernels: `[[launch]]` tables run in order on one stream (the gates check and
//! time the whole sequence). A launch may give its own `args` (by default every kernel
//! gets the problem's ABI, [`Problem::args`]): a list of input or output tensor names,
//! `[[scratch]]` buffer names, `"@list"` (an argument list the problem offers,
//! [`Problem::arg_lists`]) and `"i32:EXPR"` / `"i64:EXPR"` scalars over knobs, derived
//! values, the specialization and the shape. `[[scratch]]` declares a device buffer of
//! the variant (`name`, `elem`: f16, bf16, f32, e4m3, u8 or DTYPE, `len`: elements, an
//! expression like a launch rule's) that the worker allocates per call and fills with
//! NaN before every checked call. `base = "other.toml"` (a path relative to this file)
//! takes every top-level key of another family file that this one does not set (the
//! template path stays relative to the base); `[knobs]`, `[derived]` and `[constraints]`
//! merge entry by entry instead: the base's entries plus this file's, this file's value
//! winning where both name one (a knob narrowed, a derived value redefined, a knob added).
//! A `[[launch]]` may set `require_sass` (opcodes like "HGMMA") to replace, for its kernel,
//! the family's `require_sass` (e.g. `[]` for a combine kernel without tensor-core work).
//! `[ordinal]` (`KNOB = true`) declares knobs whose value lists are in order (tile sizes,
//! stages): the search may step along them; integer lists must be ascending or
//! descending; it merges from a `base` entry by entry (`false` undoes one).
//! `[defaults]` (`KNOB = value`, one of the knob's values) gives the value a genome that
//! does not name the knob has: the behaviour before the knob existed, so genome strings
//! recorded before it was added (stored runs, config seeds, artifact manifests) stay
//! usable ([`Space::with_defaults`], [`Space::complete`]; the completed genome, default
//! written out, is the genome). It merges from a `base` entry by entry.
//!
//! Files under `templates/common/` are registered as `common/<path>`: `*.tera` files are
//! templates themselves; anything else (plain `.cuh` headers) is included verbatim, so
//! CUDA braces never meet Tera's parser.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use evo_core::config::StaticConfig;
use evo_core::space::check_expr_names;
use evo_core::target::DEFAULT_ARCH;
use evo_core::{Expr, Genome, Knob, LaunchDims, LaunchRule, Space, Target, Value, Vars};
use rand::SeedableRng;
use serde::Deserialize;

use crate::harness::{dtype, ArgSlot, ElemType, MappedBuffer, TensorSpec};
use crate::problem::{problem, Problem};

#[derive(Debug, thiserror::Error)]
pub enum FamilyError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Invalid {
        path: PathBuf,
        line: Option<usize>,
        message: String,
    },
    #[error("template {name}: {message}")]
    Template { name: String, message: String },
    #[error("rendering {family} for genome {genome}: {message}")]
    Render {
        family: String,
        genome: String,
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFamily {
    name: String,
    problem: String,
    template: String,
    #[serde(default)]
    min_arch: u32,
    #[serde(default)]
    description: String,
    #[serde(default)]
    require_sass: Vec<String>,
    knobs: toml::Table,
    #[serde(default)]
    derived: toml::Table,
    #[serde(default)]
    constraints: toml::Table,
    #[serde(default)]
    ordinal: toml::Table,
    #[serde(default)]
    defaults: toml::Table,
    launch: Option<toml::Value>,
    #[serde(default)]
    scratch: Vec<RawScratch>,
    #[serde(default)]
    contiguous: Vec<String>,
    /// Resolved before parsing (see [`Family::load_file`]).
    #[serde(default)]
    #[allow(dead_code)]
    base: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScratch {
    name: String,
    elem: String,
    len: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLaunch {
    kernel: Option<String>,
    grid: Vec<String>,
    block: Vec<String>,
    #[serde(default = "zero")]
    shared_bytes: String,
    args: Option<Vec<String>>,
    require_sass: Option<Vec<String>>,
}

/// One entry of a launch's `args`, resolved at load time.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgRef {
    /// An input, the output or a scratch buffer.
    Slot(ArgSlot),
    I32(Expr),
    I64(Expr),
    /// A named argument list of the problem ([`Problem::arg_lists`]).
    List(String),
    /// The problem's ABI argument at this index of [`Problem::args`] (how an exported
    /// artifact's launch names an ABI parameter).
    Abi(usize),
    /// `tmap:NAME:DIMS:BOX:SWIZZLE[:STRIDES]`: a TMA tensor map over input or scratch
    /// buffer `NAME` (`buffer` of the call's inputs or scratch buffers, `of`) as a tensor of
    /// `dims` (innermost first, `;`-separated expressions), read in `boxes` boxes,
    /// shared-memory swizzle `swizzle` bytes (an expression of the genome that evaluates to
    /// 0, 32, 64 or 128). Without STRIDES the tensor is contiguous; with it, each dimension
    /// after the first strides by the problem's ABI argument named there (`;`-separated
    /// integer parameters, in elements: `strides` holds their ABI indices), the call's own.
    TensorMap {
        buffer: usize,
        of: MappedBuffer,
        dims: Vec<Expr>,
        boxes: Vec<Expr>,
        swizzle: Expr,
        strides: Vec<usize>,
    },
}

/// A scratch buffer of a variant: `len` elements of `elem` (`None`: the DTYPE of the
/// specialization).
#[derive(Clone, Debug, PartialEq)]
pub struct ScratchRule {
    pub name: String,
    pub elem: Option<ElemType>,
    pub len: Expr,
}

fn zero() -> String {
    "0".into()
}

/// A loaded, validated family.
#[derive(Debug)]
pub struct Family {
    pub name: String,
    pub problem: &'static dyn Problem,
    pub description: String,
    /// Lowest compute capability (e.g. 80) the family's code needs.
    pub min_arch: u32,
    /// Tensor-core opcodes (e.g. "HGMMA") the static gate requires in every kernel's SASS.
    pub require_sass: Vec<String>,
    pub knobs: Vec<Knob>,
    /// Knobs whose value lists are in order (`[ordinal]`), so a search may step along
    /// them; the others are categorical.
    pub ordinal: BTreeSet<String>,
    /// `[defaults]`: the value of a knob in a genome that does not name it (genomes
    /// recorded before the knob existed); see [`Space::with_defaults`].
    pub defaults: Vec<(String, Value)>,
    pub derived: Vec<(String, Expr)>,
    pub constraints: Vec<(String, Expr)>,
    /// One rule per kernel, in launch order.
    pub launches: Vec<LaunchRule>,
    /// Each launch's own argument list (`None`: the problem's ABI), in launch order.
    pub launch_args: Vec<Option<Vec<ArgRef>>>,
    /// Each launch's own `require_sass` (`None`: the family's), in launch order.
    pub launch_require_sass: Vec<Option<Vec<String>>>,
    /// Scratch buffers, in the order [`ArgSlot::Scratch`] indexes them.
    pub scratch: Vec<ScratchRule>,
    /// Tensors of the problem (inputs or the output, by name) that the family's kernels
    /// read or write only in the problem's contiguous layout (e.g. through TMA tensor maps
    /// that ignore strides). The correctness gate passes these tensors contiguous and
    /// varies the layout of every other one; an artifact copies them to contiguous.
    pub contiguous: Vec<String>,
    /// The family file.
    pub path: PathBuf,
    template_name: String,
    tera: tera::Tera,
}

/// 1-based line of `key = ...` inside `[section]` (or at top level for `None`).
fn line_of(text: &str, section: Option<&str>, key: &str) -> Option<usize> {
    let mut current: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('[') {
            current = Some(t.trim_matches(|c| c == '[' || c == ']').trim().to_string());
            continue;
        }
        let Some((k, _)) = t.split_once('=') else {
            continue;
        };
        let k = k.trim().trim_matches('"');
        if k == key && current.as_deref() == section {
            return Some(i + 1);
        }
    }
    None
}

/// 1-based line of `key = ...` inside the `index`-th (0-based) `[[table]]`.
fn array_line(text: &str, table: &str, index: usize, key: &str) -> Option<usize> {
    let header = format!("[[{table}]]");
    let mut seen: Option<usize> = None;
    let mut inside = false;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('[') {
            inside = t == header && {
                seen = Some(seen.map_or(0, |n| n + 1));
                seen == Some(index)
            };
            continue;
        }
        if inside {
            if let Some((k, _)) = t.split_once('=') {
                if k.trim().trim_matches('"') == key {
                    return Some(i + 1);
                }
            }
        }
    }
    None
}

/// `text` parsed as a family table, with the keys of its `base` file merged in.
fn with_base(path: &Path, text: &str) -> Result<Option<toml::Table>, FamilyError> {
    let parse = |path: &Path, text: &str| {
        text.parse::<toml::Table>().map_err(|e| FamilyError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })
    };
    let mut table = parse(path, text)?;
    let Some(base) = table.get("base") else {
        return Ok(None);
    };
    let invalid = |message: String| FamilyError::Invalid {
        path: path.to_path_buf(),
        line: line_of(text, None, "base"),
        message,
    };
    let base = base
        .as_str()
        .ok_or_else(|| invalid("`base` must be a path to another family file".into()))?
        .to_string();
    let base_path = path.parent().unwrap_or(Path::new(".")).join(&base);
    let base_text = std::fs::read_to_string(&base_path).map_err(|source| FamilyError::Read {
        path: base_path.clone(),
        source,
    })?;
    let mut base_table = parse(&base_path, &base_text)?;
    if base_table.contains_key("base") {
        return Err(invalid(format!(
            "{} has a `base` itself; one level only",
            base_path.display()
        )));
    }
    // The base's template, relative to this file's folder.
    if let Some(toml::Value::String(t)) = base_table.get("template") {
        let dir = Path::new(&base).parent().unwrap_or(Path::new(""));
        let t = dir.join(t).to_string_lossy().replace('\\', "/");
        base_table.insert("template".into(), toml::Value::String(t));
    }
    for (k, v) in std::mem::take(&mut table) {
        // Knobs, derived values and constraints merge entry by entry (this file's win).
        if let (true, toml::Value::Table(entries), Some(toml::Value::Table(into))) = (
            matches!(
                k.as_str(),
                "knobs" | "derived" | "constraints" | "ordinal" | "defaults"
            ),
            &v,
            base_table.get_mut(&k),
        ) {
            for (name, value) in entries {
                into.insert(name.clone(), value.clone());
            }
            continue;
        }
        base_table.insert(k, v);
    }
    table = base_table;
    table.remove("base");
    Ok(Some(table))
}

/// The knobs `[ordinal]` declares ordered (`KNOB = true`; `false` undoes a base file's
/// declaration). An ordinal knob of integers must list them ascending or descending, so
/// that list order is size order. Errors: (the entry's key, the message).
fn ordinal_knobs(
    table: &toml::Table,
    knobs: &[Knob],
) -> Result<BTreeSet<String>, (String, String)> {
    let mut ordinal = BTreeSet::new();
    for (name, flag) in table {
        let Some(flag) = flag.as_bool() else {
            return Err((
                name.clone(),
                format!(
                    "[ordinal] {name} must be true or false, not {}",
                    flag.type_str()
                ),
            ));
        };
        let knob = knob_named(knobs, name, "ordinal")?;
        let ints: Vec<i64> = knob.values.iter().filter_map(Value::as_int).collect();
        let ascending = ints.windows(2).all(|w| w[0] < w[1]);
        let descending = ints.windows(2).all(|w| w[0] > w[1]);
        if flag && !(ascending || descending) {
            let list: Vec<String> = ints.iter().map(|v| v.to_string()).collect();
            return Err((
                name.clone(),
                format!(
                    "knob `{name}` is declared ordinal but its values [{}] are not in order; list them ascending or descending",
                    list.join(", ")
                ),
            ));
        }
        if flag {
            ordinal.insert(name.clone());
        }
    }
    Ok(ordinal)
}

/// The knob an entry of `[section]` names, or the error (the entry's key, the message, with
/// the closest knob name as a hint).
fn knob_named<'a>(
    knobs: &'a [Knob],
    name: &str,
    section: &str,
) -> Result<&'a Knob, (String, String)> {
    knobs.iter().find(|k| k.name == name).ok_or_else(|| {
        let close = knobs
            .iter()
            .find(|k| evo_core::space::edit_distance(&k.name, name) <= 2)
            .map(|k| format!(" (did you mean `{}`?)", k.name))
            .unwrap_or_default();
        (
            name.to_string(),
            format!("[{section}] names `{name}`, which is not a knob{close}"),
        )
    })
}

/// `[defaults]`: each entry names a knob and is one of its values. Errors: (the entry's
/// key, the message).
fn default_values(
    table: &toml::Table,
    knobs: &[Knob],
) -> Result<Vec<(String, Value)>, (String, String)> {
    let mut defaults = Vec::new();
    for (name, value) in table {
        let knob = knob_named(knobs, name, "defaults")?;
        let listed: Vec<String> = knob.values.iter().map(|v| v.to_string()).collect();
        let Some(value) = Value::from_toml(value).filter(|v| knob.values.contains(v)) else {
            return Err((
                name.clone(),
                format!(
                    "[defaults] {name} = {value} is not one of knob `{name}`'s values [{}]",
                    listed.join(", ")
                ),
            ));
        };
        defaults.push((name.clone(), value));
    }
    Ok(defaults)
}

fn tera_message(e: &tera::Error) -> String {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}

/// Registers `templates/common/**` in `tera` (see the module docs).
fn add_common(tera: &mut tera::Tera, templates_root: &Path) -> Result<(), FamilyError> {
    let common = templates_root.join("common");
    if !common.is_dir() {
        return Ok(());
    }
    let mut stack = vec![common.clone()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| FamilyError::Read {
            path: dir.clone(),
            source,
        })?;
        for entry in entries {
            let path = entry
                .map_err(|source| FamilyError::Read {
                    path: dir.clone(),
                    source,
                })?
                .path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(templates_root).expect("under the root");
            let name = rel.to_string_lossy().replace('\\', "/");
            let text = std::fs::read_to_string(&path).map_err(|source| FamilyError::Read {
                path: path.clone(),
                source,
            })?;
            let body = if name.ends_with(".tera") {
                text
            } else {
                format!("{{% raw %}}{text}{{% endraw %}}")
            };
            tera.add_raw_template(&name, &body)
                .map_err(|e| FamilyError::Template {
                    name: path.display().to_string(),
                    message: tera_message(&e),
                })?;
        }
    }
    Ok(())
}

impl Family {
    /// Loads `templates_root/<problem>/<family>.toml`.
    pub fn load(
        templates_root: &Path,
        problem_name: &str,
        family: &str,
    ) -> Result<Family, FamilyError> {
        Self::load_file(
            &templates_root
                .join(problem_name)
                .join(format!("{family}.toml")),
            templates_root,
        )
    }

    /// Loads a family file; `templates_root` holds `common/`.
    pub fn load_file(path: &Path, templates_root: &Path) -> Result<Family, FamilyError> {
        let text = std::fs::read_to_string(path).map_err(|source| FamilyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let raw: RawFamily = match with_base(path, &text)? {
            None => toml::from_str(&text).map_err(|e| FamilyError::Parse {
                path: path.to_path_buf(),
                message: e.to_string().trim_end().to_string(),
            })?,
            Some(merged) => {
                toml::Value::Table(merged)
                    .try_into()
                    .map_err(|e: toml::de::Error| FamilyError::Parse {
                        path: path.to_path_buf(),
                        message: e.to_string().trim_end().to_string(),
                    })?
            }
        };
        let invalid = |section: Option<&str>, key: &str, message: String| FamilyError::Invalid {
            path: path.to_path_buf(),
            line: line_of(&text, section, key),
            message,
        };

        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if raw.name != stem {
            return Err(invalid(
                None,
                "name",
                format!(
                    "name = \"{}\" but the file is {stem}.toml; they must match",
                    raw.name
                ),
            ));
        }
        let problem = problem(&raw.problem).ok_or_else(|| {
            let known: Vec<&str> = crate::problems().iter().map(|p| p.name()).collect();
            invalid(
                None,
                "problem",
                format!("unknown problem `{}`; known: {known:?}", raw.problem),
            )
        })?;

        // Knobs.
        let mut knobs = Vec::new();
        for (name, values) in &raw.knobs {
            let list = values.as_array().ok_or_else(|| {
                invalid(
                    Some("knobs"),
                    name,
                    format!("knob `{name}` must be a list of values"),
                )
            })?;
            let values = list
                .iter()
                .map(|v| {
                    Value::from_toml(v).ok_or_else(|| {
                        invalid(
                            Some("knobs"),
                            name,
                            format!(
                            "knob `{name}`: values must be integers, strings or booleans, not {}",
                            v.type_str()
                        ),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            knobs.push(Knob {
                name: name.clone(),
                values,
            });
        }
        if knobs.is_empty() {
            return Err(invalid(
                None,
                "knobs",
                "[knobs] is empty: a family needs at least one knob".into(),
            ));
        }

        let ordinal = ordinal_knobs(&raw.ordinal, &knobs)
            .map_err(|(key, message)| invalid(Some("ordinal"), &key, message))?;
        let defaults = default_values(&raw.defaults, &knobs)
            .map_err(|(key, message)| invalid(Some("defaults"), &key, message))?;

        // Names each kind of expression may read.
        let spec_names: Vec<&str> = problem.spec_vars().iter().map(|v| v.name).collect();
        let mut names: BTreeSet<String> = spec_names.iter().map(|s| s.to_string()).collect();
        names.extend(Target::VAR_NAMES.iter().map(|s| s.to_string()));
        names.extend(knobs.iter().map(|k| k.name.clone()));
        let parse_section = |section: &str, table: &toml::Table| {
            table
                .iter()
                .map(|(name, v)| {
                    let src = v.as_str().ok_or_else(|| {
                        invalid(
                            Some(section),
                            name,
                            format!("`{name}` must be an expression in a string"),
                        )
                    })?;
                    let expr = Expr::parse(src)
                        .map_err(|e| invalid(Some(section), name, e.to_string()))?;
                    Ok((name.clone(), expr))
                })
                .collect::<Result<Vec<_>, FamilyError>>()
        };
        let derived = parse_section("derived", &raw.derived)?;
        let constraints = parse_section("constraints", &raw.constraints)?;
        names.extend(derived.iter().map(|(n, _)| n.clone()));
        for (section, list) in [("derived", &derived), ("constraints", &constraints)] {
            for (name, expr) in list {
                check_expr_names(name, expr, &names)
                    .map_err(|e| invalid(Some(section), name, e.to_string()))?;
            }
        }

        // Launch rules: `[launch]` for one kernel, `[[launch]]` for several.
        let raw_launches: Vec<toml::Value> = match raw.launch {
            None => {
                return Err(FamilyError::Invalid {
                    path: path.to_path_buf(),
                    line: None,
                    message: "no [launch] rule: give grid, block and shared_bytes expressions"
                        .into(),
                })
            }
            Some(toml::Value::Array(a)) => a,
            Some(t @ toml::Value::Table(_)) => vec![t],
            Some(other) => {
                return Err(invalid(
                    None,
                    "launch",
                    format!("`launch` must be a table, not {}", other.type_str()),
                ))
            }
        };
        let mut launch_names = names.clone();
        launch_names.extend(problem.shape_vars().iter().map(|v| v.name.to_string()));

        // Scratch buffers.
        let mut scratch: Vec<ScratchRule> = Vec::new();
        for (i, rs) in raw.scratch.iter().enumerate() {
            let at = |key: &str, message: String| FamilyError::Invalid {
                path: path.to_path_buf(),
                line: array_line(&text, "scratch", i, key),
                message: format!("scratch `{}`: {message}", rs.name),
            };
            if scratch.iter().any(|s| s.name == rs.name) {
                return Err(at("name", "declared twice".into()));
            }
            let elem = match rs.elem.as_str() {
                "DTYPE" => None,
                e => Some(ElemType::from_dtype(e).ok_or_else(|| {
                    at(
                        "elem",
                        format!("elem = \"{e}\"; use f16, bf16, f32, e4m3, u8 or DTYPE"),
                    )
                })?),
            };
            let len = Expr::parse(&rs.len).map_err(|e| at("len", e.to_string()))?;
            check_expr_names(&format!("scratch `{}`, len", rs.name), &len, &launch_names)
                .map_err(|e| at("len", e.to_string()))?;
            scratch.push(ScratchRule {
                name: rs.name.clone(),
                elem,
                len,
            });
        }
        // What a launch's `args` may name, from a probe shape.
        let mut probe = Self::probe_vars(problem);
        for v in problem.shape_vars() {
            probe.insert(v.name.to_string(), v.probe_value());
        }
        let input_names: Vec<String> = problem.inputs(&probe).into_iter().map(|t| t.name).collect();
        let abi_params =
            crate::problem::abi_params(problem.abi()).map_err(|e| FamilyError::Invalid {
                path: path.to_path_buf(),
                line: None,
                message: format!("problem `{}`: its ABI text: {e}", problem.name()),
            })?;
        let output_name = problem.output(&probe).name;
        for s in &scratch {
            if input_names.contains(&s.name) || s.name == output_name {
                return Err(FamilyError::Invalid {
                    path: path.to_path_buf(),
                    line: None,
                    message: format!(
                        "scratch `{}` has the name of a tensor of problem `{}`; rename it",
                        s.name,
                        problem.name()
                    ),
                });
            }
        }
        let list_names: Vec<&str> = problem.arg_lists(&probe).iter().map(|(n, _)| *n).collect();
        let mut launch_args = Vec::new();
        let mut launch_require_sass = Vec::new();
        let mut used_scratch = BTreeSet::new();

        let mut launches = Vec::new();
        for (i, rl) in raw_launches.into_iter().enumerate() {
            let rl: RawLaunch =
                rl.try_into()
                    .map_err(|e: toml::de::Error| FamilyError::Invalid {
                        path: path.to_path_buf(),
                        line: None,
                        message: format!("launch rule #{}: {}", i + 1, e.to_string().trim_end()),
                    })?;
            let parse3 = |what: &str, v: &[String]| -> Result<[Expr; 3], FamilyError> {
                let mut exprs: Vec<Expr> = v
                    .iter()
                    .map(|s| {
                        Expr::parse(s).map_err(|e| invalid(Some("launch"), what, e.to_string()))
                    })
                    .collect::<Result<_, _>>()?;
                if exprs.is_empty() || exprs.len() > 3 {
                    return Err(invalid(
                        Some("launch"),
                        what,
                        format!("`{what}` needs 1 to 3 expressions (x, y, z)"),
                    ));
                }
                while exprs.len() < 3 {
                    exprs.push(Expr::int(1));
                }
                Ok([exprs[0].clone(), exprs[1].clone(), exprs[2].clone()])
            };
            let rule = LaunchRule {
                kernel: rl.kernel.unwrap_or_else(|| problem.entry().to_string()),
                grid: parse3("grid", &rl.grid)?,
                block: parse3("block", &rl.block)?,
                shared_bytes: Expr::parse(&rl.shared_bytes)
                    .map_err(|e| invalid(Some("launch"), "shared_bytes", e.to_string()))?,
            };
            for (what, expr) in rule.exprs() {
                check_expr_names(
                    &format!("launch rule of `{}`, {what}", rule.kernel),
                    expr,
                    &launch_names,
                )
                .map_err(|e| {
                    invalid(
                        Some("launch"),
                        what.split('[').next().unwrap_or(""),
                        e.to_string(),
                    )
                })?;
            }
            let args = match &rl.args {
                None => None,
                Some(list) => {
                    let at = |message: String| FamilyError::Invalid {
                        path: path.to_path_buf(),
                        line: array_line(&text, "launch", i, "args"),
                        message: format!(
                            "launch rule #{} (`{}`), args: {message}",
                            i + 1,
                            rule.kernel
                        ),
                    };
                    let mut refs = Vec::new();
                    for a in list {
                        let a = a.trim();
                        let r = if let Some(name) = a.strip_prefix('@') {
                            if !list_names.contains(&name) {
                                return Err(at(format!(
                                    "`{a}`: problem `{}` offers no argument list `{name}` (it has {list_names:?})",
                                    problem.name()
                                )));
                            }
                            ArgRef::List(name.to_string())
                        } else if let Some(spec) = a.strip_prefix("tmap:") {
                            let parts: Vec<&str> = spec.split(':').collect();
                            let (name, dims, boxes, swizzle, strides) = match parts[..] {
                                [name, dims, boxes, swizzle] => (name, dims, boxes, swizzle, None),
                                [name, dims, boxes, swizzle, strides] => {
                                    (name, dims, boxes, swizzle, Some(strides))
                                }
                                _ => {
                                    return Err(at(format!(
                                        "`{a}`: write tmap:NAME:DIM0;DIM1;...:BOX0;BOX1;...:SWIZZLE, or with :STRIDE1;STRIDE2;... after it (NAME an input or a [[scratch]] buffer; dimensions innermost first; each STRIDE an integer ABI parameter of the problem, in elements)"
                                    )))
                                }
                            };
                            let name = name.trim();
                            let (buffer, of) = if let Some(j) =
                                input_names.iter().position(|n| n == name)
                            {
                                (j, MappedBuffer::Input)
                            } else if let Some(j) = scratch.iter().position(|s| s.name == name) {
                                used_scratch.insert(j);
                                (j, MappedBuffer::Scratch)
                            } else {
                                let scratch_names: Vec<&str> =
                                    scratch.iter().map(|s| s.name.as_str()).collect();
                                return Err(at(format!(
                                    "`{a}`: `{name}` is neither an input {input_names:?} nor a [[scratch]] buffer {scratch_names:?}"
                                )));
                            };
                            let exprs = |list: &str| -> Result<Vec<Expr>, FamilyError> {
                                list.split(';')
                                    .map(|e| {
                                        let x = Expr::parse(e.trim())
                                            .map_err(|err| at(format!("`{a}`: {err}")))?;
                                        check_expr_names(
                                            &format!("argument `{a}`"),
                                            &x,
                                            &launch_names,
                                        )
                                        .map_err(|err| at(err.to_string()))?;
                                        Ok(x)
                                    })
                                    .collect()
                            };
                            let (dims, boxes) = (exprs(dims)?, exprs(boxes)?);
                            if !(1..=5).contains(&dims.len()) || dims.len() != boxes.len() {
                                return Err(at(format!(
                                    "`{a}`: {} dimensions and {} box sizes; a tensor map has 1 to 5 of each, as many boxes as dimensions",
                                    dims.len(),
                                    boxes.len()
                                )));
                            }
                            let swizzle = Expr::parse(swizzle.trim())
                                .map_err(|err| at(format!("`{a}`: swizzle: {err}")))?;
                            check_expr_names(&format!("argument `{a}`"), &swizzle, &launch_names)
                                .map_err(|err| at(err.to_string()))?;
                            // A literal is checked now; an expression of the genome when resolved.
                            if swizzle.variables().is_empty() {
                                let bytes = swizzle
                                    .eval_int(&evo_core::expr::Scope::new())
                                    .map_err(|err| at(format!("`{a}`: swizzle: {err}")))?;
                                swizzle_bytes(bytes).map_err(|err| at(format!("`{a}`: {err}")))?;
                            }
                            let strides = match strides {
                                None => Vec::new(),
                                Some(list) => {
                                    let names: Vec<&str> = list.split(';').map(str::trim).collect();
                                    if names.len() + 1 != dims.len() {
                                        return Err(at(format!(
                                            "`{a}`: {} strides for {} dimensions; a strided map gives one per dimension after the first",
                                            names.len(),
                                            dims.len()
                                        )));
                                    }
                                    names
                                        .iter()
                                        .map(|n| abi_integer(&abi_params, n))
                                        .collect::<Result<Vec<_>, _>>()
                                        .map_err(|err| at(format!("`{a}`: {err}")))?
                                }
                            };
                            ArgRef::TensorMap {
                                buffer,
                                of,
                                dims,
                                boxes,
                                swizzle,
                                strides,
                            }
                        } else if let Some((ty, src)) = a.split_once(':') {
                            let expr = Expr::parse(src).map_err(|e| at(format!("`{a}`: {e}")))?;
                            check_expr_names(&format!("argument `{a}`"), &expr, &launch_names)
                                .map_err(|e| at(e.to_string()))?;
                            match ty.trim() {
                                "i32" => ArgRef::I32(expr),
                                "i64" => ArgRef::I64(expr),
                                other => {
                                    return Err(at(format!(
                                        "`{a}`: scalar type `{other}`; use i32:EXPR or i64:EXPR (float scalars come from the problem's @lists)"
                                    )))
                                }
                            }
                        } else if let Some(j) = input_names.iter().position(|n| n == a) {
                            ArgRef::Slot(ArgSlot::Input(j))
                        } else if a == output_name {
                            ArgRef::Slot(ArgSlot::Output)
                        } else if let Some(j) = scratch.iter().position(|s| s.name == a) {
                            used_scratch.insert(j);
                            ArgRef::Slot(ArgSlot::Scratch(j))
                        } else {
                            let scratch_names: Vec<&str> =
                                scratch.iter().map(|s| s.name.as_str()).collect();
                            return Err(at(format!(
                                "unknown argument `{a}`: not an input {input_names:?}, the output `{output_name}`, a [[scratch]] buffer {scratch_names:?}, an argument list @{list_names:?}, or an i32:/i64: expression"
                            )));
                        };
                        refs.push(r);
                    }
                    Some(refs)
                }
            };
            launch_args.push(args);
            launch_require_sass.push(rl.require_sass);
            launches.push(rule);
        }
        if let Some((i, s)) = scratch
            .iter()
            .enumerate()
            .find(|(i, _)| !used_scratch.contains(i))
        {
            return Err(FamilyError::Invalid {
                path: path.to_path_buf(),
                line: array_line(&text, "scratch", i, "name"),
                message: format!(
                    "scratch `{}` is declared but no [[launch]] passes it in its args",
                    s.name
                ),
            });
        }

        // Layout: what the family needs contiguous, and that every tensor map over an input is
        // over such a tensor (a map views its input as contiguous whatever strides the call
        // passes; a scratch buffer is contiguous by construction).
        let contiguous_at = |message: String| FamilyError::Invalid {
            path: path.to_path_buf(),
            line: line_of(&text, None, "contiguous"),
            message,
        };
        let tensor_names: Vec<&str> = input_names
            .iter()
            .map(String::as_str)
            .chain([output_name.as_str()])
            .collect();
        let mut contiguous = Vec::new();
        for name in &raw.contiguous {
            if !tensor_names.contains(&name.as_str()) {
                return Err(contiguous_at(format!(
                    "contiguous: `{name}` is not a tensor of problem `{}` (it has {tensor_names:?})",
                    problem.name()
                )));
            }
            if contiguous.contains(name) {
                return Err(contiguous_at(format!(
                    "contiguous: `{name}` is named twice"
                )));
            }
            contiguous.push(name.clone());
        }
        for (i, args) in launch_args.iter().enumerate() {
            for a in args.iter().flatten() {
                if let ArgRef::TensorMap {
                    buffer,
                    of: MappedBuffer::Input,
                    strides,
                    ..
                } = a
                {
                    if !strides.is_empty() {
                        continue;
                    }
                    let name = &input_names[*buffer];
                    if !contiguous.contains(name) {
                        return Err(FamilyError::Invalid {
                            path: path.to_path_buf(),
                            line: array_line(&text, "launch", i, "args")
                                .or_else(|| line_of(&text, Some("launch"), "args")),
                            message: format!(
                                "a tensor map views input `{name}` as a contiguous tensor, but the family does not declare it: give the map the call's strides (tmap:...:SWIZZLE:STRIDES), or add `contiguous = [\"{name}\", ...]` at the top of the file (the gate then tests `{name}` contiguous only, and an artifact copies it to contiguous)"
                            ),
                        });
                    }
                }
            }
        }

        // Template and shared headers.
        let template_path = path.parent().unwrap_or(Path::new(".")).join(&raw.template);
        let template_text =
            std::fs::read_to_string(&template_path).map_err(|source| FamilyError::Read {
                path: template_path.clone(),
                source,
            })?;
        let mut tera = tera::Tera::default();
        tera.autoescape_on(vec![]);
        add_common(&mut tera, templates_root)?;
        let template_name = format!("{}/{}", raw.problem, raw.template);
        tera.add_raw_template(&template_name, &template_text)
            .map_err(|e| FamilyError::Template {
                name: template_path.display().to_string(),
                message: tera_message(&e),
            })?;

        let family = Family {
            name: raw.name,
            problem,
            description: raw.description,
            min_arch: raw.min_arch,
            require_sass: raw.require_sass,
            knobs,
            ordinal,
            defaults,
            derived,
            constraints,
            launches,
            launch_args,
            launch_require_sass,
            scratch,
            contiguous,
            path: path.to_path_buf(),
            template_name,
            tera,
        };
        family.check_renders()?;
        Ok(family)
    }

    /// The space of this family bound to compile contexts (specialization + target vars).
    pub fn space(&self, contexts: Vec<Vars>) -> Result<Space, FamilyError> {
        Space::new(
            self.knobs.clone(),
            self.derived.clone(),
            self.constraints.clone(),
            contexts,
        )
        .and_then(|space| space.with_ordinal(self.ordinal.iter().cloned()))
        .and_then(|space| space.with_defaults(self.defaults.iter().cloned()))
        .map_err(|e| FamilyError::Invalid {
            path: self.path.clone(),
            line: None,
            message: e.to_string(),
        })
    }

    /// The context used to validate a family without a config: each specialization
    /// variable at its default (or first) value, on the default target.
    pub fn probe_context(&self) -> Vars {
        Self::probe_vars(self.problem)
    }

    fn probe_vars(problem: &dyn Problem) -> Vars {
        let mut ctx = Target::from_arch(DEFAULT_ARCH)
            .expect("default arch is known")
            .vars();
        for v in problem.spec_vars() {
            ctx.insert(v.name.to_string(), v.probe_value());
        }
        ctx
    }

    /// A config's static rules plus this family's opcode requirements: `require_sass` for
    /// every kernel, except a kernel whose launches set their own (the union of those).
    pub fn static_rules(&self, rules: StaticConfig) -> StaticConfig {
        let launches = || self.launches.iter().zip(&self.launch_require_sass);
        let with_own: BTreeSet<&str> = launches()
            .filter(|(_, q)| q.is_some())
            .map(|(r, _)| r.kernel.as_str())
            .collect();
        let mut own: Vec<(String, Vec<String>)> = Vec::new();
        for kernel in with_own {
            // Each launch of the kernel adds its list; a launch with none adds the family's.
            let mut ops: Vec<String> = Vec::new();
            for (_, q) in launches().filter(|(r, _)| r.kernel == kernel) {
                for op in q.as_ref().unwrap_or(&self.require_sass) {
                    if !ops.contains(op) {
                        ops.push(op.clone());
                    }
                }
            }
            own.push((kernel.to_string(), ops));
        }
        rules.requiring_per_kernel(&self.require_sass, &own)
    }

    /// Whether the kernels take their own argument lists or scratch (else each gets the
    /// problem's ABI).
    pub fn is_multi_arg(&self) -> bool {
        !self.scratch.is_empty() || self.launch_args.iter().any(Option::is_some)
    }

    /// Each kernel's arguments for a genome's variables plus a (complete) shape, in launch
    /// order; empty when no launch has its own `args` (every kernel gets the ABI).
    pub fn launch_args(&self, vars: &Vars, shape: &Vars) -> Result<Vec<Vec<ArgSlot>>, String> {
        if !self.is_multi_arg() {
            return Ok(Vec::new());
        }
        resolve_launch_args(
            self.problem,
            &self.launches,
            &self.launch_args,
            &self.scratch,
            vars,
            shape,
        )
    }

    /// The scratch buffers of a genome on a (complete) shape, in [`ArgSlot::Scratch`] order.
    pub fn scratch_specs(&self, vars: &Vars, shape: &Vars) -> Result<Vec<TensorSpec>, String> {
        resolve_scratch(&self.scratch, vars, shape)
    }

    /// Renders the template over a genome's full variables (context, knobs, derived).
    pub fn render_vars(&self, vars: &Vars) -> Result<String, tera::Error> {
        let json: serde_json::Map<String, serde_json::Value> =
            vars.iter().map(|(k, v)| (k.clone(), v.to_json())).collect();
        let ctx = tera::Context::from_value(serde_json::Value::Object(json))?;
        self.tera.render(&self.template_name, &ctx)
    }

    /// Renders one genome in one context of `space`, with a header naming what it is. A
    /// genome that lacks a knob with a default renders as its completion
    /// ([`Space::complete`]), header included: the same source as the default written out.
    pub fn render(
        &self,
        space: &Space,
        genome: &Genome,
        context: usize,
    ) -> Result<String, FamilyError> {
        let render_err = |message: String| FamilyError::Render {
            family: self.name.clone(),
            genome: genome.canonical(),
            message,
        };
        let completed;
        let genome = match space.complete(genome) {
            Ok(g) => {
                completed = g;
                &completed
            }
            // Not a genome of the space: render what was given (a missing knob is the
            // template's undefined variable).
            Err(_) => genome,
        };
        let vars = space
            .vars(genome, context)
            .map_err(|e| render_err(e.to_string()))?;
        let body = self
            .render_vars(&vars)
            .map_err(|e| render_err(tera_message(&e)))?;
        let spec: Vec<String> = self
            .problem
            .spec_vars()
            .iter()
            .filter_map(|d| vars.get(d.name).map(|v| format!("{}={v}", d.name)))
            .collect();
        Ok(format!(
            "// evo: family {} (problem {}), genome {} [{}], specialization {}, ARCH={}\n{body}",
            self.name,
            self.problem.name(),
            genome.canonical(),
            genome.hash(),
            spec.join(","),
            vars.get("ARCH").map(|v| v.to_string()).unwrap_or_default(),
        ))
    }

    /// Launch geometry of every kernel for a genome's variables plus a shape.
    pub fn launch_dims(
        &self,
        vars: &Vars,
        shape: &Vars,
    ) -> Result<Vec<(String, LaunchDims)>, evo_core::launch::LaunchError> {
        let mut all = vars.clone();
        all.extend(shape.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.launches
            .iter()
            .map(|rule| rule.eval(&all).map(|d| (rule.kernel.clone(), d)))
            .collect()
    }

    /// Load-time check: a valid genome of the probe context renders, and each knob,
    /// moved alone, changes the rendered source.
    fn check_renders(&self) -> Result<(), FamilyError> {
        let ctx = self.probe_context();
        let space = self.space(vec![ctx.clone()])?;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        let base = space.sample(&mut rng).ok_or_else(|| {
            // A constraint that cannot be evaluated (an operator without an operand, which
            // evalexpr only refuses when it runs; a division by zero) rejects every genome:
            // name it rather than an empty space.
            let first = Genome::from_vars(
                self.knobs
                    .iter()
                    .map(|k| (k.name.clone(), k.values[0].clone()))
                    .collect(),
            );
            let message = match space.rejection(&first) {
                Some(evo_core::space::Rejection {
                    constraint,
                    error: Some(e),
                    ..
                }) => format!("constraint `{constraint}` cannot be evaluated: {e}"),
                _ => format!(
                    "no genome satisfies every constraint for the probe specialization {}; check [constraints]",
                    Genome::from_vars(ctx.clone()).canonical()
                ),
            };
            FamilyError::Invalid {
                path: self.path.clone(),
                line: None,
                message,
            }
        })?;
        let base_src = self.render(&space, &base, 0)?;
        let base_body = base_src.split_once('\n').map(|(_, b)| b).unwrap_or("");
        for knob in &self.knobs {
            let mut changed = false;
            for value in &knob.values {
                if Some(value) == base.get(&knob.name) {
                    continue;
                }
                let mut g = base.clone();
                g.set(knob.name.clone(), value.clone());
                // Constraints may reject the neighbour; rendering does not care, but a
                // derived value may fail to evaluate: then this neighbour proves nothing.
                let Ok(vars) = space.vars(&g, 0) else {
                    continue;
                };
                if let Ok(body) = self.render_vars(&vars) {
                    if body != base_body {
                        changed = true;
                        break;
                    }
                }
            }
            if !changed && knob.values.len() > 1 {
                return Err(FamilyError::Invalid {
                    path: self.path.clone(),
                    line: None,
                    message: format!(
                        "knob `{}` never changes the rendered source (from genome {}); every knob must reach the template",
                        knob.name,
                        base.canonical()
                    ),
                });
            }
        }
        Ok(())
    }
}

/// Each kernel's arguments (`launch_args[i]`, `None`: the problem's ABI) for a genome's
/// variables plus a (complete) shape, in launch order. The problem's scalar arguments
/// stay symbolic ([`ArgSlot::Abi`]): the worker binds them to each call's strides and
/// scalars ([`bind_abi`]). `scratch` gives the element type of a tensor map over a
/// scratch buffer. A [`Family`] and an exported artifact (`evo verify`) resolve their
/// argument lists with this one function.
pub fn resolve_launch_args(
    problem: &dyn Problem,
    launches: &[LaunchRule],
    launch_args: &[Option<Vec<ArgRef>>],
    scratch: &[ScratchRule],
    vars: &Vars,
    shape: &Vars,
) -> Result<Vec<Vec<ArgSlot>>, String> {
    let mut all = vars.clone();
    all.extend(shape.iter().map(|(k, v)| (k.clone(), v.clone())));
    let scope = evo_core::expr::Scope::from_vars(&all);
    let abi = problem.args(shape);
    let lists = problem.arg_lists(shape);
    launches
        .iter()
        .zip(launch_args)
        .map(|(rule, args)| {
            let Some(args) = args else {
                return Ok((0..abi.len()).map(|i| symbolic(&abi, i)).collect());
            };
            let mut out = Vec::new();
            for a in args {
                let eval = |e: &Expr| {
                    e.eval_int(&scope)
                        .map_err(|err| format!("arguments of `{}`: {err}", rule.kernel))
                };
                match a {
                    ArgRef::Slot(s) => out.push(*s),
                    ArgRef::Abi(i) if *i < abi.len() => out.push(symbolic(&abi, *i)),
                    ArgRef::Abi(i) => {
                        return Err(format!(
                            "arguments of `{}`: ABI argument {i} of {}",
                            rule.kernel,
                            abi.len()
                        ))
                    }
                    ArgRef::I64(e) => out.push(ArgSlot::I64(eval(e)?)),
                    ArgRef::I32(e) => {
                        let v = eval(e)?;
                        let v = i32::try_from(v).map_err(|_| {
                            format!(
                                "arguments of `{}`: i32:{} = {v} does not fit in 32 bits",
                                rule.kernel,
                                e.source()
                            )
                        })?;
                        out.push(ArgSlot::I32(v));
                    }
                    ArgRef::TensorMap {
                        buffer,
                        of,
                        dims,
                        boxes,
                        swizzle,
                        strides,
                    } => {
                        let elem = match of {
                            MappedBuffer::Input => problem
                                .inputs(shape)
                                .get(*buffer)
                                .map(|t| t.elem)
                                .ok_or_else(|| format!("no input {buffer}"))?,
                            MappedBuffer::Scratch => scratch
                                .get(*buffer)
                                .map(|s| s.elem.unwrap_or_else(|| dtype(shape)))
                                .ok_or_else(|| format!("no scratch buffer {buffer}"))?,
                        };
                        let swizzle = swizzle_bytes(eval(swizzle)?)?;
                        let mut slot =
                            tensor_map_slot((*buffer, *of), elem, dims, boxes, swizzle, &eval)?;
                        for (k, &i) in strides.iter().enumerate() {
                            slot.stride_abi[k] = Some(u16::try_from(i).map_err(|_| {
                                format!("tensor map stride: ABI argument {i} is out of range")
                            })?);
                        }
                        out.push(ArgSlot::TensorMap(slot));
                    }
                    ArgRef::List(name) => {
                        let range = arg_list(&lists, name)?;
                        if range.end > abi.len() {
                            return Err(format!("argument list `{name}` runs past the ABI"));
                        }
                        out.extend(range.map(|i| symbolic(&abi, i)));
                    }
                }
            }
            Ok(out)
        })
        .collect()
}

/// The ABI index of integer parameter `name` (a tensor map's stride).
fn abi_integer(params: &[crate::problem::AbiParam], name: &str) -> Result<usize, String> {
    match params.iter().position(|p| p.name == name) {
        Some(i) if matches!(params[i].kind.as_str(), "i32" | "i64") => Ok(i),
        Some(i) => Err(format!(
            "stride `{name}` is a {} parameter, not an integer",
            params[i].ctype
        )),
        None => {
            let integers: Vec<&str> = params
                .iter()
                .filter(|p| matches!(p.kind.as_str(), "i32" | "i64"))
                .map(|p| p.name.as_str())
                .collect();
            Err(format!(
                "stride `{name}` is not a parameter of the problem's ABI (its integers: {})",
                integers.join(", ")
            ))
        }
    }
}

/// ABI argument `i` as a launch list holds it: a tensor as its slot (the same in every
/// call), anything else (sizes, strides, scalars) symbolic, for each call to bind.
fn symbolic(abi: &[ArgSlot], i: usize) -> ArgSlot {
    match abi[i] {
        s @ (ArgSlot::Input(_) | ArgSlot::Output | ArgSlot::Scratch(_)) => s,
        _ => ArgSlot::Abi(i),
    }
}

/// `args` with every [`ArgSlot::Abi`] replaced by that argument of `abi` (a call's
/// [`Problem::call_args`]), and every tensor map's strides from the ABI written in bytes;
/// an index past it is an error, and so is a stride that is not a non-negative integer.
pub fn bind_abi(args: &[ArgSlot], abi: &[ArgSlot]) -> Result<Vec<ArgSlot>, String> {
    let get = |i: usize| {
        abi.get(i).copied().ok_or_else(|| {
            format!(
                "argument names ABI argument {i}, but the ABI has {}",
                abi.len()
            )
        })
    };
    args.iter()
        .map(|a| match *a {
            ArgSlot::Abi(i) => get(i),
            ArgSlot::TensorMap(mut m) => {
                for k in 0..m.stride_abi.len() {
                    let Some(i) = m.stride_abi[k].take() else {
                        continue;
                    };
                    let elements = match get(usize::from(i))? {
                        ArgSlot::I64(x) => x,
                        ArgSlot::I32(x) => i64::from(x),
                        other => {
                            return Err(format!(
                                "a tensor map's stride {} is ABI argument {i}, which is {other:?}, not an integer",
                                k + 1
                            ))
                        }
                    };
                    m.strides_bytes[k] = u64::try_from(elements)
                        .ok()
                        .and_then(|e| e.checked_mul(m.elem.size() as u64))
                        .ok_or_else(|| {
                            format!(
                                "a tensor map's stride {} (ABI argument {i}) is {elements} elements",
                                k + 1
                            )
                        })?;
                }
                Ok(ArgSlot::TensorMap(m))
            }
            other => Ok(other),
        })
        .collect()
}

/// The range of [`Problem::args`] that the argument list `name` of `lists`
/// ([`Problem::arg_lists`]) covers.
pub fn arg_list(
    lists: &[(&'static str, std::ops::Range<usize>)],
    name: &str,
) -> Result<std::ops::Range<usize>, String> {
    lists
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, r)| r.clone())
        .ok_or_else(|| format!("no argument list `{name}`"))
}

/// The scratch buffers of `scratch` for a genome's variables on a (complete) shape, in
/// [`ArgSlot::Scratch`] order.
pub fn resolve_scratch(
    scratch: &[ScratchRule],
    vars: &Vars,
    shape: &Vars,
) -> Result<Vec<TensorSpec>, String> {
    let mut all = vars.clone();
    all.extend(shape.iter().map(|(k, v)| (k.clone(), v.clone())));
    let scope = evo_core::expr::Scope::from_vars(&all);
    scratch
        .iter()
        .map(|s| {
            let len = s
                .len
                .eval_int(&scope)
                .map_err(|e| format!("scratch `{}`: {e}", s.name))?;
            if len < 1 {
                return Err(format!(
                    "scratch `{}`: len = {len}; it must be at least 1",
                    s.name
                ));
            }
            Ok(TensorSpec {
                name: s.name.clone(),
                elem: s.elem.unwrap_or_else(|| dtype(shape)),
                len: len as usize,
            })
        })
        .collect()
}

/// A tensor map's shared-memory swizzle span, checked: 0 (none), 32, 64 or 128 bytes.
pub fn swizzle_bytes(bytes: i64) -> Result<u32, String> {
    match bytes {
        0 | 32 | 64 | 128 => Ok(bytes as u32),
        other => Err(format!("swizzle `{other}` is not 0, 32, 64 or 128")),
    }
}

/// A tensor-map slot over a contiguous tensor (`buffer` of kind `of`): byte strides from
/// the dimensions and the element size; each dimension and box evaluated by `eval`.
fn tensor_map_slot(
    (buffer, of): (usize, MappedBuffer),
    elem: crate::harness::ElemType,
    dims: &[Expr],
    boxes: &[Expr],
    swizzle: u32,
    eval: &dyn Fn(&Expr) -> Result<i64, String>,
) -> Result<crate::harness::TensorMapSlot, String> {
    let mut slot = crate::harness::TensorMapSlot {
        buffer,
        of,
        elem,
        rank: dims.len() as u8,
        dims: [1; 5],
        strides_bytes: [0; 4],
        box_dims: [1; 5],
        swizzle_bytes: swizzle,
        stride_abi: [None; 4],
    };
    let mut stride = elem.size() as u64;
    for (i, (d, b)) in dims.iter().zip(boxes).enumerate() {
        let d = u64::try_from(eval(d)?).map_err(|_| format!("tensor map dimension {i} < 0"))?;
        let b = u32::try_from(eval(b)?).map_err(|_| format!("tensor map box {i} out of range"))?;
        slot.dims[i] = d;
        slot.box_dims[i] = b;
        if i > 0 {
            slot.strides_bytes[i - 1] = stride;
        }
        stride *= d;
    }
    Ok(slot)
}
