//! Fitness arithmetic: speedups over a baseline and the regression rule (DESIGN.md,
//! "Search").

/// Geometric mean over shapes of `baseline / candidate` (both times, same order).
/// `None` if the slices differ in length, are empty, or hold a non-positive time.
pub fn geomean_speedup(baseline: &[f64], candidate: &[f64]) -> Option<f64> {
    if baseline.len() != candidate.len() || baseline.is_empty() {
        return None;
    }
    let mut log_sum = 0.0;
    for (b, c) in baseline.iter().zip(candidate) {
        if !(*b > 0.0 && *c > 0.0 && b.is_finite() && c.is_finite()) {
            return None;
        }
        log_sum += (b / c).ln();
    }
    Some((log_sum / baseline.len() as f64).exp())
}

/// The shapes (indices) on which a candidate is more than `tolerance` (0.10 = 10%)
/// slower than the baseline; a shape without a time (NaN) is not slow.
pub fn slow_shapes(baseline: &[f64], candidate: &[f64], tolerance: f64) -> Vec<usize> {
    baseline
        .iter()
        .zip(candidate)
        .enumerate()
        .filter(|(_, (b, c))| **c > **b * (1.0 + tolerance))
        .map(|(i, _)| i)
        .collect()
}

/// A candidate is regressed when it is more than `tolerance` (0.10 = 10%) slower than
/// the baseline on at least `min_shapes` shapes; `min_shapes` 0 turns the rule off.
pub fn is_regressed(
    baseline: &[f64],
    candidate: &[f64],
    tolerance: f64,
    min_shapes: usize,
) -> bool {
    min_shapes > 0 && slow_shapes(baseline, candidate, tolerance).len() >= min_shapes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geomean() {
        let s = geomean_speedup(&[10.0, 10.0], &[5.0, 20.0]).unwrap();
        assert!((s - 1.0).abs() < 1e-12);
        let s = geomean_speedup(&[10.0, 40.0], &[5.0, 10.0]).unwrap();
        assert!((s - 8f64.sqrt()).abs() < 1e-12);
        assert_eq!(geomean_speedup(&[1.0], &[0.0]), None);
        assert_eq!(geomean_speedup(&[1.0], &[]), None);
    }

    #[test]
    fn regression_rule_needs_two_slow_shapes() {
        let base = [10.0, 10.0, 10.0];
        assert!(!is_regressed(&base, &[11.5, 9.0, 9.0], 0.10, 2));
        assert!(is_regressed(&base, &[11.5, 11.5, 1.0], 0.10, 2));
        // Exactly 10% slower is not "more than 10%".
        assert!(!is_regressed(&base, &[11.0, 11.0, 11.0], 0.10, 2));
        // 0 shapes: the rule is off, however slow.
        assert!(!is_regressed(&base, &[99.0, 99.0, 99.0], 0.10, 0));
    }
}
