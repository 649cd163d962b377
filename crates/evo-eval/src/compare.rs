//! The correctness gate's comparison rule and verdict. The worker applies the rule on the
//! GPU (`worker/gate_kernels.cu: evo_compare`, in double as here); [`compare`] is its CPU
//! copy, unit-tested here and held equal to the GPU's by a GPU test.

use evo_kernels::harness::{HostTensor, Tolerance};
use rayon::prelude::*;

use crate::protocol::{CheckFailure, ErrorStats};

/// Byte written into the guard regions around an output.
pub const GUARD_BYTE: u8 = 0xA5;

/// Compares an output with the float32 reference. Runs on all cores over fixed chunks
/// merged in order, so the result does not depend on the number of threads.
pub fn compare(got: &HostTensor, reference: &[f32], tol: &Tolerance) -> ErrorStats {
    const CHUNK: usize = 1 << 16;
    assert_eq!(
        got.len(),
        reference.len(),
        "output and reference lengths differ"
    );
    let max_ref = reference
        .par_iter()
        .fold(|| 0f64, |m, r| m.max((*r as f64).abs()))
        .reduce(|| 0f64, f64::max);
    let atol = tol.atol_floor + tol.atol_of_max * max_ref;
    let partials: Vec<(ErrorStats, f64, f64)> = reference
        .par_chunks(CHUNK)
        .enumerate()
        .map(|(c, refs)| {
            let mut s = ErrorStats::default();
            let (mut err2, mut ref2) = (0f64, 0f64);
            for (j, &r) in refs.iter().enumerate() {
                let i = c * CHUNK + j;
                let (g, r) = (got.get(i), r as f64);
                let bad = if g.is_nan() {
                    s.nan += 1;
                    true
                } else if g.is_infinite() {
                    s.inf += 1;
                    true
                } else {
                    let e = (g - r).abs();
                    s.max_abs = s.max_abs.max(e);
                    err2 += e * e;
                    e > atol + tol.rtol * r.abs()
                };
                ref2 += r * r;
                if bad {
                    s.bad += 1;
                    s.first_bad.get_or_insert(i);
                }
            }
            (s, err2, ref2)
        })
        .collect();
    let mut s = ErrorStats {
        max_ref,
        ..ErrorStats::default()
    };
    let (mut err2, mut ref2) = (0f64, 0f64);
    for (p, e2, r2) in partials {
        s.max_abs = s.max_abs.max(p.max_abs);
        s.nan += p.nan;
        s.inf += p.inf;
        s.bad += p.bad;
        if s.first_bad.is_none() {
            s.first_bad = p.first_bad;
        }
        err2 += e2;
        ref2 += r2;
    }
    s.rel_l2 = relative_l2(err2, ref2, s.nan + s.inf);
    s
}

/// ‖got − ref‖ / ‖ref‖ from the sums of squares: infinite when an element is not finite
/// or the reference is zero but the output is not, 0 when both are zero.
pub fn relative_l2(err2: f64, ref2: f64, not_finite: u64) -> f64 {
    if not_finite > 0 {
        f64::INFINITY
    } else if ref2 > 0.0 {
        (err2 / ref2).sqrt()
    } else if err2 > 0.0 {
        f64::INFINITY
    } else {
        0.0
    }
}

