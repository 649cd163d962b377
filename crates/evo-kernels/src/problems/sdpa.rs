//! Attention forward (SDPA), FlashAttention style.

use evo_core::{Value, Vars};

use super::{half_precision_tolerance, DTYPES};
use rand::seq::{IndexedRandom, SliceRandom};
use rand::Rng;

use crate::harness::{
    counter_value, dtype, int, mix, one_hot_column, rng, tensor_seed, ArgSlot, Call, ElemType,
    Fill, HostTensor, InputFill, InputKind, Layout, ReferenceKernel, TensorSpec, Tolerance,
};
use crate::problem::{Problem, VarDecl, VarKind};

/// Query rows per block of `sdpa_reference.cu` (its `TILE_ROWS`).
const REFERENCE_TILE_ROWS: usize = 64;

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
         Any seq_q, seq_kv >= 1; any strides that keep the elements apart (batch, head and seq strides\n\
         non-negative multiples of 8, e.g. padded rows or PyTorch's (batch, seq, heads, dim) layout), each\n\
         tensor its own; pointers 16-byte aligned; softmax_scale finite and > 0."
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
        let d = Dims::of(s);
        let bh = (d.batch * d.heads * d.head_dim) as f64;
        // q and o over SEQ_Q, k and v over the keys some query sees (causal, top-left:
        // none past SEQ_Q), 2 bytes per element.
        2.0 * bh * (2.0 * d.seq_q as f64 + 2.0 * d.visible_keys() as f64)
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

    fn default_call(&self, s: &Vars) -> Call {
        let d = Dims::of(s);
        Call {
            layouts: d
                .tensor_dims()
                .iter()
                .map(|t| Layout::contiguous(t))
                .collect(),
            scalars: vec![d.default_scale()],
        }
    }

    fn varied_call(&self, s: &Vars, seed: u64, contiguous: &[bool]) -> Call {
        let d = Dims::of(s);
        varied_attention_call(&d, dtype(s), seed, contiguous)
    }

    fn call_args(&self, s: &Vars, call: &Call) -> Vec<ArgSlot> {
        let d = Dims::of(s);
        let mut a = vec![
            ArgSlot::Input(0),
            ArgSlot::Input(1),
            ArgSlot::Input(2),
            ArgSlot::Output,
        ];
        a.extend(d.scalar_args(call, [0, 1, 2, 3]));
        a
    }

    fn generate(&self, s: &Vars, call: &Call, kind: InputKind, seed: u64) -> Vec<HostTensor> {
        let elem = dtype(s);
        attention_inputs(&Dims::of(s), call.scalars[0], kind, seed)
            .iter()
            .map(|values| HostTensor::from_f32(elem, values))
            .collect()
    }

    fn input_fills(
        &self,
        s: &Vars,
        call: &Call,
        kind: InputKind,
        seed: u64,
    ) -> Option<Vec<InputFill>> {
        Some(attention_fills(&Dims::of(s), call.scalars[0], kind, seed).to_vec())
    }

    fn reference(&self, s: &Vars, call: &Call) -> Option<ReferenceKernel> {
        let d = Dims::of(s);
        let suffix = if dtype(s) == ElemType::Bf16 {
            "bf16"
        } else {
            "f16"
        };
        // The candidate's inputs as the call lays them out; a contiguous float32 output.
        let mut args = self.call_args(s, &d.with_contiguous_output(call));
        args.push(ArgSlot::I32(d.head_dim as i32));
        args.push(ArgSlot::I32(d.causal as i32));
        // One block of 256 threads per tile of REFERENCE_TILE_ROWS query rows of one (batch, head) (the kernel
        // loops if there are more tiles than blocks; sdpa_reference.cu's header).
        let tiles = (d.batch * d.heads * d.seq_q.div_ceil(REFERENCE_TILE_ROWS))
            .min(i32::MAX as usize) as u32;
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

    fn cpu_reference(&self, s: &Vars, call: &Call, inputs: &[HostTensor]) -> Vec<f64> {
        attention_f64(
            &Dims::of(s),
            call.scalars[0] as f64,
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

/// A call of an attention problem as a caller may make it: every tensor (q, k, v, o; the
/// fp8 problem's descales stay contiguous) in a layout of its own — contiguous, PyTorch
/// models' (batch, seq, heads, dim), or (batch, heads, seq) in any order with padding
/// after rows, heads and batches — and a softmax scale from 0.05 to 3 times 1/sqrt(d)
/// (log-uniform). Strides stay multiples of 16 bytes (the ABI's alignment).
pub(crate) fn varied_attention_call(
    d: &Dims,
    elem: ElemType,
    seed: u64,
    contiguous: &[bool],
) -> Call {
    let mut r = rng(seed, 0x1a70);
    let align = 16 / elem.size();
    let mut call = Call {
        layouts: Vec::new(),
        scalars: vec![d.default_scale() * (r.random_range(0.05f32.ln()..3f32.ln())).exp()],
    };
    for (i, dims) in d.tensor_dims().iter().enumerate() {
        let fixed = contiguous.get(i).copied().unwrap_or(false);
        let layout = match (fixed, r.random_range(0..10)) {
            (true, _) | (false, 0..=1) => Layout::contiguous(dims),
            // (b, s, h, d): what `x.view(b, s, h, d).transpose(1, 2)` gives a model.
            (false, 2..=4) => strided(dims, [0, 2, 1], [0, 0, 0]),
            (false, _) => {
                let mut order = [0usize, 1, 2];
                order.shuffle(&mut r);
                let pads = [0, 1, 3, 8].map(|p| p * align);
                strided(
                    dims,
                    order,
                    [
                        *pads.choose(&mut r).expect("pads"),
                        *pads.choose(&mut r).expect("pads"),
                        *pads.choose(&mut r).expect("pads"),
                    ],
                )
            }
        };
        call.layouts.push(layout);
    }
    call
}

/// A (batch, heads, seq, dim) layout whose first three dimensions are nested in `order`
/// (outermost first), the last dimension contiguous, `pad[k]` elements after each
/// element of the k-th nesting level (innermost first: after each row, ...).
fn strided(dims: &[usize], order: [usize; 3], pad: [usize; 3]) -> Layout {
    let mut strides = vec![0usize, 0, 0, 1];
    let mut extent = dims[3];
    for (level, &dim) in order.iter().rev().enumerate() {
        let stride = extent + pad[level];
        strides[dim] = stride;
        extent = stride * dims[dim];
    }
    Layout::new(dims.to_vec(), strides, extent).expect("nested strides never overlap")
}

/// The logical q, k, v of an attention trial (f32 before rounding to the input type).
/// `scale` is the call's softmax scale, which the adversarial rows aim for.
pub(crate) fn attention_inputs(d: &Dims, scale: f32, kind: InputKind, seed: u64) -> [Vec<f32>; 3] {
    let lens = d.input_lens();
    let fills = attention_fills(d, scale, kind, seed);
    std::array::from_fn(|t| fills[t].values(lens[t]))
}

/// q, k and v of a trial of `kind` (`scale`: the call's softmax scale, which `Rows` aims
/// for), each a function of the element index.
fn attention_fills(d: &Dims, scale: f32, kind: InputKind, seed: u64) -> [InputFill; 3] {
    std::array::from_fn(|t| {
        let trial_seed = seed;
        let seed = tensor_seed(seed, t);
        match kind {
            InputKind::Rows => InputFill::AttentionRows {
                seed: trial_seed,
                tensor: t,
                seq: if t == 0 { d.seq_q } else { d.seq_kv },
                head_dim: d.head_dim,
                very_negative: 75.0 / scale.max(1e-3),
            },
            InputKind::Random => InputFill::Counter {
                seed,
                fill: Fill::Normal(1.0),
            },
            InputKind::Zeros => InputFill::Zeros,
            // Logits spread over hundreds: softmax must subtract the row max.
            InputKind::Large => InputFill::Counter {
                seed,
                fill: Fill::Normal(8.0),
            },
            // One-hot rows of q, k and v: scores are 0 or 1 and each output row names the
            // keys it averaged.
            InputKind::OneHot => InputFill::OneHot {
                seed,
                cols: d.head_dim,
            },
        }
    })
}

/// What `InputKind::Rows` plants in a head of an attention trial, among normal ones.
#[derive(Clone, Copy, Debug, PartialEq)]
enum HeadCase {
    Normal,
    /// Every key zero: every score 0, the output the mean of v.
    ZeroKeys,
    /// Every key the same: uniform weights whatever the query.
    IdenticalKeys,
    /// v 16 times larger: outputs far from 1 next to heads near it (large scores are the
    /// `Large` kind's; here, in a per-head FP8 scale, they would make the head's error that
    /// of a sharp softmax over rounded scores).
    Large,
    /// One-hot rows of q, k and v.
    OneHot,
    /// Every query row scores -300 against every key (uniform weights): a running max
    /// started at 0 instead of -inf makes every weight exp(-300) = 0 and the row 0/0. The
    /// whole head, so a per-head FP8 scale keeps the other rows' precision.
    VeryNegative,
}

/// The head cases of `InputKind::Rows`, in the order the first heads of a trial take them.
const CASES: [HeadCase; 6] = {
    use HeadCase::*;
    [Normal, ZeroKeys, IdenticalKeys, Large, OneHot, VeryNegative]
};

/// Generator keys of `InputKind::Rows` (with [`tensor_seed`]): the case of a later head, the
/// one-hot rows, the zero query rows.
const CASE_KEY: usize = 0x0a0d;
const ONE_HOT_KEY: u64 = 0x0e0e;
const ZERO_ROW_KEY: usize = 0x0a0e;

/// The case of head `bh` (batch * heads + head) of a `Rows` trial: every case in the first
/// heads, a drawn one in later heads.
fn head_case(seed: u64, bh: u64) -> HeadCase {
    let n = CASES.len() as u64;
    let pick = if bh < n {
        bh.wrapping_add(seed) % n
    } else {
        mix(tensor_seed(seed, CASE_KEY) ^ mix(bh)) % n
    };
    CASES[pick as usize]
}

/// Element `i` (logical, contiguous) of input `tensor` (0 q, 1 k, 2 v; `seq` rows per head)
/// of an `InputKind::Rows` trial: the `Random` inputs with adversarial heads planted among
/// normal ones, and in every head but the one-hot ones about one query row in eight all
/// zero (its output is the mean of the visible v rows, not zero). `very_negative` is the
/// query value that makes a `VeryNegative` row score -300 (75 / softmax scale). A function
/// of the index alone, so the worker writes it on the GPU (`gate_kernels.cu`,
/// `attention_rows`).
pub(crate) fn rows_value(
    seed: u64,
    tensor: usize,
    seq: usize,
    head_dim: usize,
    very_negative: f32,
    i: u64,
) -> f32 {
    use HeadCase::*;
    let hd = head_dim.max(1) as u64;
    let (row, col) = (i / hd, i % hd);
    let bh = row / seq.max(1) as u64;
    let base = |at: u64| counter_value(tensor_seed(seed, tensor), at, Fill::Normal(1.0));
    let case = head_case(seed, bh);
    let x = match (case, tensor) {
        (ZeroKeys, 1) => 0.0,
        // Every key row the head's first.
        (IdenticalKeys, 1) => base(bh * seq as u64 * hd + col),
        (Large, 2) => base(i) * 16.0,
        (OneHot, _) => {
            let hot = one_hot_column(tensor_seed(seed ^ ONE_HOT_KEY, tensor), row, hd as usize);
            if col == hot {
                1.0
            } else {
                0.0
            }
        }
        // Every key has 4 in dim 0; a query row (-c, 0, ...) scores -c * scale * 4 = -300
        // against each.
        (VeryNegative, 1) if col == 0 => 4.0,
        (VeryNegative, 0) if col == 0 => -very_negative,
        (VeryNegative, 0) => 0.0,
        _ => base(i),
    };
    let zero_row = mix(tensor_seed(seed, ZERO_ROW_KEY) ^ mix(row)).is_multiple_of(8);
    if tensor == 0 && case != OneHot && zero_row {
        0.0
    } else {
        x
    }
}

/// Attention in float64 on contiguous (batch, heads, seq, head_dim) tensors: the CPU
/// reference of `sdpa_fwd` and `sdpa_fwd_fp8` (on dequantized inputs).
pub(crate) fn attention_f64(d: &Dims, scale: f64, q: &[f64], k: &[f64], v: &[f64]) -> Vec<f64> {
    use rayon::prelude::*;
    let hd = d.head_dim;
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

    /// Keys some query row sees: all, or with the causal mask none past `seq_q`.
    pub fn visible_keys(&self) -> usize {
        if self.causal {
            self.seq_kv.min(self.seq_q)
        } else {
            self.seq_kv
        }
    }

    /// Elements of q, k and v.
    pub fn input_lens(&self) -> [usize; 3] {
        let kv = self.batch * self.heads * self.seq_kv * self.head_dim;
        [self.batch * self.heads * self.seq_q * self.head_dim, kv, kv]
    }

    /// PyTorch's default scale, 1/sqrt(head_dim).
    pub fn default_scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }

    /// The logical dimensions of q, k, v and o: (batch, heads, seq, head_dim).
    pub fn tensor_dims(&self) -> [[usize; 4]; 4] {
        let (b, h, d) = (self.batch, self.heads, self.head_dim);
        [
            [b, h, self.seq_q, d],
            [b, h, self.seq_kv, d],
            [b, h, self.seq_kv, d],
            [b, h, self.seq_q, d],
        ]
    }

    /// The sdpa_fwd arguments after the four pointers: sizes, the (batch, head, seq)
    /// strides of q, k, v and o (`layouts` names their layouts in `call`) and the scale.
    pub fn scalar_args(&self, call: &Call, layouts: [usize; 4]) -> Vec<ArgSlot> {
        let mut a = vec![
            ArgSlot::I32(self.batch as i32),
            ArgSlot::I32(self.heads as i32),
            ArgSlot::I32(self.seq_q as i32),
            ArgSlot::I32(self.seq_kv as i32),
        ];
        for i in layouts {
            a.extend(
                call.layouts[i].strides[..3]
                    .iter()
                    .map(|&x| ArgSlot::I64(x as i64)),
            );
        }
        a.push(ArgSlot::F32(call.scalars[0]));
        a
    }

    /// `call` with the output contiguous (the reference kernels' float32 output).
    pub fn with_contiguous_output(&self, call: &Call) -> Call {
        let mut c = call.clone();
        *c.layouts.last_mut().expect("output layout") = Layout::contiguous(&self.tensor_dims()[3]);
        c
    }
}
