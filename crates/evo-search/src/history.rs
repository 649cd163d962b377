//! What a run has tried so far: every genome proposed, the generation that proposed it,
//! and how its evaluation ended.
//!
//! The history is keyed by genome hash, so it holds each genome once and its contents —
//! not the order records were added in — decide everything derived from it (elites,
//! insights, proposals). A history rebuilt from the database in any row order is the
//! same history.

use std::cmp::Ordering;
use std::collections::btree_map::{self, BTreeMap};

use evo_core::{Genome, GenomeHash};
use serde::{Deserialize, Serialize};

/// How the evaluation of one genome ended, as far as the search cares.
///
/// * `Pending`: proposed, not (yet) evaluated. It counts as seen: it is never proposed
///   again, but it cannot be an elite.
/// * `Failed`: any status other than `evaluated` and `regressed` (render, compile,
///   static, launch, crash, timeout, incorrect). Seen, never an elite.
/// * `Evaluated`: timed; `fitness` is the geometric-mean speedup over the baseline,
///   higher is better. **Regressed candidates are `Evaluated` with their fitness**, not
///   `Failed`: early in a run every kernel is usually slower than a vendor baseline on
///   every shape, and treating those as failures would leave evolution with no elites
///   and reduce it to random search. Their low fitness already ranks them low; whether
///   one may be exported is the orchestrator's business, not the search's.
///
/// An `Evaluated` fitness that is not finite and positive is treated like `Failed`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    Pending,
    Failed,
    Evaluated { fitness: f64 },
}

impl Outcome {
    /// The fitness if this outcome may rank among elites.
    pub fn fitness(&self) -> Option<f64> {
        match *self {
            Outcome::Evaluated { fitness } if fitness.is_finite() && fitness > 0.0 => Some(fitness),
            _ => None,
        }
    }
}

/// One genome of the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Record {
    pub hash: GenomeHash,
    pub genome: Genome,
    /// The generation that first proposed it.
    pub generation: u32,
    pub outcome: Outcome,
}

impl Record {
    pub fn fitness(&self) -> Option<f64> {
        self.outcome.fitness()
    }
}

/// Every genome proposed so far in a run, each once.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    records: BTreeMap<GenomeHash, Record>,
}

impl History {
    pub fn new() -> Self {
        History::default()
    }

    /// Adds a genome with its outcome, or updates the outcome of one already present.
    /// This is the call for rebuilding a history from stored rows. A genome keeps the
    /// earliest generation it is given, so re-adding a row cannot move it later.
    pub fn insert(&mut self, genome: Genome, generation: u32, outcome: Outcome) {
        let hash = genome.hash();
        match self.records.entry(hash.clone()) {
            btree_map::Entry::Occupied(mut e) => {
                let r = e.get_mut();
                r.generation = r.generation.min(generation);
                r.outcome = outcome;
            }
            btree_map::Entry::Vacant(e) => {
                e.insert(Record {
                    hash,
                    genome,
                    generation,
                    outcome,
                });
            }
        }
    }

    /// Adds freshly proposed genomes as `Pending` (those already present are left as
    /// they are).
    pub fn add_proposals<'a>(
        &mut self,
        generation: u32,
        genomes: impl IntoIterator<Item = &'a Genome>,
    ) {
        for g in genomes {
            if !self.contains(&g.hash()) {
                self.insert(g.clone(), generation, Outcome::Pending);
            }
        }
    }

    /// Sets the outcome of a genome already in the history; `false` if it is unknown.
    pub fn set_outcome(&mut self, hash: &GenomeHash, outcome: Outcome) -> bool {
        match self.records.get_mut(hash) {
            Some(r) => {
                r.outcome = outcome;
                true
            }
            None => false,
        }
    }

    pub fn contains(&self, hash: &GenomeHash) -> bool {
        self.records.contains_key(hash)
    }

    pub fn get(&self, hash: &GenomeHash) -> Option<&Record> {
        self.records.get(hash)
    }

    /// The hashes of every genome seen in the run (proposed, whatever its outcome).
    pub fn seen(&self) -> impl Iterator<Item = &GenomeHash> + '_ {
        self.records.keys()
    }

    /// Every record, in hash order.
    pub fn records(&self) -> impl Iterator<Item = &Record> + '_ {
        self.records.values()
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Records with a usable fitness.
    pub fn evaluated(&self) -> impl Iterator<Item = &Record> + '_ {
        self.records.values().filter(|r| r.fitness().is_some())
    }

    /// The `k` best evaluated genomes: fitness descending, ties broken by earlier
    /// generation, then by hash, so the order is total and the same on every machine.
    pub fn elites(&self, k: usize) -> Vec<&Record> {
        let mut ranked: Vec<&Record> = self.evaluated().collect();
        ranked.sort_by(|a, b| elite_order(a, b));
        ranked.truncate(k);
        ranked
    }

    /// The best evaluated genome.
    pub fn best(&self) -> Option<&Record> {
        self.evaluated().min_by(|a, b| elite_order(a, b))
    }
}

