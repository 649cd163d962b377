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

/// The verdict on a trial whose inputs are encoded (FP8): the output passes when it is
/// within `bound` of the exact answer on the original inputs (`exact`), or within `kernel` of
/// the answer on the decoded inputs (`decoded`: the encoding rule's codes, what an FP8 kernel
/// can at best reproduce; on adversarial inputs, rounding q and k alone can move a peaked
/// softmax's output beyond any fixed `bound`). Failing both, the failure against the exact
/// answer.
pub fn encoded_verdict(
    exact: &ErrorStats,
    bound: &Tolerance,
    decoded: &ErrorStats,
    kernel: &Tolerance,
) -> Option<CheckFailure> {
    let failure = verdict(exact, bound)?;
    verdict(decoded, kernel).map(|_| failure)
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

    /// An encoded trial passes near either answer, fails far from both (with the failure
    /// against the exact one), and never passes output that is not finite.
    #[test]
    fn encoded_verdict_needs_one_of_the_two_answers() {
        let exact: Vec<f32> = (0..100).map(|i| (i as f32 - 50.0) * 0.37).collect();
        // Rounding moved the decoded answer 10% off the exact one.
        let decoded: Vec<f32> = exact.iter().map(|x| x * 1.1).collect();
        let kernel = TOL;
        let bound = Tolerance {
            rtol: 0.0,
            atol_of_max: 0.02,
            atol_floor: 1e-5,
            rel_l2: 0.05,
        };
        let judge = |got: &[f32]| {
            let t = HostTensor::from_f32(ElemType::F32, got);
            encoded_verdict(
                &compare(&t, &exact, &bound),
                &bound,
                &compare(&t, &decoded, &kernel),
                &kernel,
            )
        };
        assert_eq!(judge(&exact), None, "the exact answer");
        assert_eq!(
            judge(&decoded),
            None,
            "the decoded answer, 10% from the exact one"
        );
        let between: Vec<f32> = exact.iter().map(|x| x * 1.05).collect();
        assert!(
            matches!(judge(&between), Some(CheckFailure::Tolerance { .. })),
            "5% from each: {:?}",
            judge(&between)
        );
        let mut nan = decoded.clone();
        nan[9] = f32::NAN;
        assert!(matches!(judge(&nan), Some(CheckFailure::NotFinite { .. })));
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
