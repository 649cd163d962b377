//! Problems: the fixed contract between evo and every family that implements it.

use evo_core::{Value, Vars};

/// What values a problem variable takes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum VarKind {
    /// An integer at least `min`, and a multiple of `multiple_of`.
    Int {
        min: i64,
        multiple_of: i64,
    },
    Bool,
    /// One of these strings.
    Choice(&'static [&'static str]),
    /// One of these integers.
    IntChoice(&'static [i64]),
}

/// A compile-time (specialization) or run-time (shape) variable of a problem.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VarDecl {
    pub name: &'static str,
    pub kind: VarKind,
    /// Value used when a config does not give one (`None`: required).
    pub default: Option<&'static str>,
    pub doc: &'static str,
}

impl VarDecl {
    /// Checks one value against the declaration.
    pub fn check(&self, value: &Value) -> Result<(), String> {
        match (self.kind, value) {
            (VarKind::Int { min, multiple_of }, Value::Int(i)) => {
                if *i < min {
                    Err(format!("{} = {i} must be at least {min}", self.name))
                } else if i % multiple_of != 0 {
                    Err(format!(
                        "{} = {i} must be a multiple of {multiple_of}",
                        self.name
                    ))
                } else {
                    Ok(())
                }
            }
            (VarKind::Bool, Value::Bool(_)) => Ok(()),
            (VarKind::IntChoice(options), Value::Int(i)) if options.contains(i) => Ok(()),
            (VarKind::IntChoice(options), _) => Err(format!(
                "{} = {value} must be one of {options:?}",
                self.name
            )),
            (VarKind::Choice(options), Value::Str(s)) if options.contains(&s.as_str()) => Ok(()),
            (VarKind::Choice(options), _) => Err(format!(
                "{} = {value} must be one of {options:?}",
                self.name
            )),
            (kind, _) => Err(format!(
                "{} = {value} has the wrong type ({:?} expected)",
                self.name, kind
            )),
        }
    }

    /// The default value, typed.
    pub fn default_value(&self) -> Option<Value> {
        self.default.map(Value::parse_canonical)
    }

    /// A representative value, used to validate families without a config: the default
    /// or the first choice.
    pub fn probe_value(&self) -> Value {
        self.default_value().unwrap_or_else(|| match self.kind {
            VarKind::Int { min, multiple_of } => Value::Int(min.max(multiple_of)),
            VarKind::Bool => Value::Bool(false),
            VarKind::Choice(options) => Value::Str(options[0].to_string()),
            VarKind::IntChoice(options) => Value::Int(options[0]),
        })
    }
}

/// A problem evo can search kernels for.
pub trait Problem: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;
    /// The `extern "C"` kernel symbol a single-kernel family defines.
    fn entry(&self) -> &'static str;
    /// The kernel signature and its meaning, for documentation and `evo check`.
    fn abi(&self) -> &'static str;
    /// Compile-time variables: each distinct assignment is compiled separately.
    fn spec_vars(&self) -> &'static [VarDecl];
    /// Run-time variables: the shape passed as kernel arguments.
    fn shape_vars(&self) -> &'static [VarDecl];
    /// Floating-point operations of one call.
    fn flops(&self, shape: &Vars) -> f64;
    /// Fewest bytes one call must move through device memory.
    fn min_bytes(&self, shape: &Vars) -> f64;

    /// Fills defaults and checks every variable of a shape (spec and run-time part).
    fn complete_shape(&self, shape: &Vars) -> Result<Vars, String> {
        let decls: Vec<&VarDecl> = self.spec_vars().iter().chain(self.shape_vars()).collect();
        for name in shape.keys() {
            if !decls.iter().any(|d| d.name == name) {
                let known: Vec<&str> = decls.iter().map(|d| d.name).collect();
                return Err(format!(
                    "`{name}` is not a variable of problem `{}` (it has {known:?})",
                    self.name()
                ));
            }
        }
        let mut out = Vars::new();
        for d in decls {
            let v = match shape.get(d.name) {
                Some(v) => v.clone(),
                None => d.default_value().ok_or_else(|| {
                    format!("`{}` is missing ({}), and has no default", d.name, d.doc)
                })?,
            };
            d.check(&v)?;
            out.insert(d.name.to_string(), v);
        }
        Ok(out)
    }
}

/// Every problem evo knows.
pub fn problems() -> &'static [&'static dyn Problem] {
    &[&Gemm, &Sdpa]
}

pub fn problem(name: &str) -> Option<&'static dyn Problem> {
    problems().iter().copied().find(|p| p.name() == name)
}

fn int(shape: &Vars, name: &str) -> f64 {
    shape.get(name).and_then(Value::as_int).unwrap_or(0) as f64
}

/// `C = A·Bᵀ` in fp16 or bf16 with float32 accumulation: the example problem that lets
/// the engine be tested end to end before attention.
#[derive(Debug)]
pub struct Gemm;

