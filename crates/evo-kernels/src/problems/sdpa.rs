//! Attention forward (SDPA), FlashAttention style.

use evo_core::{Value, Vars};

use super::{half_precision_tolerance, DTYPES};
use crate::harness::{
    dtype, int, normal_values, one_hot_rows, rng, ArgSlot, ElemType, HostTensor, InputKind,
    ReferenceKernel, TensorSpec, Tolerance,
};
use crate::problem::{Problem, VarDecl, VarKind};

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
        let pairs = Self::visible_pairs(int(s, "SEQ_Q"), int(s, "SEQ_KV"), causal);
        // Two matrix products (Q·Kᵀ and P·V), 2 flops per multiply-add.
        4.0 * (int(s, "BATCH") * int(s, "HEADS") * int(s, "HEAD_DIM")) as f64 * pairs
    }

    fn min_bytes(&self, s: &Vars) -> f64 {
        let bh = (int(s, "BATCH") * int(s, "HEADS") * int(s, "HEAD_DIM")) as f64;
        // q and o over SEQ_Q, k and v over SEQ_KV, 2 bytes per element.
        2.0 * bh * (2.0 * int(s, "SEQ_Q") as f64 + 2.0 * int(s, "SEQ_KV") as f64)
    }

    fn inputs(&self, s: &Vars) -> Vec<TensorSpec> {
        let d = Dims::of(s);
        let t = |name: &str, seq: usize| TensorSpec {
            name: name.into(),
            elem: dtype(s),
            len: d.batch * d.heads * seq * d.head_dim,
        };
        vec![t("q", d.seq_q), t("k", d.seq_kv), t("v", d.seq_kv)]
    }

    fn output(&self, s: &Vars) -> TensorSpec {
        let d = Dims::of(s);
        TensorSpec {
            name: "o".into(),
            elem: dtype(s),
            len: d.batch * d.heads * d.seq_q * d.head_dim,
        }
    }

    fn args(&self, s: &Vars) -> Vec<ArgSlot> {
        let d = Dims::of(s);
        // Contiguous (batch, heads, seq, head_dim) tensors.
        let strides = |seq: usize| {
            let hd = d.head_dim as i64;
            [
                ArgSlot::I64(d.heads as i64 * seq as i64 * hd),
                ArgSlot::I64(seq as i64 * hd),
                ArgSlot::I64(hd),
            ]
        };
        let mut a = vec![
            ArgSlot::Input(0),
            ArgSlot::Input(1),
            ArgSlot::Input(2),
            ArgSlot::Output,
            ArgSlot::I32(d.batch as i32),
            ArgSlot::I32(d.heads as i32),
            ArgSlot::I32(d.seq_q as i32),
            ArgSlot::I32(d.seq_kv as i32),
        ];
        a.extend(strides(d.seq_q));
        a.extend(strides(d.seq_kv));
        a.extend(strides(d.seq_kv));
        a.extend(strides(d.seq_q));
        a.push(ArgSlot::F32(d.scale()));
        a
    }

    fn generate(&self, s: &Vars, kind: InputKind, seed: u64) -> Vec<HostTensor> {
        let elem = dtype(s);
        self.inputs(s)
            .iter()
            .enumerate()
            .map(|(t, spec)| {
                let values = match kind {
                    InputKind::Random => normal_values(seed, t, spec.len, 1.0),
                    InputKind::Zeros => vec![0.0; spec.len],
                    // Logits spread over hundreds: softmax must subtract the row max.
                    InputKind::Large => normal_values(seed, t, spec.len, 8.0),
                    // One-hot rows of q, k and v: scores are 0 or 1 and each output
                    // row names the keys it averaged.
                    InputKind::OneHot => one_hot_rows(
                        &mut rng(seed, t),
                        spec.len / Dims::of(s).head_dim,
                        Dims::of(s).head_dim,
                    ),
                };
                HostTensor::from_f32(elem, &values)
            })
            .collect()
    }

    fn reference(&self, s: &Vars) -> Option<ReferenceKernel> {
        let d = Dims::of(s);
        let suffix = if dtype(s) == ElemType::Bf16 {
            "bf16"
        } else {
            "f16"
        };
        let mut args = self.args(s);
        args.push(ArgSlot::I32(d.head_dim as i32));
        args.push(ArgSlot::I32(d.causal as i32));
        // One block of 256 threads per tile of 16 query rows of one (batch, head) (the kernel
        // loops if there are more tiles than blocks; sdpa_reference.cu's header).
        let tiles = (d.batch * d.heads * d.seq_q.div_ceil(16)).min(i32::MAX as usize) as u32;
        Some(ReferenceKernel {
            source: include_str!("sdpa_reference.cu"),
            entry: format!("sdpa_reference_{suffix}"),
            args,
            launch: evo_core::LaunchDims {
                grid: [tiles, 1, 1],
                block: [256, 1, 1],
                shared_bytes: 0,
            },
        })
    }

    fn cpu_reference(&self, s: &Vars, inputs: &[HostTensor]) -> Vec<f64> {
        attention_f64(
            &Dims::of(s),
            &inputs[0].to_f64(),
            &inputs[1].to_f64(),
            &inputs[2].to_f64(),
        )
    }

    fn tolerance(&self, s: &Vars) -> Tolerance {
        half_precision_tolerance(dtype(s))
    }

    fn edge_shapes(&self, shapes: &[Vars]) -> Vec<Vars> {
        // For every specialization: sequence length 1, lengths that are multiples of
        // no tile (77, 1000), and seq_q != seq_kv both ways.
        let mut specs: Vec<Vars> = Vec::new();
        for s in shapes {
            let spec: Vars = ["DTYPE", "HEAD_DIM", "CAUSAL"]
                .iter()
                .filter_map(|k| s.get(*k).map(|v| (k.to_string(), v.clone())))
                .collect();
            if !specs.contains(&spec) {
                specs.push(spec);
            }
        }
        let mut out = Vec::new();
        for spec in specs {
            for (b, h, sq, skv) in [
                (1, 2, 1, 1),
                (1, 3, 77, 77),
                (2, 2, 1000, 1000),
                (1, 2, 77, 130),
                (1, 2, 130, 77),
            ] {
                let mut v = spec.clone();
                for (k, x) in [("BATCH", b), ("HEADS", h), ("SEQ_Q", sq), ("SEQ_KV", skv)] {
                    v.insert(k.to_string(), Value::Int(x));
                }
                if !shapes.contains(&v) {
                    out.push(v);
                }
            }
        }
        out
    }
}