/// Better first; see [`History::elites`].
fn elite_order(a: &Record, b: &Record) -> Ordering {
    let (fa, fb) = (a.fitness().unwrap_or(0.0), b.fitness().unwrap_or(0.0));
    fb.total_cmp(&fa)
        .then(a.generation.cmp(&b.generation))
        .then_with(|| a.hash.cmp(&b.hash))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(text: &str) -> Genome {
        Genome::parse(text).unwrap()
    }

    #[test]
    fn elites_rank_by_fitness_then_generation_then_hash() {
        let mut h = History::new();
        h.insert(g("A=1"), 0, Outcome::Evaluated { fitness: 1.0 });
        h.insert(g("A=2"), 1, Outcome::Evaluated { fitness: 2.0 });
        h.insert(g("A=3"), 0, Outcome::Evaluated { fitness: 2.0 });
        h.insert(g("A=4"), 0, Outcome::Failed);
        h.insert(g("A=5"), 2, Outcome::Pending);
        h.insert(g("A=6"), 2, Outcome::Evaluated { fitness: f64::NAN });
        h.insert(g("A=7"), 1, Outcome::Evaluated { fitness: 1.0 });
        h.insert(g("A=8"), 1, Outcome::Evaluated { fitness: 1.0 });
        let names: Vec<String> = h.elites(10).iter().map(|r| r.genome.canonical()).collect();
        // A=7 and A=8 tie on fitness and generation: hash order decides.
        let (first, second) = if g("A=7").hash() < g("A=8").hash() {
            ("A=7", "A=8")
        } else {
            ("A=8", "A=7")
        };
        assert_eq!(names, ["A=3", "A=2", "A=1", first, second]);
        assert_eq!(h.elites(2).len(), 2);
        assert_eq!(h.best().unwrap().genome, g("A=3"));
        assert_eq!(h.len(), 8);
        assert_eq!(h.seen().count(), 8);
    }

    #[test]
    fn insertion_order_does_not_matter_and_generation_stays_earliest() {
        let rows = [
            (g("A=1"), 0, Outcome::Evaluated { fitness: 1.5 }),
            (g("A=2"), 1, Outcome::Failed),
            (g("A=3"), 1, Outcome::Pending),
        ];
        let mut forward = History::new();
        rows.iter()
            .for_each(|(g, gen, o)| forward.insert(g.clone(), *gen, *o));
        let mut backward = History::new();
        rows.iter()
            .rev()
            .for_each(|(g, gen, o)| backward.insert(g.clone(), *gen, *o));
        assert_eq!(forward, backward);

        forward.insert(g("A=1"), 5, Outcome::Evaluated { fitness: 1.6 });
        let r = forward.get(&g("A=1").hash()).unwrap();
        assert_eq!((r.generation, r.fitness()), (0, Some(1.6)));
        assert!(forward.set_outcome(&g("A=3").hash(), Outcome::Failed));
        assert!(!forward.set_outcome(&g("A=9").hash(), Outcome::Failed));
    }

    #[test]
    fn outcome_serializes_with_a_status_tag() {
        let json = serde_json::to_string(&Outcome::Evaluated { fitness: 1.25 }).unwrap();
        assert_eq!(json, r#"{"status":"evaluated","fitness":1.25}"#);
        assert_eq!(
            serde_json::to_string(&Outcome::Failed).unwrap(),
            r#"{"status":"failed"}"#
        );
    }
}