const DTYPES: &[&str] = &["f16", "bf16"];

impl Problem for Gemm {
    fn name(&self) -> &'static str {
        "gemm"
    }

    fn entry(&self) -> &'static str {
        "gemm"
    }

    fn abi(&self) -> &'static str {
        "extern \"C\" __global__ void gemm(const T* a, const T* b, T* c, int m, int n, int k, int lda, int ldb, int ldc)\n\
         C[i][j] = sum_l A[i][l] * B[j][l] (A: m x k, B: n x k, both row-major, K contiguous; C: m x n, row stride ldc),\n\
         float32 accumulation, T = __half (DTYPE f16) or __nv_bfloat16 (DTYPE bf16).\n\
         Caller guarantees m, n >= 1, k % 8 == 0, lda and ldb multiples of 8, 16-byte aligned pointers."
    }

    fn spec_vars(&self) -> &'static [VarDecl] {
        &[VarDecl {
            name: "DTYPE",
            kind: VarKind::Choice(DTYPES),
            default: Some("f16"),
            doc: "element type of A, B and C",
        }]
    }

    fn shape_vars(&self) -> &'static [VarDecl] {
        const POS: VarKind = VarKind::Int {
            min: 1,
            multiple_of: 1,
        };
        &[
            VarDecl {
                name: "M",
                kind: POS,
                default: None,
                doc: "rows of A and C",
            },
            VarDecl {
                name: "N",
                kind: POS,
                default: None,
                doc: "rows of B, columns of C",
            },
            VarDecl {
                name: "K",
                kind: VarKind::Int {
                    min: 8,
                    multiple_of: 8,
                },
                default: None,
                doc: "reduction length",
            },
        ]
    }

    fn flops(&self, s: &Vars) -> f64 {
        2.0 * int(s, "M") * int(s, "N") * int(s, "K")
    }

    fn min_bytes(&self, s: &Vars) -> f64 {
        let (m, n, k) = (int(s, "M"), int(s, "N"), int(s, "K"));
        2.0 * (m * k + n * k + m * n)
    }
}

/// Attention forward, `O = softmax(scale · Q·Kᵀ (+ causal mask)) · V`, FlashAttention
/// style: the first real problem evo searches.
#[derive(Debug)]
pub struct Sdpa;

impl Sdpa {
    /// Query-key pairs that take part: all of them, or with the causal mask (PyTorch's
    /// `is_causal`: key `j` is visible to query `i` iff `j <= i`, aligned at the top
    /// left, also when SEQ_Q != SEQ_KV) `sum_i min(i + 1, SEQ_KV)`.
    pub fn visible_pairs(seq_q: i64, seq_kv: i64, causal: bool) -> f64 {
        if !causal {
            return seq_q as f64 * seq_kv as f64;
        }
        let full = seq_q.min(seq_kv); // rows 0..full see i + 1 keys
        let tri = full as f64 * (full as f64 + 1.0) / 2.0;
        tri + (seq_q - full).max(0) as f64 * seq_kv as f64
    }
}

