//! FP8 attention end to end, the problem `sdpa_fwd_fp8_e2e`: fp16/bf16 q, k, v in, O out,
//! computed through e4m3. A separate problem (not a mode of `sdpa_fwd_fp8`) because
//! everything the gates see differs: the inputs are the original DTYPE tensors (those of
//! `sdpa_fwd_fp8`'s trials before host quantization, same adversarial heads), the
//! reference is attention on them (the fp16 problem's GPU reference, float64 on the CPU),
//! and the tolerance is `sdpa_fwd_fp8`'s end-to-end bound. That bound is reported in the
//! trials and checked between timed replays; a trial's verdict is `sdpa_fwd_fp8`'s
//! tolerance of the answer on the rule's codes ([`Problem::encoded`]): the kernels quantize
//! by the rule (crate::fp8), and the bound alone admits an output 12.5% too small.
//!
//! Its ABI is `sdpa_fwd`'s, so a fused kernel could implement it alone; the family
//! `sdpa_fwd_fp8_e2e_mma` implements it as several kernels instead (`[[launch]]` with their
//! own `args` and `[[scratch]]` buffers): the family's quantizer three times (q, k, v into
//! e4m3 scratch plus descales), then the FP8 attention kernel on the scratch. The timing
//! gate times that whole sequence: the end-to-end time from fp16.

use evo_core::Vars;

use super::{Sdpa, SdpaFp8};
use crate::harness::{
    dtype, ArgSlot, Call, ElemType, Encoded, HostTensor, InputKind, ReferenceKernel, TensorSpec,
    Tolerance,
};
use crate::problem::{Problem, VarDecl};

/// Attention from fp16/bf16 inputs through FP8 by the quantization rule (crate::fp8), judged
/// on the rule's codes (its error against the original inputs reported).
#[derive(Debug)]
pub struct SdpaFp8E2e;

