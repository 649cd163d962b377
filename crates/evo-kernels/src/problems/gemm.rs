//! The example problem: `C = A·Bᵀ` in fp16/bf16 with float32 accumulation.

use evo_core::{LaunchDims, Value, Vars};
use rand::Rng;

use super::{half_precision_tolerance, DTYPES};
use crate::harness::{
    dtype, int, rng, seeded_values, tensor_seed, ArgSlot, Call, ElemType, Fill, HostTensor,
    InputFill, InputKind, Layout, ReferenceKernel, TensorSpec, Tolerance,
};
use crate::problem::{Problem, VarDecl, VarKind};

/// `C = A·Bᵀ` in fp16 or bf16 with float32 accumulation: the example problem that lets
/// the engine be tested end to end before attention.
#[derive(Debug)]
pub struct Gemm;

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
         Caller guarantees m, n >= 1, k % 8 == 0, lda >= k and ldb >= k multiples of 8, ldc = n or a multiple of 8 above n, 16-byte\n\
         aligned pointers."
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
        2.0 * int(s, "M") as f64 * int(s, "N") as f64 * int(s, "K") as f64
    }

    fn min_bytes(&self, s: &Vars) -> f64 {
        let (m, n, k) = (int(s, "M") as f64, int(s, "N") as f64, int(s, "K") as f64);
        2.0 * (m * k + n * k + m * n)
    }

    fn inputs(&self, s: &Vars) -> Vec<TensorSpec> {
        let (m, n, k) = mnk(s);
        vec![
            TensorSpec {
                name: "a".into(),
                elem: dtype(s),
                len: m * k,
            },
            TensorSpec {
                name: "b".into(),
                elem: dtype(s),
                len: n * k,
            },
        ]
    }

    fn output(&self, s: &Vars) -> TensorSpec {
        let (m, n, _) = mnk(s);
        TensorSpec {
            name: "c".into(),
            elem: dtype(s),
            len: m * n,
        }
    }

    fn default_call(&self, s: &Vars) -> Call {
        let (m, n, k) = mnk(s);
        Call {
            layouts: vec![
                Layout::contiguous(&[m, k]),
                Layout::contiguous(&[n, k]),
                Layout::contiguous(&[m, n]),
            ],
            scalars: Vec::new(),
        }
    }

    fn varied_call(&self, s: &Vars, seed: u64, contiguous: &[bool]) -> Call {
        // Row strides lda, ldb, ldc: the row length, or a multiple of 8 elements above it.
        let (m, n, k) = mnk(s);
        let mut r = rng(seed, 0x1a70);
        let mut rows = |i: usize, rows: usize, cols: usize| {
            let pad = if contiguous.get(i).copied().unwrap_or(false) {
                0
            } else {
                [0, 1, 3, 8][r.random_range(0..4)]
            };
            let ld = if pad == 0 {
                cols
            } else {
                cols.div_ceil(8) * 8 + 8 * pad
            };
            Layout::new(vec![rows, cols], vec![ld, 1], rows * ld)
                .expect("padded rows never overlap")
        };
        Call {
            layouts: vec![rows(0, m, k), rows(1, n, k), rows(2, m, n)],
            scalars: Vec::new(),
        }
    }

    fn call_args(&self, s: &Vars, call: &Call) -> Vec<ArgSlot> {
        let (m, n, k) = (int(s, "M") as i32, int(s, "N") as i32, int(s, "K") as i32);
        let ld = |i: usize| ArgSlot::I32(call.layouts[i].strides[0] as i32);
        vec![
            ArgSlot::Input(0),
            ArgSlot::Input(1),
            ArgSlot::Output,
            ArgSlot::I32(m),
            ArgSlot::I32(n),
            ArgSlot::I32(k),
            ld(0),
            ld(1),
            ld(2),
        ]
    }

    fn generate(&self, s: &Vars, call: &Call, kind: InputKind, seed: u64) -> Vec<HostTensor> {
        let (m, n, k) = mnk(s);
        let elem = dtype(s);
        let (a, b) = match self.input_fills(s, call, kind, seed) {
            Some(fills) => (fills[0].values(m * k), fills[1].values(n * k)),
            None => {
                // Large: |C| <= k * L^2 stays under the fp16 maximum (65504).
                let l = (60000.0 / k as f32).sqrt();
                let signed = |t: usize, len: usize| -> Vec<f32> {
                    seeded_values(seed, t, len, |r, chunk| {
                        for x in chunk {
                            let mag = r.random_range(0.5 * l..l);
                            *x = if r.random::<bool>() { mag } else { -mag };
                        }
                    })
                };
                (signed(0, m * k), signed(1, n * k))
            }
        };
        vec![
            HostTensor::from_f32(elem, &a),
            HostTensor::from_f32(elem, &b),
        ]
    }

    fn input_fills(
        &self,
        s: &Vars,
        _: &Call,
        kind: InputKind,
        seed: u64,
    ) -> Option<Vec<InputFill>> {
        let (_, _, k) = mnk(s);
        let uniform = |t: usize| InputFill::Counter {
            seed: tensor_seed(seed, t),
            fill: Fill::Uniform(-1.0, 1.0),
        };
        match kind {
            InputKind::Random | InputKind::Rows => Some(vec![uniform(0), uniform(1)]),
            InputKind::Zeros => Some(vec![InputFill::Zeros, InputFill::Zeros]),
            // One-hot rows of A: each output element names the element of B it read.
            InputKind::OneHot => Some(vec![
                InputFill::OneHot {
                    seed: tensor_seed(seed, 0),
                    cols: k,
                },
                uniform(1),
            ]),
            InputKind::Large => None,
        }
    }

    fn reference(&self, s: &Vars, call: &Call) -> Option<ReferenceKernel> {
        let (m, n, _) = mnk(s);
        // The call's inputs; a contiguous float32 output (ldc = n).
        let mut args = self.call_args(s, call);
        *args.last_mut().expect("ldc") = ArgSlot::I32(n as i32);
        let suffix = if dtype(s) == ElemType::Bf16 {
            "bf16"
        } else {
            "f16"
        };
        Some(ReferenceKernel {
            source: include_str!("gemm_reference.cu"),
            entry: format!("gemm_reference_{suffix}"),
            args,
            launch: LaunchDims {
                // x over columns (n), y over rows (m), as the kernel indexes them.
                grid: [n.div_ceil(16) as u32, m.div_ceil(16) as u32, 1],
                block: [16, 16, 1],
                shared_bytes: 0,
            },
        })
    }

    fn cpu_reference(&self, s: &Vars, _: &Call, inputs: &[HostTensor]) -> Vec<f64> {
        let (m, n, k) = mnk(s);
        let (a, b) = (inputs[0].to_f64(), inputs[1].to_f64());
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|l| a[i * k + l] * b[j * k + l]).sum();
            }
        }
        c
    }

    fn tolerance(&self, s: &Vars) -> Tolerance {
        half_precision_tolerance(dtype(s))
    }

    fn edge_shapes(&self, shapes: &[Vars]) -> Vec<Vars> {
        let mut specs: Vec<Value> = shapes
            .iter()
            .filter_map(|s| s.get("DTYPE").cloned())
            .collect();
        specs.dedup();
        let mut out = Vec::new();
        for d in specs {
            for (m, n, k) in [(1, 1, 8), (77, 130, 264), (129, 67, 40)] {
                let v: Vars = [("M", m), ("N", n), ("K", k)]
                    .into_iter()
                    .map(|(a, b)| (a.to_string(), Value::Int(b)))
                    .chain([("DTYPE".to_string(), d.clone())])
                    .collect();
                if !shapes.contains(&v) {
                    out.push(v);
                }
            }
        }
        out
    }
}

fn mnk(s: &Vars) -> (usize, usize, usize) {
    (
        int(s, "M") as usize,
        int(s, "N") as usize,
        int(s, "K") as usize,
    )
}
