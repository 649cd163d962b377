//! Hand-written kernels checked with `evo check`: a `.cu` file implementing a problem's
//! ABI, with its launch rule (and, for test suites, the expected verdict) in header
//! comments:
//!
//! ```text
//! // evo-launch: grid = ceil_div(N, 16), ceil_div(M, 16); block = 16, 16; shared_bytes = 0
//! // evo-expect: incorrect
//! // evo-why: writes one element past the end of C
//! // evo-contiguous: a, b
//! ```
//!
//! `evo-contiguous` names the tensors the kernel reads or writes only in the problem's
//! contiguous layout (as a family's `contiguous`); the gate varies the layout of every
//! other tensor the ABI lets a caller lay out.
//!
//! Launch expressions read the problem's shape and specialization variables.

use std::collections::BTreeSet;

use evo_core::space::check_expr_names;
use evo_core::{Expr, LaunchRule};

use crate::problem::Problem;

/// What the header of a hand-written kernel says.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub launch: Option<String>,
    pub expect: Option<String>,
    pub why: Option<String>,
    pub contiguous: Vec<String>,
}

/// Reads the `// evo-...:` lines at the top of a file (before the first other line).
pub fn header(source: &str) -> Header {
    let mut h = Header {
        launch: None,
        expect: None,
        why: None,
        contiguous: Vec::new(),
    };
    for line in source.lines() {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        let Some(rest) = t.strip_prefix("//") else {
            break;
        };
        let rest = rest.trim();
        let take = |key: &str| rest.strip_prefix(key).map(|v| v.trim().to_string());
        if let Some(v) = take("evo-launch:") {
            h.launch = Some(v);
        } else if let Some(v) = take("evo-expect:") {
            h.expect = Some(v);
        } else if let Some(v) = take("evo-why:") {
            h.why = Some(v);
        } else if let Some(v) = take("evo-contiguous:") {
            h.contiguous = v
                .split(',')
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
                .collect();
        }
    }
    h
}

/// Splits at `sep` outside parentheses.
fn split_top(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            c if c == sep && depth == 0 => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// Parses `grid = a, b[, c]; block = x[, y[, z]]; shared_bytes = s` for the problem's
/// entry kernel, checking that expressions read only shape and specialization variables.
pub fn parse_launch(problem: &dyn Problem, text: &str) -> Result<LaunchRule, String> {
    let names: BTreeSet<String> = problem
        .spec_vars()
        .iter()
        .chain(problem.shape_vars())
        .map(|v| v.name.to_string())
        .collect();
    let (mut grid, mut block, mut shared) = (None, None, Expr::int(0));
    for part in split_top(text, ';')
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let (key, value) = part.split_once('=').ok_or_else(|| {
            format!("`{part}` is not `key = value` (keys: grid, block, shared_bytes)")
        })?;
        let exprs = split_top(value, ',')
            .into_iter()
            .map(|e| {
                let e = Expr::parse(e.trim()).map_err(|e| e.to_string())?;
                check_expr_names(key.trim(), &e, &names).map_err(|e| e.to_string())?;
                Ok(e)
            })
            .collect::<Result<Vec<Expr>, String>>()?;
        let three = |mut v: Vec<Expr>| -> Result<[Expr; 3], String> {
            if v.is_empty() || v.len() > 3 {
                return Err(format!("`{}` needs 1 to 3 expressions", key.trim()));
            }
            while v.len() < 3 {
                v.push(Expr::int(1));
            }
            Ok([v[0].clone(), v[1].clone(), v[2].clone()])
        };
        match key.trim() {
            "grid" => grid = Some(three(exprs)?),
            "block" => block = Some(three(exprs)?),
            "shared_bytes" => {
                shared = exprs
                    .into_iter()
                    .next()
                    .ok_or("shared_bytes needs an expression")?;
            }
            other => {
                return Err(format!(
                    "unknown launch key `{other}` (keys: grid, block, shared_bytes)"
                ))
            }
        }
    }
    Ok(LaunchRule {
        kernel: problem.entry().to_string(),
        grid: grid.ok_or("the launch rule has no `grid`")?,
        block: block.ok_or("the launch rule has no `block`")?,
        shared_bytes: shared,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use evo_core::{Value, Vars};

    #[test]
    fn header_and_launch() {
        let src = "// evo-expect: crashed\n// evo-launch: grid = ceil_div(N, 16), ceil_div(M, 16); block = 16, 16; shared_bytes = 0\n// evo-why: far write\n#include <x>\n// evo-expect: ignored after code\n";
        let h = header(src);
        assert_eq!(h.expect.as_deref(), Some("crashed"));
        assert_eq!(h.why.as_deref(), Some("far write"));
        let p = crate::problem("gemm").unwrap();
        let rule = parse_launch(p, h.launch.as_deref().unwrap()).unwrap();
        let vars: Vars = [("M", 100), ("N", 33), ("K", 8)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), Value::Int(v)))
            .collect();
        let d = rule.eval(&vars).unwrap();
        assert_eq!(
            (d.grid, d.block, d.shared_bytes),
            ([3, 7, 1], [16, 16, 1], 0)
        );
    }

    #[test]
    fn launch_errors() {
        let p = crate::problem("gemm").unwrap();
        assert!(parse_launch(p, "grid = 1; block = 32; warps = 4")
            .unwrap_err()
            .contains("unknown launch key"));
        assert!(parse_launch(p, "grid = ceil_div(SEQ, 4); block = 32")
            .unwrap_err()
            .contains("SEQ"));
        assert!(parse_launch(p, "block = 32")
            .unwrap_err()
            .contains("no `grid`"));
        assert!(parse_launch(p, "grid = 1, 2, 3, 4; block = 1")
            .unwrap_err()
            .contains("1 to 3"));
    }
}
