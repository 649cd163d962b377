//! Per-knob statistics of a history: which values the elites share, and how genomes
//! with each value fared. Mutation uses them to try values common among elites more
//! often; the orchestrator stores them per generation and shows them to users.

use evo_core::{Space, Value};
use serde::{Deserialize, Serialize};

use crate::history::{History, Outcome};

/// Statistics of one knob value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ValueInsight {
    pub value: Value,
    /// Elites that have this value.
    pub elite_count: usize,
    /// `elite_count / elites` (0 when there are no elites).
    pub elite_share: f64,
    /// Evaluated genomes (with a usable fitness) that have this value.
    pub evaluated_count: usize,
    /// `evaluated_count / evaluated` (0 when nothing is evaluated).
    pub evaluated_share: f64,
    /// Failed genomes that have this value (a high count hints at a value that breaks
    /// kernels).
    pub failed_count: usize,
    /// Arithmetic mean of the fitness of evaluated genomes with this value.
    pub mean_fitness: Option<f64>,
    pub best_fitness: Option<f64>,
}

/// Statistics of one knob, its values in the order the space lists them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KnobInsight {
    pub knob: String,
    pub values: Vec<ValueInsight>,
}

/// Per-knob statistics over a history, for the space's knobs in the space's order.
/// Genomes with values the space does not list (an older config) are counted in the
/// totals but under no value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Insights {
    /// Number of elites the elite counts are over (at most the K asked for).
    pub elites: usize,
    pub evaluated: usize,
    pub failed: usize,
    pub pending: usize,
    pub knobs: Vec<KnobInsight>,
}

impl Insights {
    /// Statistics of `history` over `space`, with the top `elite_count` genomes as elites.
    pub fn compute(space: &Space, history: &History, elite_count: usize) -> Insights {
        let elites = history.elites(elite_count);
        let mut knobs: Vec<KnobInsight> = space
            .knobs()
            .iter()
            .map(|k| KnobInsight {
                knob: k.name.clone(),
                values: k
                    .values
                    .iter()
                    .map(|v| ValueInsight {
                        value: v.clone(),
                        elite_count: 0,
                        elite_share: 0.0,
                        evaluated_count: 0,
                        evaluated_share: 0.0,
                        failed_count: 0,
                        mean_fitness: None,
                        best_fitness: None,
                    })
                    .collect(),
            })
            .collect();
        // Sums for the means, beside `knobs` so the output type stays plain.
        let mut sums: Vec<Vec<f64>> = knobs.iter().map(|k| vec![0.0; k.values.len()]).collect();
        let (mut evaluated, mut failed, mut pending) = (0, 0, 0);

        for record in history.records() {
            let fitness = record.fitness();
            match (record.outcome, fitness) {
                (_, Some(_)) => evaluated += 1,
                (Outcome::Pending, None) => pending += 1,
                (_, None) => failed += 1,
            }
            if matches!(record.outcome, Outcome::Pending) {
                continue;
            }
            for (k, knob) in knobs.iter_mut().enumerate() {
                let Some(v) = record.genome.get(&knob.knob) else {
                    continue;
                };
                let Some(i) = knob.values.iter().position(|x| &x.value == v) else {
                    continue;
                };
                let stats = &mut knob.values[i];
                match fitness {
                    Some(f) => {
                        stats.evaluated_count += 1;
                        sums[k][i] += f;
                        stats.best_fitness = Some(stats.best_fitness.map_or(f, |b| b.max(f)));
                    }
                    None => stats.failed_count += 1,
                }
            }
        }
        for elite in &elites {
            for knob in knobs.iter_mut() {
                if let Some(stats) = elite
                    .genome
                    .get(&knob.knob)
                    .and_then(|v| knob.values.iter_mut().find(|x| &x.value == v))
                {
                    stats.elite_count += 1;
                }
            }
        }
        for (knob, sums) in knobs.iter_mut().zip(&sums) {
            for (stats, sum) in knob.values.iter_mut().zip(sums) {
                stats.elite_share = ratio(stats.elite_count, elites.len());
                stats.evaluated_share = ratio(stats.evaluated_count, evaluated);
                stats.mean_fitness =
                    (stats.evaluated_count > 0).then(|| sum / stats.evaluated_count as f64);
            }
        }
        Insights {
            elites: elites.len(),
            evaluated,
            failed,
            pending,
            knobs,
        }
    }

    /// The probability of each value of knob `name` (in the space's order) when mutation
    /// picks a new value: `(1 - weight) * uniform + weight * preference`, where the
    /// preference is the Laplace-smoothed elite share `(elite_count + 1) / (elites +
    /// values)`, so every value keeps some chance and values common among elites get
    /// more. `weight` is clamped to `0..=1`. `None` if the knob is unknown.
    pub fn value_weights(&self, name: &str, weight: f64) -> Option<Vec<f64>> {
        let knob = self.knobs.iter().find(|k| k.knob == name)?;
        let m = knob.values.len() as f64;
        let w = if weight.is_nan() {
            0.0
        } else {
            weight.clamp(0.0, 1.0)
        };
        let counted: usize = knob.values.iter().map(|v| v.elite_count).sum();
        Some(
            knob.values
                .iter()
                .map(|v| {
                    let preference = (v.elite_count as f64 + 1.0) / (counted as f64 + m);
                    (1.0 - w) / m + w * preference
                })
                .collect(),
        )
    }
}

