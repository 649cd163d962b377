//! Fitness landscapes known in advance, for measuring strategies without a GPU: run a
//! strategy against a table of outcomes and trace how fast it finds good genomes.
//!
//! A landscape is a map from genome hash to fitness (or failure); it can come from a
//! formula ([`synthetic`]) or, later, from a real run's database, exhaustively measured.

use std::collections::BTreeMap;

use evo_core::{Expr, Genome, GenomeHash, Knob, Space, Value};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::history::{History, Outcome};
use crate::strategy::Strategy;

/// Known outcomes: each genome's fitness, `None` for a failed one. Genomes not in the
/// map count as failed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Landscape {
    fitness: BTreeMap<GenomeHash, Option<f64>>,
}

impl Landscape {
    pub fn new() -> Self {
        Landscape::default()
    }

    /// Every valid genome of `space` with the fitness `f` gives it.
    pub fn from_fn(space: &Space, mut f: impl FnMut(&Genome) -> Option<f64>) -> Landscape {
        Landscape {
            fitness: space.iter_valid().map(|g| (g.hash(), f(&g))).collect(),
        }
    }

    pub fn insert(&mut self, genome: &Genome, fitness: Option<f64>) {
        self.fitness.insert(genome.hash(), fitness);
    }

    pub fn outcome(&self, genome: &Genome) -> Outcome {
        match self.fitness.get(&genome.hash()) {
            Some(Some(fitness)) => Outcome::Evaluated { fitness: *fitness },
            _ => Outcome::Failed,
        }
    }

    /// The best fitness of any genome (what exhaustive search finds).
    pub fn optimum(&self) -> Option<f64> {
        self.fitness
            .values()
            .flatten()
            .copied()
            .max_by(f64::total_cmp)
    }

    /// Number of genomes with a known outcome.
    pub fn len(&self) -> usize {
        self.fitness.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fitness.is_empty()
    }
}

/// Runs `strategy` against `landscape` the way the orchestrator would (propose a
/// generation, evaluate it in order, record the outcomes, next generation, no seeds)
/// until `budget` evaluations are spent or the strategy has nothing left to propose.
/// Returns the trace of improvements: `(evaluations so far, best fitness so far)`,
/// one entry each time the best fitness rises.
pub fn simulate(
    strategy: &dyn Strategy,
    space: &Space,
    landscape: &Landscape,
    budget: usize,
) -> Vec<(usize, f64)> {
    simulate_until(strategy, space, landscape, budget, f64::INFINITY)
}

/// [`simulate`], stopping as soon as the best fitness reaches `target` (benchmarks that
/// only ask how long reaching it takes need not spend the rest of the budget).
pub fn simulate_until(
    strategy: &dyn Strategy,
    space: &Space,
    landscape: &Landscape,
    budget: usize,
    target: f64,
) -> Vec<(usize, f64)> {
    let mut history = History::new();
    let mut trace: Vec<(usize, f64)> = Vec::new();
    let mut evaluations = 0;
    for generation in 0u32.. {
        if evaluations >= budget {
            break;
        }
        let proposals = strategy.propose(space, &history, generation, &[]);
        if proposals.is_empty() {
            break;
        }
        history.add_proposals(generation, proposals.iter().map(|p| &p.genome));
        for p in proposals.iter().take(budget - evaluations) {
            let outcome = landscape.outcome(&p.genome);
            history.set_outcome(&p.genome.hash(), outcome);
            evaluations += 1;
            if let Some(f) = outcome.fitness() {
                if trace.last().is_none_or(|(_, best)| f > *best) {
                    trace.push((evaluations, f));
                    if f >= target {
                        return trace;
                    }
                }
            }
        }
    }
    trace
}

/// Evaluations a trace needed to reach fitness `target`, if it did.
pub fn evaluations_to_reach(trace: &[(usize, f64)], target: f64) -> Option<usize> {
    trace.iter().find(|(_, f)| *f >= target).map(|(e, _)| *e)
}

/// Quantile `p` (0..=1) of sorted counts, by linear interpolation between order
/// statistics (the median of an even count is the mean of the two middle values);
/// `None` for no counts.
pub fn quantile(sorted: &[usize], p: f64) -> Option<f64> {
    let x = sorted.len().checked_sub(1)? as f64 * p;
    let (lo, hi) = (
        sorted[x.floor() as usize] as f64,
        sorted[x.ceil() as usize] as f64,
    );
    Some(lo + (hi - lo) * x.fract())
}

/// The value positions of [`synthetic`]'s optimum, knob by knob.
pub const SYNTHETIC_OPTIMUM: &str =
    "BLOCK_M=128,BLOCK_N=64,NUM_WARPS=4,STAGES=3,SWIZZLE=xor,UNROLL=2";

