//! The FP8 quantizer as a problem of its own, `fp8_quantize`, so that `evo check` can hold
//! a quantizer kernel to the rule of [`crate::fp8`] bit for bit (the attention problem
//! `sdpa_fwd_fp8` gets already-quantized inputs). The family sdpa_fwd_fp8_mma ships the
//! same device code (templates/common/fp8.cuh) as its end-to-end quantizer.
//!
//! ABI: `fp8_quantize(const T* x, unsigned char* out, int slices, long long len)`: x holds
//! `slices` consecutive slices of `len` elements (one per (batch, head)); out receives the
//! e4m3 codes (`slices * len` bytes), then, from byte `codes_bytes = round_up(slices * len,
//! 16)`, one float32 descale per slice (the bytes between are 0). The output is compared
//! byte for byte.

use evo_core::{LaunchDims, Vars};

use super::DTYPES;
use crate::fp8;
use crate::harness::{
    dtype, int, normal, one_hot_rows, plant_outliers, rng, ArgSlot, Call, ElemType, HostTensor,
    InputKind, ReferenceKernel, TensorSpec, Tolerance, OUTLIER,
};
use crate::problem::{Problem, VarDecl, VarKind};

/// Per-slice e4m3 quantization of an fp16/bf16 tensor, checked bit for bit.
#[derive(Debug)]
pub struct Fp8Quantize;

impl Fp8Quantize {
    /// Bytes of codes before the descales (a multiple of 16, so the floats are aligned).
    pub fn codes_bytes(s: &Vars) -> usize {
        ((int(s, "SLICES") * int(s, "LEN")) as usize).div_ceil(16) * 16
    }

    /// The expected output bytes of `inputs` by the host rule.
    pub fn expected(s: &Vars, x: &HostTensor) -> Vec<u8> {
        let values: Vec<f32> = x.to_f64().into_iter().map(|v| v as f32).collect();
        let q = fp8::quantize(&values, int(s, "LEN") as usize);
        let mut out = q.codes;
        out.resize(Self::codes_bytes(s), 0);
        for d in q.descale {
            out.extend(d.to_le_bytes());
        }
        out
    }
}

