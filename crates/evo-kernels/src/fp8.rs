//! The FP8 (e4m3) quantization rule shared by the host and the GPU quantizer: one scale
//! per (batch, head) slice, `scale = amax / 448`, values encoded as
//! `e4m3_satfinite(x * (448 / amax))` in float32, an all-zero slice gets scale 1 (and
//! encodes to zeros). The e4m3 rounding is the `float8` crate's, which follows
//! `cuda_fp8.hpp` (round to nearest even, saturate to ±448, NaN → NaN); the GPU side is
//! `__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)`, so both produce the same bits
//! (the GPU quantizer is checked against this function bit for bit).
//!
//! Float32 arithmetic, in this order, on both sides:
//! `amax = max |x|` (NaN ignored, like `fmaxf`), `inv = 448 / amax`, `code = e4m3(x * inv)`,
//! `descale = amax / 448`; for `amax == 0`: `inv = 1`, `descale = 1`.

use float8::F8E4M3;
use rayon::prelude::*;

/// Largest finite e4m3 value.
pub const E4M3_MAX: f32 = 448.0;

/// One e4m3 code of a float32 value (saturating, round to nearest even).
pub fn encode(x: f32) -> u8 {
    F8E4M3::from_f32(x).to_bits()
}

/// The value of an e4m3 code.
pub fn decode(code: u8) -> f32 {
    F8E4M3::from_bits(code).to_f32()
}

/// Largest |x| of a slice, NaNs ignored (as CUDA's `fmaxf` does); 0 for an empty or
/// all-NaN slice.
pub fn amax(values: &[f32]) -> f32 {
    values
        .iter()
        .fold(0f32, |m, v| if v.is_nan() { m } else { m.max(v.abs()) })
}

/// The encoding multiplier and the descale factor of a slice with this amax.
pub fn scales(amax: f32) -> (f32, f32) {
    if amax > 0.0 && amax.is_finite() {
        (E4M3_MAX / amax, amax / E4M3_MAX)
    } else {
        // All zero (or nothing finite to scale by): codes are x itself, descale 1.
        (1.0, 1.0)
    }
}

/// A tensor quantized per slice: `codes[i]` of slice `i / slice_len` decodes to
/// `decode(codes[i]) * descale[i / slice_len]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Quantized {
    pub codes: Vec<u8>,
    pub descale: Vec<f32>,
}

impl Quantized {
    /// The dequantized values the kernel is meant to compute with.
    pub fn dequantize(&self) -> Vec<f32> {
        let n = self.codes.len() / self.descale.len().max(1);
        self.codes
            .iter()
            .enumerate()
            .map(|(i, c)| decode(*c) * self.descale[i / n.max(1)])
            .collect()
    }
}

/// Quantizes `values` as consecutive slices of `slice_len` elements (one per
/// (batch, head) of a contiguous (batch, heads, seq, dim) tensor).
pub fn quantize(values: &[f32], slice_len: usize) -> Quantized {
    assert!(slice_len > 0 && values.len().is_multiple_of(slice_len));
    // Slices are independent: quantized on all cores (the worker does this per trial).
    let mut codes = vec![0u8; values.len()];
    let descale: Vec<f32> = codes
        .par_chunks_mut(slice_len)
        .zip(values.par_chunks(slice_len))
        .map(|(out, slice)| {
            let (inv, d) = scales(amax(slice));
            for (c, x) in out.iter_mut().zip(slice) {
                *c = encode(x * inv);
            }
            d
        })
        .collect();
    Quantized { codes, descale }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_slice_gets_scale_one_and_zero_codes() {
        let q = quantize(&[0.0; 8], 4);
        assert_eq!(q.descale, vec![1.0, 1.0]);
        assert!(q.codes.iter().all(|c| *c == 0));
        // A zero slice next to a normal one keeps its own scale.
        let q = quantize(&[0.0, 0.0, 1.0, -2.0], 2);
        assert_eq!(q.descale, vec![1.0, 2.0 / 448.0]);
        assert_eq!(&q.codes[..2], &[0, 0]);
        assert_eq!(decode(q.codes[3]), -448.0);
        assert_eq!(decode(q.codes[2]), 224.0);
    }

    #[test]
    fn saturates_instead_of_overflowing() {
        assert_eq!(encode(448.0), 0x7e);
        assert_eq!(encode(1e6), 0x7e);
        assert_eq!(encode(-1e6), 0xfe);
        assert_eq!(encode(f32::INFINITY), 0x7e);
        // The slice maximum lands on ±448 exactly, even when x * (448 / amax) rounds above.
        for amax in [3.0f32, 0.1, 7.77, 1e-3, 6e4] {
            let (inv, _) = scales(amax);
            assert_eq!(decode(encode(amax * inv)), 448.0, "{amax}");
            assert_eq!(decode(encode(-amax * inv)), -448.0, "{amax}");
        }
    }

    #[test]
    fn rounds_to_nearest_even() {
        // Between 1 and 2 the e4m3 step is 1/8: 1.0625 is a tie between 1 (even mantissa)
        // and 1.125; 1.1875 a tie between 1.125 and 1.25 (even).
        assert_eq!(decode(encode(1.0625)), 1.0);
        assert_eq!(decode(encode(1.1875)), 1.25);
        assert_eq!(decode(encode(1.07)), 1.125);
        // Above 256 the step is 32: 272 ties to 256, 304 to 320.
        assert_eq!(decode(encode(272.0)), 256.0);
        assert_eq!(decode(encode(304.0)), 320.0);
        // Subnormals: the smallest is 2^-9; half of it rounds to zero (tie, even).
        assert_eq!(decode(encode(2f32.powi(-9))), 2f32.powi(-9));
        assert_eq!(encode(2f32.powi(-10)), 0);
        assert_eq!(decode(encode(1.5 * 2f32.powi(-9))), 2f32.powi(-8));
        // Every code but NaN round-trips.
        for c in 0u8..=255 {
            if c & 0x7f != 0x7f {
                assert_eq!(encode(decode(c)), c, "{c:#x}");
            }
        }
    }

    #[test]
    fn nan_encodes_to_nan_and_does_not_set_the_scale() {
        assert!(decode(encode(f32::NAN)).is_nan());
        assert_eq!(amax(&[1.0, f32::NAN, -3.0]), 3.0);
        let q = quantize(&[f32::NAN, 2.0], 2);
        assert_eq!(q.descale, vec![2.0 / 448.0]);
        assert!(decode(q.codes[0]).is_nan());
        assert_eq!(decode(q.codes[1]), 448.0);
        // Nothing finite: scale 1.
        assert_eq!(quantize(&[f32::NAN], 1).descale, vec![1.0]);
    }

    #[test]
    fn dequantized_values_are_within_half_an_ulp() {
        let values: Vec<f32> = (0..64).map(|i| (i as f32 - 31.5) * 0.37).collect();
        let q = quantize(&values, 32);
        for (x, y) in values.iter().zip(q.dequantize()) {
            assert!((x - y).abs() <= x.abs() / 16.0 + 1e-6, "{x} {y}");
        }
    }
}