/// A synthetic landscape shaped like a kernel family's, for benchmarks and tests.
///
/// Space: BLOCK_M and BLOCK_N in {16, 32, 64, 128, 256}, NUM_WARPS in {1, 2, 4, 8, 16},
/// STAGES in {1, 2, 3, 4}, SWIZZLE in {none, pad, xor}, UNROLL in {1, 2, 4, 8}: 6000
/// raw genomes; constraints `(BLOCK_M + STAGES * BLOCK_N) * 128 <= 98304` (shared
/// memory) and `NUM_WARPS * 16 <= BLOCK_M` (rows per warp) leave 3,240 valid.
///
/// Fitness `2 / (1 + q)`, smooth with one optimum ([`SYNTHETIC_OPTIMUM`], fitness 2):
/// with `d_K` the distance in list positions of knob K from the optimum's,
/// `q = 0.5 d_M² + 0.5 d_N² + 0.3 (d_M - d_N)² + 0.4 d_W² + 0.3 d_S² + 0.2 d_U²
///   + 0.2 (d_S - d_U)² + s`, where `s` is 0 for xor, 0.01 for pad, 0.5 for none. The
/// interaction terms make the knobs depend on each other (tile shape, pipeline depth
/// against unrolling), so a one-knob-at-a-time search is not enough. Within 2% of the
/// optimum lie exactly two genomes: the optimum and its `SWIZZLE=pad` twin (1.980).
///
/// Failures: NUM_WARPS=16 with UNROLL=8 always fails (like a register-spill rejection),
/// and one genome in 16 (by hash) fails as if it did not compile; the optimum never does.
pub fn synthetic() -> (Space, Landscape) {
    let ints = |name: &str, values: &[i64]| Knob {
        name: name.into(),
        values: values.iter().map(|v| Value::Int(*v)).collect(),
    };
    let space = Space::new(
        vec![
            ints("BLOCK_M", &[16, 32, 64, 128, 256]),
            ints("BLOCK_N", &[16, 32, 64, 128, 256]),
            ints("NUM_WARPS", &[1, 2, 4, 8, 16]),
            ints("STAGES", &[1, 2, 3, 4]),
            Knob {
                name: "SWIZZLE".into(),
                values: vec!["none".into(), "pad".into(), "xor".into()],
            },
            ints("UNROLL", &[1, 2, 4, 8]),
        ],
        vec![],
        vec![
            (
                "smem".into(),
                Expr::parse("(BLOCK_M + STAGES * BLOCK_N) * 128 <= 98304").expect("valid"),
            ),
            (
                "rows_per_warp".into(),
                Expr::parse("NUM_WARPS * 16 <= BLOCK_M").expect("valid"),
            ),
        ],
        vec![],
    )
    .expect("the synthetic space is well formed");
    let optimum = Genome::parse(SYNTHETIC_OPTIMUM).expect("valid genome text");
    let position = |g: &Genome, knob: &str| -> f64 {
        let values = &space.knob(knob).expect("knob of the space").values;
        values
            .iter()
            .position(|v| Some(v) == g.get(knob))
            .expect("value of the knob") as f64
    };
    let landscape = Landscape::from_fn(&space, |g| {
        let d = |knob: &str| position(g, knob) - position(&optimum, knob);
        let (dm, dn, dw, ds, du) = (
            d("BLOCK_M"),
            d("BLOCK_N"),
            d("NUM_WARPS"),
            d("STAGES"),
            d("UNROLL"),
        );
        let swizzle = match g.get("SWIZZLE").and_then(Value::as_str) {
            Some("xor") => 0.0,
            Some("pad") => 0.01,
            _ => 0.5,
        };
        let q = 0.5 * dm * dm
            + 0.5 * dn * dn
            + 0.3 * (dm - dn).powi(2)
            + 0.4 * dw * dw
            + 0.3 * ds * ds
            + 0.2 * du * du
            + 0.2 * (ds - du).powi(2)
            + swizzle;
        let spills =
            g.get("NUM_WARPS") == Some(&Value::Int(16)) && g.get("UNROLL") == Some(&Value::Int(8));
        let compile_failure = g.hash().0.starts_with('0') && *g != optimum;
        (!spills && !compile_failure).then_some(2.0 / (1.0 + q))
    });
    (space, landscape)
}