impl Problem for SdpaFp8E2e {
    fn name(&self) -> &'static str {
        "sdpa_fwd_fp8_e2e"
    }

    fn entry(&self) -> &'static str {
        "sdpa_fwd_fp8"
    }

    fn abi(&self) -> &'static str {
        "extern \"C\" __global__ void sdpa_fwd_fp8(const T* q, const T* k, const T* v, T* o,\n\
         int batch, int heads, int seq_q, int seq_kv,\n\
         long long q_batch_stride, long long q_head_stride, long long q_seq_stride,\n\
         long long k_batch_stride, long long k_head_stride, long long k_seq_stride,\n\
         long long v_batch_stride, long long v_head_stride, long long v_seq_stride,\n\
         long long o_batch_stride, long long o_head_stride, long long o_seq_stride,\n\
         float softmax_scale)\n\
         The ABI of sdpa_fwd (q, k, v and o in DTYPE, the sizes, strides and softmax scale), computed\n\
         through FP8 e4m3 quantized by the rule: per (batch, head) slice amax = max |x|, codes\n\
         e4m3_satfinite(x * (448 / amax)) rounded to nearest even, descale amax / 448 (an all-zero slice:\n\
         1). Judged within sdpa_fwd_fp8's tolerance of attention on those codes; the error against\n\
         attention on these inputs is reported (and bounded between timed replays).\n\
         Argument lists for multi-kernel families (`@name` in a [[launch]]'s args): `abi` (all of it) and\n\
         `sdpa_scalars` (everything after the four pointers: batch, heads, seq_q, seq_kv, the 12 strides,\n\
         softmax_scale), which is also the tail of sdpa_fwd_fp8's ABI after its three descale pointers."
    }

    fn spec_vars(&self) -> &'static [VarDecl] {
        Sdpa.spec_vars()
    }

    fn shape_vars(&self) -> &'static [VarDecl] {
        Sdpa.shape_vars()
    }

    fn flops(&self, s: &Vars) -> f64 {
        Sdpa.flops(s)
    }

    fn min_bytes(&self, s: &Vars) -> f64 {
        Sdpa.min_bytes(s)
    }

    fn inputs(&self, s: &Vars) -> Vec<TensorSpec> {
        Sdpa.inputs(s)
    }

    fn output(&self, s: &Vars) -> TensorSpec {
        Sdpa.output(s)
    }

    fn default_call(&self, s: &Vars) -> Call {
        Sdpa.default_call(s)
    }

    fn varied_call(&self, s: &Vars, seed: u64, contiguous: &[bool]) -> Call {
        Sdpa.varied_call(s, seed, contiguous)
    }

    fn call_args(&self, s: &Vars, call: &Call) -> Vec<ArgSlot> {
        Sdpa.call_args(s, call)
    }

    fn arg_lists(&self, s: &Vars) -> Vec<(&'static str, std::ops::Range<usize>)> {
        let n = self.args(s).len();
        vec![("abi", 0..n), ("sdpa_scalars", 4..n)]
    }

    fn generate(&self, s: &Vars, call: &Call, kind: InputKind, seed: u64) -> Vec<HostTensor> {
        let elem = dtype(s);
        SdpaFp8
            .originals(s, call.scalars[0], kind, seed)
            .iter()
            .map(|v| HostTensor::from_f32(elem, v))
            .collect()
    }

    fn reference(&self, s: &Vars, call: &Call) -> Option<ReferenceKernel> {
        Sdpa.reference(s, call)
    }

    fn cpu_reference(&self, s: &Vars, call: &Call, inputs: &[HostTensor]) -> Vec<f64> {
        Sdpa.cpu_reference(s, call, inputs)
    }

    fn compute_elem(&self, _: &Vars) -> ElemType {
        ElemType::E4m3
    }

    fn tolerance(&self, s: &Vars) -> Tolerance {
        // The FP8 path's end-to-end bound, the same as sdpa_fwd_fp8's second reference.
        SdpaFp8
            .end_to_end(s, &SdpaFp8.default_call(s), InputKind::Random, 0)
            .map(|e| e.tolerance)
            .expect("sdpa_fwd_fp8 has an end-to-end bound")
    }

    fn encoded(&self, s: &Vars, call: &Call, kind: InputKind, seed: u64) -> Option<Encoded> {
        // sdpa_fwd_fp8's trial on the same originals (the call's scale): the rule's codes and
        // descales, its reference and its kernels' tolerance.
        let mut fp8 = SdpaFp8.default_call(s);
        fp8.scalars = call.scalars.clone();
        Some(Encoded {
            inputs: SdpaFp8.generate(s, &fp8, kind, seed),
            reference: SdpaFp8.reference(s, &fp8)?,
            kernel_tolerance: SdpaFp8.tolerance(s),
        })
    }

    fn edge_shapes(&self, shapes: &[Vars]) -> Vec<Vars> {
        Sdpa.edge_shapes(shapes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use evo_core::Value;

    fn shape() -> Vars {
        let mut v = Vars::new();
        for (k, x) in [
            ("BATCH", 2),
            ("HEADS", 4),
            ("SEQ_Q", 5),
            ("SEQ_KV", 7),
            ("HEAD_DIM", 64),
        ] {
            v.insert(k.into(), Value::Int(x));
        }
        SdpaFp8E2e.complete_shape(&v).unwrap()
    }

    #[test]
    fn inputs_are_the_fp8_problems_originals_and_the_bound_is_its_end_to_end_one() {
        let s = shape();
        let call = SdpaFp8E2e.default_call(&s);
        for kind in [
            InputKind::Random,
            InputKind::Zeros,
            InputKind::Large,
            InputKind::Rows,
        ] {
            let e2e = SdpaFp8.end_to_end(&s, &call, kind, 5).unwrap();
            assert_eq!(
                SdpaFp8E2e.generate(&s, &call, kind, 5),
                e2e.inputs,
                "{kind:?}"
            );
            assert_eq!(SdpaFp8E2e.tolerance(&s), e2e.tolerance);
            assert_eq!(SdpaFp8E2e.reference(&s, &call), Some(e2e.reference));
        }
        // The exact answer is attention on the inputs as given (fp16 ones, not codes).
        let t = SdpaFp8E2e.generate(&s, &call, InputKind::Random, 1);
        assert_eq!(
            SdpaFp8E2e.cpu_reference(&s, &call, &t),
            Sdpa.cpu_reference(&s, &call, &t)
        );
    }

    /// The encoded inputs are the rule's codes and descales of this trial's inputs (the
    /// call's scale included), judged by sdpa_fwd_fp8's reference and tolerance.
    #[test]
    fn encoded_inputs_are_the_rule_s_codes_of_the_trial() {
        let s = shape();
        let d = crate::harness::int(&s, "HEAD_DIM") as usize;
        for (kind, seed) in [(InputKind::Large, 3), (InputKind::Rows, 4)] {
            let mut call = SdpaFp8E2e.varied_call(&s, seed, &[]);
            call.scalars[0] *= 1.5;
            let originals = SdpaFp8E2e.generate(&s, &call, kind, seed);
            let enc = SdpaFp8E2e.encoded(&s, &call, kind, seed).unwrap();
            for (t, seq) in [5usize, 7, 7].into_iter().enumerate() {
                let values: Vec<f32> = (0..originals[t].len())
                    .map(|i| originals[t].get(i) as f32)
                    .collect();
                let q = crate::fp8::quantize(&values, seq * d);
                assert_eq!(enc.inputs[t].bytes, q.codes, "{kind:?} tensor {t}");
                assert_eq!(
                    enc.inputs[t + 3],
                    HostTensor::from_f32(ElemType::F32, &q.descale)
                );
            }
            let mut fp8 = SdpaFp8.default_call(&s);
            fp8.scalars = call.scalars.clone();
            assert_eq!(Some(enc.reference), SdpaFp8.reference(&s, &fp8));
            assert_eq!(enc.kernel_tolerance, SdpaFp8.tolerance(&s));
        }
    }

    #[test]
    fn scalar_list_is_the_tail_of_both_abis() {
        let s = shape();
        let lists = SdpaFp8E2e.arg_lists(&s);
        let abi = SdpaFp8E2e.args(&s);
        let range = lists
            .iter()
            .find(|(n, _)| *n == "sdpa_scalars")
            .unwrap()
            .1
            .clone();
        let scalars = &abi[range];
        let fp8 = SdpaFp8.args(&s);
        assert_eq!(scalars[..], fp8[7..]);
        assert!(scalars
            .iter()
            .all(|a| !matches!(a, ArgSlot::Input(_) | ArgSlot::Output)));
        assert_eq!(lists[0].1, 0..abi.len());
    }
}
