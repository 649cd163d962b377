//! The split-KV algebra of the sdpa_fwd_*_splitkv families in float64, without a GPU: the
//! kernels' split of a CTA's KV tiles (per = ceil(n / S) tiles each, the causal limit applied
//! first), each split's online softmax in the log2 domain with the kernels' masking and
//! empty-row rule (O_s = 0, lse_s = -inf), and the combine (templates/common/splitkv.cuh)
//! give softmax(S) V of the unsplit problem, for ragged shapes, causal or not. A model of the
//! formulas the templates implement, not of the kernels' code.

const LOG2E: f64 = std::f64::consts::LOG2_E;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
}

/// KV tiles a CTA of query rows [m0, m0 + bm) needs (sdpa_fwd_wgmma's rule: causal rows see
/// keys up to their own index, top-left aligned).
fn cta_tiles(m0: usize, bm: usize, skv: usize, bn: usize, causal: bool) -> usize {
    let kv_end = if causal { skv.min(m0 + bm) } else { skv };
    kv_end.div_ceil(bn)
}

/// Split s of S: its first tile and tile count (count 0: an empty split).
fn split_range(n: usize, splits: usize, s: usize) -> (usize, usize) {
    let per = n.div_ceil(splits);
    let t0 = n.min(s * per);
    (t0, (n - t0).min(per))
}

#[allow(clippy::too_many_arguments)]
fn check(
    sq: usize,
    skv: usize,
    d: usize,
    bm: usize,
    bn: usize,
    splits: usize,
    causal: bool,
    seed: u64,
) {
    let mut rng = Lcg(seed);
    // Scores already scaled by softmax_scale; values of V.
    let score: Vec<f64> = (0..sq * skv).map(|_| 4.0 * rng.next()).collect();
    let v: Vec<f64> = (0..skv * d).map(|_| rng.next()).collect();
    let visible = |i: usize, j: usize| j < skv && (!causal || j <= i);
    for i in 0..sq {
        // Reference: softmax over the visible keys.
        let mx = (0..skv)
            .filter(|&j| visible(i, j))
            .map(|j| score[i * skv + j])
            .fold(f64::NEG_INFINITY, f64::max);
        let mut want = vec![0.0; d];
        let mut sum = 0.0;
        for j in (0..skv).filter(|&j| visible(i, j)) {
            let p = (score[i * skv + j] - mx).exp();
            sum += p;
            for c in 0..d {
                want[c] += p * v[j * d + c];
            }
        }
        want.iter_mut().for_each(|x| *x /= sum);

        // Kernel 1: the row's CTA, each split's online softmax (log2 domain).
        let m0 = i / bm * bm;
        let n = cta_tiles(m0, bm, skv, bn, causal);
        let mut partials = Vec::new();
        for s in 0..splits {
            let (t0, count) = split_range(n, splits, s);
            let (mut m, mut l) = (f64::NEG_INFINITY, 0.0);
            let mut acc = vec![0.0; d];
            for t in t0..t0 + count {
                let keys: Vec<usize> = (t * bn..(t + 1) * bn).collect();
                let x: Vec<f64> = keys
                    .iter()
                    .map(|&j| {
                        if visible(i, j) {
                            score[i * skv + j] * LOG2E
                        } else {
                            f64::NEG_INFINITY
                        }
                    })
                    .collect();
                let m_new = x.iter().copied().fold(m, f64::max);
                let m_use = if m_new == f64::NEG_INFINITY {
                    0.0
                } else {
                    m_new
                };
                let alpha = (m - m_use).exp2();
                l *= alpha;
                acc.iter_mut().for_each(|a| *a *= alpha);
                for (&j, &xj) in keys.iter().zip(&x) {
                    let p = (xj - m_use).exp2();
                    l += p;
                    if p > 0.0 {
                        for c in 0..d {
                            acc[c] += p * v[j * d + c];
                        }
                    }
                }
                m = m_new;
            }
            let inv = if l > 0.0 { 1.0 / l } else { 0.0 };
            let lse = if l > 0.0 {
                m + l.log2()
            } else {
                f64::NEG_INFINITY
            };
            partials.push((acc.iter().map(|a| a * inv).collect::<Vec<f64>>(), lse));
        }

        // Kernel 2: the combine.
        let lse_max = partials
            .iter()
            .map(|p| p.1)
            .fold(f64::NEG_INFINITY, f64::max);
        assert!(lse_max.is_finite(), "row {i}: no split saw a key");
        let mut got = vec![0.0; d];
        let mut wsum = 0.0;
        for (o, lse) in &partials {
            if *lse == f64::NEG_INFINITY {
                assert!(o.iter().all(|x| *x == 0.0));
                continue;
            }
            let w = (lse - lse_max).exp2();
            wsum += w;
            for c in 0..d {
                got[c] += w * o[c];
            }
        }
        for c in 0..d {
            let g = got[c] / wsum;
            assert!(
                (g - want[c]).abs() <= 1e-12,
                "sq {sq} skv {skv} bm {bm} bn {bn} S {splits} causal {causal}: row {i} col {c}: {g} vs {}",
                want[c]
            );
        }
    }
}

#[test]
fn split_and_combine_equal_unsplit_softmax() {
    let mut seed = 1;
    for (sq, skv) in [(1, 1), (77, 130), (130, 77), (1, 1000), (64, 1), (200, 200)] {
        for (bm, bn) in [(16, 16), (64, 64), (128, 64), (64, 128)] {
            for splits in [2, 4, 8] {
                for causal in [false, true] {
                    seed += 1;
                    check(sq, skv, 4, bm, bn, splits, causal, seed);
                }
            }
        }
    }
}

/// Every tile of a CTA belongs to exactly one split, in order; splits past the last tile are
/// empty (short sequences: n < S).
#[test]
fn splits_partition_the_tiles() {
    for n in 1..40 {
        for splits in [2, 3, 4, 8] {
            let mut next = 0;
            for s in 0..splits {
                let (t0, count) = split_range(n, splits, s);
                assert!(count == 0 || t0 == next, "n {n} S {splits} s {s}");
                next = t0 + count;
            }
            assert_eq!(next, n);
        }
    }
    assert_eq!(split_range(1, 8, 0), (0, 1));
    assert_eq!(split_range(1, 8, 1), (1, 0));
    assert_eq!(split_range(10, 4, 3), (9, 1));
    assert_eq!(split_range(9, 4, 3), (9, 0));
}
