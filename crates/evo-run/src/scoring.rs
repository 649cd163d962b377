//! From a result to what the database stores: fitness against the baseline (geometric
//! mean speedup over the shapes) and the regression rule, and the rows of a result.

use std::collections::BTreeSet;

use evo_core::config::SearchSection;
use evo_core::fitness::{geomean_speedup, is_regressed};
use evo_core::{median_on, ShapeMeasurement, Status};
use evo_search::Outcome;
use evo_store::{Candidate, CandidateResult};

use crate::backend::GenomeResult;

/// Status and fitness of a result against the baseline: geometric-mean speedup over the
/// shapes, and `regressed` when more than the tolerance slower on enough shapes. A status
/// that was not timed keeps itself and gets no fitness.
pub fn score(
    status: Status,
    baseline: &[f64],
    times: &[f64],
    search: &SearchSection,
) -> (Status, Option<f64>) {
    if !status.has_fitness() {
        return (status, None);
    }
    let fitness = geomean_speedup(baseline, times);
    if is_regressed(
        baseline,
        times,
        search.regression_tolerance,
        search.regression_shapes,
    ) {
        (Status::Regressed, fitness)
    } else {
        (Status::Evaluated, fitness)
    }
}

/// The median time on each of the shapes `keys` (NaN where one was not timed).
pub fn times_on<'a>(
    measurements: impl IntoIterator<Item = &'a ShapeMeasurement> + Clone,
    keys: &[String],
) -> Vec<f64> {
    keys.iter()
        .map(|k| median_on(measurements.clone(), k).unwrap_or(f64::NAN))
        .collect()
}

/// The candidate row of a result with `fitness`.
pub fn result_row(r: &GenomeResult, fitness: Option<f64>) -> CandidateResult {
    CandidateResult {
        status: r.status,
        gate: r.gate,
        detail: Some(r.detail.clone()),
        resources: Some(r.resources.clone()),
        fitness,
        eval_ms: Some(r.eval_ms),
        source_key: r.source_key.clone(),
    }
}

/// The measurements of a result, one per shape (a shape checked in two
/// specializations would appear twice; the database keeps one).
pub fn measurements(r: &GenomeResult) -> Vec<ShapeMeasurement> {
    let mut seen = BTreeSet::new();
    r.shapes
        .iter()
        .filter(|s| seen.insert(s.key()))
        .cloned()
        .collect()
}

/// The search outcome of a stored candidate: regressed ones count with their fitness
/// (against a fast external baseline every early kernel regresses).
pub fn outcome(c: &Candidate) -> Outcome {
    match (c.status, c.fitness) {
        (None, _) => Outcome::Pending,
        (Some(s), Some(f)) if s.has_fitness() => Outcome::Evaluated { fitness: f },
        _ => Outcome::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regressed_keeps_its_fitness_and_failures_get_none() {
        let search = SearchSection::default();
        let base = [10.0, 10.0, 10.0];
        let (s, f) = score(Status::Evaluated, &base, &[5.0, 5.0, 5.0], &search);
        assert_eq!((s, f), (Status::Evaluated, Some(2.0)));
        let (s, f) = score(Status::Evaluated, &base, &[20.0, 20.0, 5.0], &search);
        assert_eq!(s, Status::Regressed);
        assert!(f.is_some_and(|f| f < 1.0));
        assert_eq!(
            score(Status::Incorrect, &base, &[1.0, 1.0, 1.0], &search),
            (Status::Incorrect, None)
        );
    }
}