impl Problem for Sdpa {
    fn name(&self) -> &'static str {
        "sdpa_fwd"
    }

    fn entry(&self) -> &'static str {
        "sdpa_fwd"
    }

    fn abi(&self) -> &'static str {
        "extern \"C\" __global__ void sdpa_fwd(const T* q, const T* k, const T* v, T* o,\n\
         int batch, int heads, int seq_q, int seq_kv,\n\
         long long q_batch_stride, long long q_head_stride, long long q_seq_stride,\n\
         long long k_batch_stride, long long k_head_stride, long long k_seq_stride,\n\
         long long v_batch_stride, long long v_head_stride, long long v_seq_stride,\n\
         long long o_batch_stride, long long o_head_stride, long long o_seq_stride,\n\
         float softmax_scale)\n\
         Element (b, h, s, d) of X is X[b*X_batch_stride + h*X_head_stride + s*X_seq_stride + d] (last dim\n\
         contiguous, strides in elements). O = softmax(softmax_scale * Q Kᵀ) V per (b, h), float32 accumulation;\n\
         with CAUSAL, key j is visible to query i iff j <= i (PyTorch's top-left alignment, also for\n\
         seq_q != seq_kv). T = __half (DTYPE f16) or __nv_bfloat16 (bf16); HEAD_DIM and CAUSAL are compile-time.\n\
         Any seq_q, seq_kv >= 1; pointers 16-byte aligned, seq strides multiples of 8."
    }

    fn spec_vars(&self) -> &'static [VarDecl] {
        &[
            VarDecl {
                name: "DTYPE",
                kind: VarKind::Choice(DTYPES),
                default: Some("f16"),
                doc: "element type of q, k, v, o",
            },
            VarDecl {
                name: "HEAD_DIM",
                kind: VarKind::IntChoice(&[64, 128]),
                default: None,
                doc: "head dimension",
            },
            VarDecl {
                name: "CAUSAL",
                kind: VarKind::Bool,
                default: Some("false"),
                doc: "causal mask (top-left aligned)",
            },
        ]
    }

    fn shape_vars(&self) -> &'static [VarDecl] {
        const POS: VarKind = VarKind::Int {
            min: 1,
            multiple_of: 1,
        };
        &[
            VarDecl {
                name: "BATCH",
                kind: POS,
                default: None,
                doc: "batch size",
            },
            VarDecl {
                name: "HEADS",
                kind: POS,
                default: None,
                doc: "attention heads",
            },
            VarDecl {
                name: "SEQ_Q",
                kind: POS,
                default: None,
                doc: "query sequence length",
            },
            VarDecl {
                name: "SEQ_KV",
                kind: POS,
                default: None,
                doc: "key/value sequence length",
            },
        ]
    }

    fn flops(&self, s: &Vars) -> f64 {
        let causal = s.get("CAUSAL").and_then(Value::as_bool).unwrap_or(false);
        let pairs = Self::visible_pairs(int(s, "SEQ_Q") as i64, int(s, "SEQ_KV") as i64, causal);
        // Two matrix products (Q·Kᵀ and P·V), 2 flops per multiply-add.
        4.0 * int(s, "BATCH") * int(s, "HEADS") * pairs * int(s, "HEAD_DIM")
    }

    fn min_bytes(&self, s: &Vars) -> f64 {
        let bh = int(s, "BATCH") * int(s, "HEADS") * int(s, "HEAD_DIM");
        // q and o over SEQ_Q, k and v over SEQ_KV, 2 bytes per element.
        2.0 * bh * (2.0 * int(s, "SEQ_Q") + 2.0 * int(s, "SEQ_KV"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(pairs: &[(&str, Value)]) -> Vars {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn gemm_shapes_are_completed_and_checked() {
        let p = problem("gemm").unwrap();
        let s = p
            .complete_shape(&shape(&[
                ("M", 3.into()),
                ("N", 5.into()),
                ("K", 16.into()),
            ]))
            .unwrap();
        assert_eq!(s["DTYPE"], Value::Str("f16".into()));
        assert_eq!(p.flops(&s), 2.0 * 3.0 * 5.0 * 16.0);
        assert_eq!(p.min_bytes(&s), 2.0 * (48.0 + 80.0 + 15.0));
        let e = p
            .complete_shape(&shape(&[
                ("M", 3.into()),
                ("N", 5.into()),
                ("K", 12.into()),
            ]))
            .unwrap_err();
        assert!(e.contains("multiple of 8"), "{e}");
        let e = p.complete_shape(&shape(&[("M", 3.into())])).unwrap_err();
        assert!(e.contains("`N` is missing"), "{e}");
        let e = p
            .complete_shape(&shape(&[("M", 3.into()), ("Q", 1.into())]))
            .unwrap_err();
        assert!(e.contains("`Q` is not a variable"), "{e}");
        let e = p
            .complete_shape(&shape(&[
                ("M", 3.into()),
                ("N", 5.into()),
                ("K", 16.into()),
                ("DTYPE", "f32".into()),
            ]))
            .unwrap_err();
        assert!(e.contains("one of"), "{e}");
    }

    #[test]
    fn sdpa_counts() {
        let p = problem("sdpa_fwd").unwrap();
        let s = p
            .complete_shape(&shape(&[
                ("BATCH", 2.into()),
                ("HEADS", 8.into()),
                ("SEQ_Q", 512.into()),
                ("SEQ_KV", 512.into()),
                ("HEAD_DIM", 64.into()),
            ]))
            .unwrap();
        assert_eq!(s["CAUSAL"], Value::Bool(false));
        assert_eq!(p.flops(&s), 4.0 * 2.0 * 8.0 * 512.0 * 512.0 * 64.0);
        assert_eq!(p.min_bytes(&s), 2.0 * 2.0 * 8.0 * 64.0 * 4.0 * 512.0);
        // Causal, square: S(S+1)/2 pairs; tall (SEQ_Q > SEQ_KV): extra rows see all keys.
        assert_eq!(Sdpa::visible_pairs(4, 4, true), 10.0);
        assert_eq!(Sdpa::visible_pairs(6, 4, true), 10.0 + 2.0 * 4.0);
        assert_eq!(Sdpa::visible_pairs(2, 5, true), 3.0);
        let bad = shape(&[
            ("BATCH", 1.into()),
            ("HEADS", 1.into()),
            ("SEQ_Q", 1.into()),
            ("SEQ_KV", 1.into()),
            ("HEAD_DIM", 96.into()),
        ]);
        assert!(p.complete_shape(&bad).unwrap_err().contains("[64, 128]"));
    }
}