/// Attention in float64 on contiguous (batch, heads, seq, head_dim) tensors: the CPU
/// reference of `sdpa_fwd` and `sdpa_fwd_fp8` (on dequantized inputs).
pub(crate) fn attention_f64(d: &Dims, q: &[f64], k: &[f64], v: &[f64]) -> Vec<f64> {
    use rayon::prelude::*;
    let hd = d.head_dim;
    let scale = d.scale() as f64;
    let mut o = vec![0.0; d.batch * d.heads * d.seq_q * hd];
    // One output row per task (each row's sums run in the same order on any thread, so
    // the result does not depend on the thread count).
    o.par_chunks_mut(hd.max(1)).enumerate().for_each_init(
        || vec![0.0; d.seq_kv],
        |scores, (row, out)| {
            let (bh, i) = (row / d.seq_q, row % d.seq_q);
            let (qb, kb) = (bh * d.seq_q * hd, bh * d.seq_kv * hd);
            let visible = if d.causal {
                (i + 1).min(d.seq_kv)
            } else {
                d.seq_kv
            };
            let q_row = &q[qb + i * hd..][..hd];
            let mut max = f64::NEG_INFINITY;
            for (j, sc) in scores.iter_mut().enumerate().take(visible) {
                let k_row = &k[kb + j * hd..][..hd];
                *sc = scale * q_row.iter().zip(k_row).map(|(a, b)| a * b).sum::<f64>();
                max = max.max(*sc);
            }
            let mut sum = 0.0;
            for sc in scores.iter_mut().take(visible) {
                *sc = (*sc - max).exp();
                sum += *sc;
            }
            for (j, p) in scores.iter().enumerate().take(visible) {
                for (acc, x) in out.iter_mut().zip(&v[kb + j * hd..][..hd]) {
                    *acc += p * x;
                }
            }
            for acc in out.iter_mut() {
                *acc /= sum;
            }
        },
    );
    o
}

/// The sizes of one SDPA call.
pub(crate) struct Dims {
    pub batch: usize,
    pub heads: usize,
    pub seq_q: usize,
    pub seq_kv: usize,
    pub head_dim: usize,
    pub causal: bool,
}

impl Dims {
    pub fn of(s: &Vars) -> Dims {
        Dims {
            batch: int(s, "BATCH") as usize,
            heads: int(s, "HEADS") as usize,
            seq_q: int(s, "SEQ_Q") as usize,
            seq_kv: int(s, "SEQ_KV") as usize,
            head_dim: int(s, "HEAD_DIM") as usize,
            causal: s.get("CAUSAL").and_then(Value::as_bool).unwrap_or(false),
        }
    }

    /// PyTorch's default scale, 1/sqrt(head_dim).
    pub fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }
}
