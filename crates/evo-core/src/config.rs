//! The search configuration file (`configs/*.toml`).
//!
//! ```toml
//! problem = "gemm"              # which problem (ABI, reference, shapes' meaning)
//! family = "gemm_mma"           # templates/<problem>/<family>.toml
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
//! ```

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

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    problem: String,
    family: String,
    templates: Option<PathBuf>,
    #[serde(default)]
    spec: toml::Table,
    #[serde(default)]
    shapes: Vec<toml::Table>,
    #[serde(default)]
    compile: CompileConfig,
}

/// A loaded configuration; shapes already carry the `[spec]` values they inherit.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SearchConfig {
    pub path: PathBuf,
    pub problem: String,
    pub family: String,
    /// Templates folder named by the config, resolved against the config's folder.
    pub templates: Option<PathBuf>,
    pub shapes: Vec<Vars>,
    pub compile: CompileConfig,
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
                let mut vars = spec.clone();
                vars.extend(table_to_vars(path, &format!("shape #{}", i + 1), t)?);
                Ok(vars)
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        let base = path.parent().unwrap_or(Path::new("."));
        Ok(SearchConfig {
            path: path.to_path_buf(),
            problem: raw.problem,
            family: raw.family,
            templates: raw.templates.map(|t| base.join(t)),
            shapes,
            compile: raw.compile,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(c.templates, Some(PathBuf::from("configs/../templates")));
        assert_eq!(c.compile, CompileConfig::default());
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
}