/// A random landscape over any space, for checking a strategy on landscapes it was not
/// tuned on: ln(fitness) is a sum of per-knob effects, pairwise interactions and noise,
/// and some genomes fail. Deterministic in `seed`.
///
/// * An ordinal knob with more than two values gets a smooth effect: a downward parabola
///   over its list positions, curvature up to 1.6 between the ends, peak anywhere.
///   Any other knob gets independent effects per value, N(0, s²), s up to 0.25.
/// * Each pair of knobs interacts with probability 0.3: an effect per value pair,
///   N(0, 0.15²).
/// * Each pair of knobs has, with probability 0.1, failing value pairs (each with
///   probability 0.15): a genome combining one fails, like a compile or static rejection.
/// * Every genome fails with probability 0.05 (by hash), and the rest get noise
///   N(0, 0.02²) in ln(fitness), fixed per genome like a recorded measurement.
pub fn random_landscape(space: &Space, seed: u64) -> Landscape {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let knobs = space.knobs();
    let mut main: Vec<Vec<f64>> = Vec::new();
    for k in knobs {
        let n = k.values.len();
        if space.is_ordinal(&k.name) && n > 2 {
            let curvature = 1.6 * rng.random::<f64>();
            let peak = rng.random::<f64>() * (n - 1) as f64;
            main.push(
                (0..n)
                    .map(|i| -curvature * ((i as f64 - peak) / (n - 1) as f64).powi(2))
                    .collect(),
            );
        } else {
            let s = 0.25 * rng.random::<f64>();
            main.push((0..n).map(|_| s * normal(&mut rng)).collect());
        }
    }
    let table = |rng: &mut ChaCha8Rng,
                 a: usize,
                 b: usize,
                 mut f: Box<dyn FnMut(&mut ChaCha8Rng) -> f64>|
     -> Vec<Vec<f64>> {
        (0..knobs[a].values.len())
            .map(|_| (0..knobs[b].values.len()).map(|_| f(rng)).collect())
            .collect()
    };
    let mut pairs = Vec::new();
    let mut failing = Vec::new();
    for a in 0..knobs.len() {
        for b in a + 1..knobs.len() {
            if rng.random::<f64>() < 0.3 {
                pairs.push((a, b, table(&mut rng, a, b, Box::new(|r| 0.15 * normal(r)))));
            }
            if rng.random::<f64>() < 0.1 {
                let cells = table(
                    &mut rng,
                    a,
                    b,
                    Box::new(|r| f64::from(u8::from(r.random::<f64>() < 0.15))),
                );
                failing.push((a, b, cells));
            }
        }
    }
    let salt: u64 = rng.random();
    Landscape::from_fn(space, |g| {
        let pos: Vec<usize> = knobs
            .iter()
            .map(|k| {
                k.values
                    .iter()
                    .position(|v| Some(v) == g.get(&k.name))
                    .unwrap_or(0)
            })
            .collect();
        if failing.iter().any(|(a, b, t)| t[pos[*a]][pos[*b]] > 0.0) {
            return None;
        }
        let hash = u64::from_str_radix(&g.hash().0, 16).unwrap_or(0);
        let mut own = ChaCha8Rng::seed_from_u64(hash ^ salt);
        if own.random::<f64>() < 0.05 {
            return None;
        }
        let value = pos.iter().zip(&main).map(|(p, m)| m[*p]).sum::<f64>()
            + pairs
                .iter()
                .map(|(a, b, t)| t[pos[*a]][pos[*b]])
                .sum::<f64>()
            + 0.02 * normal(&mut own);
        Some(value.exp())
    })
}

/// A standard normal draw (Box–Muller), from the RNG's stream alone.
fn normal(rng: &mut impl Rng) -> f64 {
    let u1 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

#[cfg(test)]
mod tests {
    #[test]
    fn quantiles_interpolate_between_order_statistics() {
        assert_eq!(super::quantile(&[], 0.5), None);
        assert_eq!(super::quantile(&[1, 3], 0.5), Some(2.0));
        assert_eq!(super::quantile(&[1, 3, 10], 1.0), Some(10.0));
    }

    use super::*;
    use crate::params::SearchParams;
    use crate::strategy::{Exhaustive, Random};

    #[test]
    fn synthetic_landscape_is_as_documented() {
        let (space, landscape) = synthetic();
        assert_eq!(space.raw_size(), 6000);
        assert_eq!(landscape.len(), 3240);
        assert_eq!(landscape.optimum(), Some(2.0));
        let optimum = Genome::parse(SYNTHETIC_OPTIMUM).unwrap();
        assert_eq!(
            landscape.outcome(&optimum),
            Outcome::Evaluated { fitness: 2.0 }
        );
        let near: Vec<Genome> = space
            .iter_valid()
            .filter(|g| landscape.outcome(g).fitness().is_some_and(|f| f >= 1.96))
            .collect();
        assert_eq!(near.len(), 2, "{near:?}");
        let failed = space
            .iter_valid()
            .filter(|g| landscape.outcome(g) == Outcome::Failed)
            .count();
        assert!((200..600).contains(&failed), "{failed} failures");
        // Not in the map: failed.
        assert_eq!(
            landscape.outcome(&Genome::parse("X=1").unwrap()),
            Outcome::Failed
        );
    }

    #[test]
    fn traces_record_rising_bests_within_the_budget() {
        let (space, landscape) = synthetic();
        let exhaustive = Exhaustive::new(SearchParams::default());
        let trace = simulate(&exhaustive, &space, &landscape, usize::MAX);
        assert_eq!(trace.last().map(|t| t.1), landscape.optimum());
        assert!(trace.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
        let first_best = evaluations_to_reach(&trace, 2.0).unwrap();
        let optimum = Genome::parse(SYNTHETIC_OPTIMUM).unwrap();
        let position = space.iter_valid().position(|g| g == optimum).unwrap();
        assert_eq!(first_best, position + 1);

        let random = Random::new(SearchParams::default());
        let short = simulate(&random, &space, &landscape, 10);
        assert!(short.last().unwrap().0 <= 10);
        assert_eq!(evaluations_to_reach(&short, 3.0), None);
    }
}
