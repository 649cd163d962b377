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
//! Files under `templates/common/` are registered as `common/<path>`: `*.tera` files are
//! templates themselves; anything else (plain `.cuh` headers) is included verbatim, so
//! CUDA braces never meet Tera's parser.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use evo_core::space::check_expr_names;
use evo_core::target::DEFAULT_ARCH;
use evo_core::{Expr, Genome, Knob, LaunchDims, LaunchRule, Space, Target, Value, Vars};
use rand::SeedableRng;
use serde::Deserialize;

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
    launch: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLaunch {
    kernel: Option<String>,
    grid: Vec<String>,
    block: Vec<String>,
    #[serde(default = "zero")]
    shared_bytes: String,
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
    pub derived: Vec<(String, Expr)>,
    pub constraints: Vec<(String, Expr)>,
    /// One rule per kernel, in launch order.
    pub launches: Vec<LaunchRule>,
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
        let raw: RawFamily = toml::from_str(&text).map_err(|e| FamilyError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
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
            launches.push(rule);
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
            derived,
            constraints,
            launches,
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
        .map_err(|e| FamilyError::Invalid {
            path: self.path.clone(),
            line: None,
            message: e.to_string(),
        })
    }

    /// The context used to validate a family without a config: each specialization
    /// variable at its default (or first) value, on the default target.
    pub fn probe_context(&self) -> Vars {
        let mut ctx = Target::from_arch(DEFAULT_ARCH)
            .expect("default arch is known")
            .vars();
        for v in self.problem.spec_vars() {
            ctx.insert(v.name.to_string(), v.probe_value());
        }
        ctx
    }

    /// Renders the template over a genome's full variables (context, knobs, derived).
    pub fn render_vars(&self, vars: &Vars) -> Result<String, tera::Error> {
        let json: serde_json::Map<String, serde_json::Value> =
            vars.iter().map(|(k, v)| (k.clone(), v.to_json())).collect();
        let ctx = tera::Context::from_value(serde_json::Value::Object(json))?;
        self.tera.render(&self.template_name, &ctx)
    }

    /// Renders one genome in one context of `space`, with a header naming what it is.
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
        let base = space.sample(&mut rng).ok_or_else(|| FamilyError::Invalid {
            path: self.path.clone(),
            line: None,
            message: format!(
                "no genome satisfies every constraint for the probe specialization {}; check [constraints]",
                Genome::from_vars(ctx.clone()).canonical()
            ),
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