fn ratio(n: usize, d: usize) -> f64 {
    if d == 0 {
        0.0
    } else {
        n as f64 / d as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use evo_core::{Genome, Knob};

    fn space() -> Space {
        Space::new(
            vec![
                Knob {
                    name: "B".into(),
                    values: vec![Value::Int(16), Value::Int(32), Value::Int(64)],
                },
                Knob {
                    name: "S".into(),
                    values: vec!["none".into(), "xor".into()],
                },
            ],
            vec![],
            vec![],
            vec![],
        )
        .unwrap()
    }

    fn g(text: &str) -> Genome {
        Genome::parse(text).unwrap()
    }

    /// Five evaluated, one failed, one pending; two elites.
    fn history() -> History {
        let mut h = History::new();
        let ev = |f| Outcome::Evaluated { fitness: f };
        h.insert(g("B=16,S=none"), 0, ev(1.0));
        h.insert(g("B=32,S=none"), 0, ev(2.0));
        h.insert(g("B=32,S=xor"), 0, ev(4.0));
        h.insert(g("B=64,S=xor"), 1, ev(3.0));
        h.insert(g("B=16,S=xor"), 1, ev(0.5));
        h.insert(g("B=64,S=none"), 1, Outcome::Failed);
        h.insert(g("B=16,S=none"), 2, ev(1.0)); // same genome again: still one record
        h.add_proposals(2, [&g("B=32,S=xor")]); // already present: untouched
        h
    }

    #[test]
    fn counts_shares_means_and_bests() {
        let i = Insights::compute(&space(), &history(), 2);
        assert_eq!((i.elites, i.evaluated, i.failed, i.pending), (2, 5, 1, 0));
        // Elites: B=32,S=xor (4.0) and B=64,S=xor (3.0).
        let b = &i.knobs[0];
        assert_eq!(b.knob, "B");
        let b16 = &b.values[0];
        assert_eq!(
            (b16.elite_count, b16.evaluated_count, b16.failed_count),
            (0, 2, 0)
        );
        assert_eq!(b16.mean_fitness, Some(0.75));
        assert_eq!(b16.best_fitness, Some(1.0));
        assert_eq!(b16.evaluated_share, 0.4);
        let b32 = &b.values[1];
        assert_eq!((b32.elite_count, b32.elite_share), (1, 0.5));
        assert_eq!(b32.mean_fitness, Some(3.0));
        assert_eq!(b32.best_fitness, Some(4.0));
        let b64 = &b.values[2];
        assert_eq!(
            (b64.elite_count, b64.evaluated_count, b64.failed_count),
            (1, 1, 1)
        );
        let s = &i.knobs[1];
        assert_eq!((s.values[1].elite_count, s.values[1].elite_share), (2, 1.0));
        assert_eq!(s.values[0].elite_count, 0);
        assert_eq!(s.values[0].mean_fitness, Some(1.5));
        assert_eq!(s.values[1].mean_fitness, Some(7.5 / 3.0));

        // Weights: S has elite counts (0, 2) over 2 values: preference (1/4, 3/4).
        let w = i.value_weights("S", 1.0).unwrap();
        assert_eq!(w, vec![0.25, 0.75]);
        let w = i.value_weights("S", 0.5).unwrap();
        assert_eq!(w, vec![0.375, 0.625]);
        assert_eq!(i.value_weights("S", 0.0).unwrap(), vec![0.5, 0.5]);
        assert!(i.value_weights("NOPE", 0.5).is_none());
    }

    #[test]
    fn pending_genomes_count_only_as_pending() {
        let mut h = history();
        h.add_proposals(3, [&g("B=64,S=xor")]);
        h.set_outcome(&g("B=64,S=xor").hash(), Outcome::Pending);
        let i = Insights::compute(&space(), &h, 2);
        assert_eq!((i.evaluated, i.failed, i.pending), (4, 1, 1));
        assert_eq!(i.knobs[0].values[2].evaluated_count, 0);
    }

    #[test]
    fn no_elites_means_uniform_weights() {
        let i = Insights::compute(&space(), &History::new(), 4);
        assert_eq!(i.elites, 0);
        let w = i.value_weights("B", 0.9).unwrap();
        assert!(w.iter().all(|x| (x - 1.0 / 3.0).abs() < 1e-12), "{w:?}");
        let json = serde_json::to_value(&i).unwrap();
        assert_eq!(json["knobs"][1]["values"][1]["value"], "xor");
    }
}