impl Problem for Fp8Quantize {
    fn name(&self) -> &'static str {
        "fp8_quantize"
    }

    fn entry(&self) -> &'static str {
        "fp8_quantize"
    }

    fn abi(&self) -> &'static str {
        "extern \"C\" __global__ void fp8_quantize(const T* x, unsigned char* out, int slices, long long len)\n\
         x: slices * len elements of T = __half (DTYPE f16) or __nv_bfloat16 (bf16), slice s = x[s*len .. (s+1)*len).\n\
         out: the e4m3 code of every element (slices * len bytes), then from byte round_up(slices * len, 16) one\n\
         float32 descale per slice. Rule (float32): amax = max |x| of the slice; descale = amax / 448 and\n\
         code = __nv_cvt_float_to_fp8(x * (448 / amax), __NV_SATFINITE, __NV_E4M3); an all-zero slice gets\n\
         descale 1 and codes x * 1 (zeros). Compared byte for byte."
    }

    fn spec_vars(&self) -> &'static [VarDecl] {
        &[VarDecl {
            name: "DTYPE",
            kind: VarKind::Choice(DTYPES),
            default: Some("f16"),
            doc: "element type of x",
        }]
    }

    fn shape_vars(&self) -> &'static [VarDecl] {
        const POS: VarKind = VarKind::Int {
            min: 1,
            multiple_of: 1,
        };
        &[
            VarDecl {
                name: "SLICES",
                kind: POS,
                default: None,
                doc: "slices ((batch, head) pairs), one scale each",
            },
            VarDecl {
                name: "LEN",
                kind: POS,
                default: None,
                doc: "elements per slice (seq * head_dim)",
            },
        ]
    }

    fn flops(&self, s: &Vars) -> f64 {
        // A max and a multiply per element.
        2.0 * (int(s, "SLICES") * int(s, "LEN")) as f64
    }

    fn min_bytes(&self, s: &Vars) -> f64 {
        let n = (int(s, "SLICES") * int(s, "LEN")) as f64;
        3.0 * n + 4.0 * int(s, "SLICES") as f64
    }

    fn inputs(&self, s: &Vars) -> Vec<TensorSpec> {
        vec![TensorSpec {
            name: "x".into(),
            elem: dtype(s),
            len: (int(s, "SLICES") * int(s, "LEN")) as usize,
        }]
    }

    fn output(&self, s: &Vars) -> TensorSpec {
        TensorSpec {
            name: "out".into(),
            elem: ElemType::U8,
            len: Self::codes_bytes(s) + 4 * int(s, "SLICES") as usize,
        }
    }

    fn call_args(&self, s: &Vars, _: &Call) -> Vec<ArgSlot> {
        vec![
            ArgSlot::Input(0),
            ArgSlot::Output,
            ArgSlot::I32(int(s, "SLICES") as i32),
            ArgSlot::I64(int(s, "LEN")),
        ]
    }

    fn generate(&self, s: &Vars, _: &Call, kind: InputKind, seed: u64) -> Vec<HostTensor> {
        let (slices, len) = (int(s, "SLICES") as usize, int(s, "LEN") as usize);
        let mut r = rng(seed, 0);
        let mut v = match kind {
            InputKind::Random | InputKind::Rows => normal(&mut r, slices * len, 1.0),
            // Every other slice all zero, next to normal ones with one outlier each.
            InputKind::Zeros => {
                let mut v = normal(&mut r, slices * len, 1.0);
                for (i, x) in v.iter_mut().enumerate() {
                    if (i / len).is_multiple_of(2) {
                        *x = 0.0;
                    }
                }
                plant_outliers(&mut r, &mut v, len, OUTLIER);
                v
            }
            // Slice magnitudes from 2^-12 to 2^12, up to fp16's range.
            InputKind::Large => {
                let mut v = normal(&mut r, slices * len, 1.0);
                for (i, x) in v.iter_mut().enumerate() {
                    *x *= 2f32.powi(((i / len) % 7) as i32 * 4 - 12);
                }
                v
            }
            InputKind::OneHot => one_hot_rows(&mut r, slices, len),
        };
        v.iter_mut().for_each(|x| *x = x.clamp(-60000.0, 60000.0));
        vec![HostTensor::from_f32(dtype(s), &v)]
    }

    fn reference(&self, s: &Vars, _: &Call) -> Option<ReferenceKernel> {
        let suffix = if dtype(s) == ElemType::Bf16 {
            "bf16"
        } else {
            "f16"
        };
        Some(ReferenceKernel {
            source: include_str!("fp8_quantize_reference.cu"),
            entry: format!("fp8_quantize_reference_{suffix}"),
            args: self.args(s),
            launch: LaunchDims {
                grid: [int(s, "SLICES") as u32, 1, 1],
                block: [256, 1, 1],
                shared_bytes: 0,
            },
        })
    }

    fn cpu_reference(&self, s: &Vars, _: &Call, inputs: &[HostTensor]) -> Vec<f64> {
        Self::expected(s, &inputs[0])
            .into_iter()
            .map(f64::from)
            .collect()
    }

    fn tolerance(&self, _: &Vars) -> Tolerance {
        // Bit for bit.
        Tolerance {
            rtol: 0.0,
            atol_of_max: 0.0,
            atol_floor: 0.0,
            rel_l2: 0.0,
        }
    }

    fn edge_shapes(&self, shapes: &[Vars]) -> Vec<Vars> {
        let mut out = Vec::new();
        for s in shapes.iter().take(1) {
            for (slices, len) in [(1, 1), (3, 77), (4, 4097)] {
                let mut v = s.clone();
                v.insert("SLICES".into(), slices.into());
                v.insert("LEN".into(), len.into());
                if !shapes.contains(&v) {
                    out.push(v);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_bytes_follow_the_rule() {
        let mut s = Vars::new();
        s.insert("SLICES".into(), 2.into());
        s.insert("LEN".into(), 3.into());
        let s = Fp8Quantize.complete_shape(&s).unwrap();
        let x = HostTensor::from_f32(ElemType::F16, &[0.0, 0.0, 0.0, 1.0, -2.0, 0.5]);
        let out = Fp8Quantize::expected(&s, &x);
        assert_eq!(out.len(), Fp8Quantize.output(&s).len);
        assert_eq!(out.len(), 16 + 8);
        assert_eq!(&out[..3], &[0, 0, 0]);
        assert_eq!(fp8::decode(out[4]), -448.0);
        assert_eq!(&out[16..20], &1.0f32.to_le_bytes());
        assert_eq!(&out[20..24], &(2.0f32 / 448.0).to_le_bytes());
        // The zero-tensor bug (descale 1/448 for the zero slice) changes the bytes.
        assert_ne!(&out[16..20], &(1.0f32 / 448.0).to_le_bytes());
        // Zeros inputs have zero slices next to normal ones, each with one ±OUTLIER.
        let z = Fp8Quantize.generate(&s, &Fp8Quantize.default_call(&s), InputKind::Zeros, 1);
        let zo = Fp8Quantize::expected(&s, &z[0]);
        assert_eq!(&zo[16..20], &1.0f32.to_le_bytes());
        assert_eq!(&zo[20..24], &(OUTLIER / 448.0).to_le_bytes());
    }
}
