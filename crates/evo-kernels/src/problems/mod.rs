//! The problems evo knows. Each file is one [`crate::Problem`]: its ABI, variables,
//! counts, and the correctness harness (inputs, references, tolerances).

mod fp8_quantize;
mod gemm;
mod sdpa;
mod sdpa_fp8;
mod sdpa_fp8_e2e;

pub use fp8_quantize::Fp8Quantize;
pub use gemm::Gemm;
pub(crate) use sdpa::rows_value;
pub use sdpa::Sdpa;
pub use sdpa_fp8::SdpaFp8;
pub use sdpa_fp8_e2e::SdpaFp8E2e;

/// Element types the fp16/bf16 problems are specialized for.
pub(crate) const DTYPES: &[&str] = &["f16", "bf16"];

/// Bounds for outputs stored in fp16 or bf16 and compared with a float32 reference:
/// several half-ulps of the output type, so rounding passes and real bugs (which move
/// outputs by O(1) relative) do not.
pub(crate) fn half_precision_tolerance(
    elem: crate::harness::ElemType,
) -> crate::harness::Tolerance {
    use crate::harness::{ElemType, Tolerance};
    match elem {
        ElemType::Bf16 => Tolerance {
            rtol: 1.6e-2,
            atol_of_max: 8e-3,
            atol_floor: 1e-5,
            rel_l2: 1.2e-2,
        },
        _ => Tolerance {
            rtol: 4e-3,
            atol_of_max: 1e-3,
            atol_floor: 1e-5,
            rel_l2: 2e-3,
        },
    }
}
