//! Launch geometry of one kernel as expressions over a genome's variables and a shape.

use serde::{Deserialize, Serialize};

use crate::expr::{Expr, ExprError, Scope};
use crate::value::Vars;

/// Grid, block and dynamic shared memory of one kernel, as written in a family file.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchRule {
    /// The `extern "C"` kernel symbol this rule launches.
    pub kernel: String,
    pub grid: [Expr; 3],
    pub block: [Expr; 3],
    pub shared_bytes: Expr,
}

/// A launch rule evaluated for one genome and shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchDims {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
}

impl LaunchDims {
    pub fn threads_per_block(&self) -> u32 {
        self.block.iter().product()
    }
}

/// `grid 8x8x1, block 192x1x1, 73792 B shared` (for messages).
impl std::fmt::Display for LaunchDims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [gx, gy, gz] = self.grid;
        let [bx, by, bz] = self.block;
        write!(
            f,
            "grid {gx}x{gy}x{gz}, block {bx}x{by}x{bz}, {} B shared",
            self.shared_bytes
        )
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LaunchError {
    #[error(transparent)]
    Expr(#[from] ExprError),
    #[error("launch rule of `{kernel}`: {what} = {value} is out of range ({range})")]
    OutOfRange {
        kernel: String,
        what: &'static str,
        value: i64,
        range: &'static str,
    },
}

impl LaunchRule {
    /// All expressions of the rule with a label, for validation messages.
    pub fn exprs(&self) -> Vec<(String, &Expr)> {
        let mut v = Vec::new();
        for (i, e) in self.grid.iter().enumerate() {
            v.push((format!("grid[{i}]"), e));
        }
        for (i, e) in self.block.iter().enumerate() {
            v.push((format!("block[{i}]"), e));
        }
        v.push(("shared_bytes".to_string(), &self.shared_bytes));
        v
    }

    /// Evaluates the rule over `vars` (a genome's variables plus the shape).
    pub fn eval(&self, vars: &Vars) -> Result<LaunchDims, LaunchError> {
        let scope = Scope::from_vars(vars);
        let dim = |e: &Expr, what: &'static str, max: i64, range: &'static str| {
            let v = e.eval_int(&scope)?;
            if v < 1 || v > max {
                return Err(LaunchError::OutOfRange {
                    kernel: self.kernel.clone(),
                    what,
                    value: v,
                    range,
                });
            }
            Ok(v as u32)
        };
        let grid = [
            dim(&self.grid[0], "grid.x", (1 << 31) - 1, "1..=2^31-1")?,
            dim(&self.grid[1], "grid.y", 65535, "1..=65535")?,
            dim(&self.grid[2], "grid.z", 65535, "1..=65535")?,
        ];
        let block = [
            dim(&self.block[0], "block.x", 1024, "1..=1024")?,
            dim(&self.block[1], "block.y", 1024, "1..=1024")?,
            dim(&self.block[2], "block.z", 64, "1..=64")?,
        ];
        if block.iter().product::<u32>() > 1024 {
            return Err(LaunchError::OutOfRange {
                kernel: self.kernel.clone(),
                what: "threads per block",
                value: block.iter().product::<u32>() as i64,
                range: "1..=1024",
            });
        }
        let shared = self.shared_bytes.eval_int(&scope)?;
        if !(0..=u32::MAX as i64).contains(&shared) {
            return Err(LaunchError::OutOfRange {
                kernel: self.kernel.clone(),
                what: "shared_bytes",
                value: shared,
                range: "0..=2^32-1",
            });
        }
        Ok(LaunchDims {
            grid,
            block,
            shared_bytes: shared as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_read_as_words() {
        let d = LaunchDims {
            grid: [8, 8, 1],
            block: [192, 1, 1],
            shared_bytes: 73792,
        };
        assert_eq!(d.to_string(), "grid 8x8x1, block 192x1x1, 73792 B shared");
    }
    use crate::value::Value;

    fn rule() -> LaunchRule {
        let e = |s: &str| Expr::parse(s).unwrap();
        LaunchRule {
            kernel: "k".into(),
            grid: [e("ceil_div(SEQ_Q, BLOCK_M)"), e("HEADS"), e("BATCH")],
            block: [e("NUM_WARPS * 32"), e("1"), e("1")],
            shared_bytes: e("BLOCK_M * 128"),
        }
    }

    fn vars(seq: i64, warps: i64) -> Vars {
        [
            ("SEQ_Q", seq),
            ("BLOCK_M", 64),
            ("HEADS", 8),
            ("BATCH", 2),
            ("NUM_WARPS", warps),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Value::Int(v)))
        .collect()
    }

    #[test]
    fn evaluates_geometry() {
        let d = rule().eval(&vars(1000, 4)).unwrap();
        assert_eq!(d.grid, [16, 8, 2]);
        assert_eq!(d.block, [128, 1, 1]);
        assert_eq!(d.shared_bytes, 8192);
    }

    #[test]
    fn refuses_impossible_geometry() {
        assert!(matches!(
            rule().eval(&vars(1000, 64)),
            Err(LaunchError::OutOfRange {
                what: "block.x",
                ..
            })
        ));
        assert!(matches!(
            rule().eval(&vars(0, 4)),
            Err(LaunchError::OutOfRange { what: "grid.x", .. })
        ));
    }
}