/// The first failed check of a comparison, if any. NaN or Inf never passes.
pub fn verdict(s: &ErrorStats, tol: &Tolerance) -> Option<CheckFailure> {
    if s.nan + s.inf > 0 {
        return Some(CheckFailure::NotFinite {
            count: s.nan + s.inf,
            first: s.first_bad.unwrap_or(0),
        });
    }
    if s.bad > 0 {
        return Some(CheckFailure::Tolerance {
            count: s.bad,
            first: s.first_bad.unwrap_or(0),
        });
    }
    (s.rel_l2 > tol.rel_l2).then_some(CheckFailure::RelativeL2 {
        value: s.rel_l2,
        bound: tol.rel_l2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use evo_kernels::harness::ElemType;

    const TOL: Tolerance = Tolerance {
        rtol: 4e-3,
        atol_of_max: 1e-3,
        atol_floor: 1e-5,
        rel_l2: 2e-3,
    };

    fn f16(values: &[f32]) -> HostTensor {
        HostTensor::from_f32(ElemType::F16, values)
    }

    #[test]
    fn rounding_passes_real_errors_fail() {
        let reference: Vec<f32> = (0..100).map(|i| (i as f32 - 50.0) * 0.37).collect();
        // fp16 rounding of the reference itself passes.
        let s = compare(&f16(&reference), &reference, &TOL);
        assert_eq!(verdict(&s, &TOL), None, "{s:?}");
        assert!(s.max_abs > 0.0);
        // One element off by 5% fails the element check.
        let mut off = reference.clone();
        off[42] *= 1.05;
        let s = compare(&f16(&off), &reference, &TOL);
        assert_eq!(
            verdict(&s, &TOL),
            Some(CheckFailure::Tolerance {
                count: 1,
                first: 42
            })
        );
        // Poison left in place (unwritten element) is NaN: never passes.
        let mut t = f16(&reference);
        t.bytes[20..22].copy_from_slice(&ElemType::F16.nan_bytes());
        let s = compare(&t, &reference, &TOL);
        assert_eq!(
            verdict(&s, &TOL),
            Some(CheckFailure::NotFinite {
                count: 1,
                first: 10
            })
        );
        assert!(s.rel_l2.is_infinite());
        // Inf never passes either.
        let mut inf = reference.clone();
        inf[3] = f32::INFINITY;
        assert!(matches!(
            verdict(&compare(&f16(&inf), &reference, &TOL), &TOL),
            Some(CheckFailure::NotFinite { .. })
        ));
    }

    #[test]
    fn many_small_errors_fail_the_l2_bound() {
        let reference: Vec<f32> = (0..1000).map(|i| 1.0 + (i % 7) as f32).collect();
        // Every element 0.3% high: inside rtol (0.4%), but the L2 error (3e-3) is over 2e-3.
        let got: Vec<f32> = reference.iter().map(|r| r * 1.003).collect();
        let s = compare(&HostTensor::from_f32(ElemType::F32, &got), &reference, &TOL);
        assert!(
            matches!(verdict(&s, &TOL), Some(CheckFailure::RelativeL2 { .. })),
            "{s:?}"
        );
    }

    /// FP8 end to end (`sdpa_fwd_fp8_e2e`, the kernels quantize): the trial's verdict is
    /// the FP8 kernels' tolerance of the answer on the rule's codes, as for a kernel given
    /// those codes. The end-to-end bound on the exact answer must admit what rounding q and
    /// k does to a peaked softmax, and it admits an output 12.5% too small (a v descale of
    /// amax / 512 instead of amax / 448); the kernels' tolerance does not, and the decoded
    /// answer itself, rounded to the output type, passes it.
    #[test]
    fn fp8_end_to_end_trials_are_judged_on_the_rule_s_codes() {
        use evo_core::Value;
        use evo_kernels::harness::InputKind;
        use evo_kernels::problem::Problem;
        use evo_kernels::problems::{SdpaFp8, SdpaFp8E2e};
        let mut s = evo_core::Vars::new();
        for (k, x) in [
            ("BATCH", 1),
            ("HEADS", 4),
            ("SEQ_Q", 96),
            ("SEQ_KV", 160),
            ("HEAD_DIM", 64),
        ] {
            s.insert(k.into(), Value::Int(x));
        }
        let s = SdpaFp8E2e.complete_shape(&s).unwrap();
        let call = SdpaFp8E2e.default_call(&s);
        let bound = SdpaFp8E2e.tolerance(&s);
        for (kind, seed) in [(InputKind::Random, 1), (InputKind::Large, 2)] {
            let originals = SdpaFp8E2e.generate(&s, &call, kind, seed);
            let exact: Vec<f32> = SdpaFp8E2e
                .cpu_reference(&s, &call, &originals)
                .iter()
                .map(|&x| x as f32)
                .collect();
            let enc = SdpaFp8E2e.encoded(&s, &call, kind, seed).unwrap();
            let mut fp8 = SdpaFp8.default_call(&s);
            fp8.scalars = call.scalars.clone();
            let decoded: Vec<f32> = SdpaFp8
                .cpu_reference(&s, &fp8, &enc.inputs)
                .iter()
                .map(|&x| x as f32)
                .collect();
            let kernel = enc.kernel_tolerance;
            let good = f16(&decoded);
            assert_eq!(verdict(&compare(&good, &decoded, &kernel), &kernel), None);
            let low: Vec<f32> = decoded.iter().map(|x| x * 448.0 / 512.0).collect();
            let low = f16(&low);
            assert_eq!(
                verdict(&compare(&low, &exact, &bound), &bound),
                None,
                "{kind:?}: the end-to-end bound admits 12.5% too small"
            );
            assert!(
                matches!(
                    verdict(&compare(&low, &decoded, &kernel), &kernel),
                    Some(CheckFailure::RelativeL2 { .. } | CheckFailure::Tolerance { .. })
                ),
                "{kind:?}: {:?}",
                compare(&low, &decoded, &kernel)
            );
        }
    }

    /// The outliers of the FP8 problems' Zeros trial (`harness::plant_outliers`) are the
    /// only inputs that catch planted `sdpa_fp8_e2e/e_amax_clipped_at_24_rms.cu`, whose
    /// quantizer takes min(amax, 24 x RMS) per slice: on every other trial kind, at the
    /// suite's shapes and its edge shapes, no slice has a value 24 RMS out, so its codes
    /// are the rule's bit for bit (it passes wherever the correct kernel does); on the
    /// Zeros trial its answer fails the kernels' tolerance of the answer on the rule's codes.
    #[test]
    fn only_the_outliers_catch_a_quantizer_that_clips_at_24_rms() {
        use evo_core::Value;
        use evo_kernels::fp8;
        use evo_kernels::harness::InputKind;
        use evo_kernels::problem::Problem;
        use evo_kernels::problems::{SdpaFp8, SdpaFp8E2e};
        const CLIP: f32 = 24.0;
        let shape = |b: i64, h: i64, sq: i64, skv: i64| {
            let mut s = evo_core::Vars::new();
            for (k, x) in [
                ("BATCH", b),
                ("HEADS", h),
                ("SEQ_Q", sq),
                ("SEQ_KV", skv),
                ("HEAD_DIM", 64),
            ] {
                s.insert(k.into(), Value::Int(x));
            }
            SdpaFp8E2e.complete_shape(&s).unwrap()
        };
        // Per tensor (q, k, v): each slice's (amax, the planted kernel's clipped amax).
        let amaxes = |s: &evo_core::Vars, originals: &[HostTensor]| -> Vec<Vec<(f32, f32)>> {
            let d = |k: &str| s[k].as_int().unwrap() as usize;
            [d("SEQ_Q"), d("SEQ_KV"), d("SEQ_KV")]
                .iter()
                .zip(originals)
                .map(|(seq, t)| {
                    let values: Vec<f32> = (0..t.len()).map(|i| t.get(i) as f32).collect();
                    values
                        .chunks(seq * d("HEAD_DIM"))
                        .map(|slice| {
                            let amax = fp8::amax(slice);
                            let ss: f32 = slice.iter().map(|x| x * x).sum();
                            (amax, amax.min(CLIP * (ss / slice.len() as f32).sqrt()))
                        })
                        .collect()
                })
                .collect()
        };
        // tests/planted/sdpa_fp8_e2e/check.toml's shapes and the problem's edge shapes.
        let suite = [shape(2, 4, 512, 512), shape(1, 8, 1000, 1000)];
        let mut shapes = suite.to_vec();
        shapes.extend(SdpaFp8E2e.edge_shapes(&suite));
        for s in &shapes {
            for seed in 0..3u64 {
                for (kind, call) in [
                    InputKind::Random,
                    InputKind::Large,
                    InputKind::OneHot,
                    InputKind::Rows,
                ]
                .into_iter()
                .flat_map(|k| {
                    [
                        (k, SdpaFp8E2e.default_call(s)),
                        (k, SdpaFp8E2e.varied_call(s, seed, &[])),
                    ]
                }) {
                    let originals = SdpaFp8E2e.generate(s, &call, kind, seed);
                    for (t, slices) in amaxes(s, &originals).iter().enumerate() {
                        for (i, (amax, clipped)) in slices.iter().enumerate() {
                            assert_eq!(
                                amax, clipped,
                                "{kind:?} seed {seed} {s:?}: tensor {t} slice {i}"
                            );
                        }
                    }
                }
            }
        }
        // The Zeros trial: every normal slice's outlier clipped, the answer far off.
        let s = shape(1, 4, 96, 160);
        let call = SdpaFp8E2e.default_call(&s);
        for seed in 0..3u64 {
            let originals = SdpaFp8E2e.generate(&s, &call, InputKind::Zeros, seed);
            let enc = SdpaFp8E2e
                .encoded(&s, &call, InputKind::Zeros, seed)
                .unwrap();
            let mut clipped = Vec::new();
            let mut descales = Vec::new();
            for (t, slices) in amaxes(&s, &originals).iter().enumerate() {
                let n = originals[t].len() / slices.len();
                let mut codes = Vec::new();
                let mut descale = Vec::new();
                for (i, &(amax, clip)) in slices.iter().enumerate() {
                    assert!(
                        amax == 0.0 || clip < amax * 0.8,
                        "seed {seed}: tensor {t} slice {i}: {amax} {clip}"
                    );
                    let (inv, d) = fp8::scales(clip);
                    codes.extend(
                        (i * n..(i + 1) * n).map(|j| fp8::encode(originals[t].get(j) as f32 * inv)),
                    );
                    descale.push(d);
                }
                clipped.push(HostTensor {
                    elem: ElemType::E4m3,
                    bytes: codes,
                });
                descales.push(HostTensor::from_f32(ElemType::F32, &descale));
            }
            clipped.extend(descales);
            let mut fp8_call = SdpaFp8.default_call(&s);
            fp8_call.scalars = call.scalars.clone();
            let answer = |inputs: &[HostTensor]| -> Vec<f32> {
                SdpaFp8
                    .cpu_reference(&s, &fp8_call, inputs)
                    .iter()
                    .map(|&x| x as f32)
                    .collect()
            };
            let decoded = answer(&enc.inputs);
            let planted = f16(&answer(&clipped));
            let kernel = enc.kernel_tolerance;
            assert_eq!(
                verdict(&compare(&f16(&decoded), &decoded, &kernel), &kernel),
                None
            );
            assert!(
                verdict(&compare(&planted, &decoded, &kernel), &kernel).is_some(),
                "seed {seed}: {:?}",
                compare(&planted, &decoded, &kernel)
            );
        }
    }

    #[test]
    fn zero_reference_needs_zero_output() {
        let reference = vec![0.0f32; 16];
        let s = compare(&f16(&reference), &reference, &TOL);
        assert_eq!((s.rel_l2, verdict(&s, &TOL)), (0.0, None));
        let mut got = reference.clone();
        got[5] = 0.01;
        let s = compare(&f16(&got), &reference, &TOL);
        assert!(verdict(&s, &TOL).is_some());
    }

    #[test]
    fn comparison_over_many_chunks_counts_every_bad_element() {
        let n = 200_000;
        let reference: Vec<f32> = (0..n).map(|i| ((i % 97) as f32) / 97.0).collect();
        let mut got = reference.clone();
        got[150_000] += 0.5;
        got[70_000] += 0.5;
        got[n - 1] = f32::NAN;
        let s = compare(&f16(&got), &reference, &TOL);
        assert_eq!((s.bad, s.nan, s.first_bad), (3, 1, Some(70_000)));
        assert!((s.max_abs - 0.5).abs() < 1e-3, "{}", s.max_abs);
        assert_eq!(s.rel_l2, f64::INFINITY);
        got[n - 1] = reference[n - 1];
        let s = compare(&f16(&got), &reference, &TOL);
        let serial_ref2: f64 = reference.iter().map(|&r| (r as f64).powi(2)).sum();
        assert!(s.rel_l2 > 0.5 / serial_ref2.sqrt() && s.rel_l2 < 1.0 / serial_ref2.sqrt());
    }
}
