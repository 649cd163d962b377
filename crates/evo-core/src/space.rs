//! A search space: knobs (finite value lists), derived values and constraints, bound to
//! the compile contexts (specialization + target) a genome must be valid in.
//!
//! A genome is *valid* when every constraint evaluates to `true` in every context.
//! Spaces can hold millions of raw combinations, so enumeration is lazy (a mixed-radix
//! counter over the knob lists), and sampling draws uniformly from the raw product and
//! rejects invalid draws, which is uniform among valid genomes; when valid genomes are
//! too rare for that, it falls back to picking among the enumerated valid ones.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use rand::Rng;
use serde::Serialize;

use crate::expr::{Expr, ExprError, Scope};
use crate::genome::{is_identifier, Genome};
use crate::value::{Value, Vars};

/// Above this many raw combinations, [`Space::stats`] estimates instead of counting.
pub const EXACT_STATS_LIMIT: u128 = 5_000_000;
/// Rejection-sampling attempts before falling back to enumeration.
const SAMPLE_ATTEMPTS: usize = 20_000;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpaceError {
    #[error("knob name `{0}` is not an identifier")]
    BadKnobName(String),
    #[error("knob `{0}` has no values")]
    EmptyKnob(String),
    #[error("knob `{0}` lists value `{1}` twice")]
    DuplicateValue(String, String),
    #[error("knob `{0}` mixes {1} and {2} values; use one kind per knob")]
    MixedKinds(String, &'static str, &'static str),
    #[error("knob `{0}` value `{1}` cannot be written in a canonical genome (strings must be non-empty, made of letters, digits, `_-.`, and not look like a number or boolean)")]
    BadValue(String, String),
    #[error("`{0}` is defined twice (as a knob, derived value or context variable)")]
    Duplicate(String),
    #[error("`{name}` (`{source_text}`) reads `{variable}`, which is not a knob, derived value, or specialization, target or shape variable{hint}")]
    UnknownVariable {
        name: String,
        source_text: String,
        variable: String,
        hint: String,
    },
    #[error(
        "`{name}` (`{source_text}`) calls unknown function(s) {functions:?}; known: {known:?}"
    )]
    UnknownFunction {
        name: String,
        source_text: String,
        functions: Vec<String>,
        known: &'static [&'static str],
    },
    #[error("derived values depend on each other in a cycle: {0:?}")]
    Cycle(Vec<String>),
    #[error("the compile contexts do not define the same variables: {0:?} vs {1:?}")]
    ContextMismatch(Vec<String>, Vec<String>),
    #[error("genome has unknown knob `{0}`; the knobs are {1:?}")]
    UnknownKnob(String, Vec<String>),
    #[error("genome lacks knob(s) {0:?}")]
    MissingKnobs(Vec<String>),
    #[error("knob `{knob}` = `{value}` is not one of its values {allowed:?}")]
    ValueNotAllowed {
        knob: String,
        value: String,
        allowed: Vec<String>,
    },
    #[error("`{0}` is declared ordinal but is not a knob; the knobs are {1:?}")]
    UnknownOrdinal(String, Vec<String>),
    #[error("`{0}` has a default but is not a knob; the knobs are {1:?}")]
    UnknownDefault(String, Vec<String>),
    #[error("knob `{knob}`'s default `{value}` is not one of its values {allowed:?}")]
    DefaultNotAllowed {
        knob: String,
        value: String,
        allowed: Vec<String>,
    },
}

/// One knob and the values it may take, in the order the family lists them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Knob {
    pub name: String,
    pub values: Vec<Value>,
}

/// Why a genome is not valid: the first constraint that failed, in which context.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Rejection {
    pub constraint: String,
    pub context: usize,
    /// `None` when the constraint evaluated to `false`; the error text when it could not
    /// be evaluated (a bug in the family, counted separately).
    pub error: Option<String>,
}

/// Counts over a space.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SpaceStats {
    pub raw_size: u128,
    /// Genomes examined (all of them when `exact`).
    pub examined: u128,
    pub valid: u128,
    /// Whether every raw genome was examined; otherwise `valid` and the rejections are
    /// counts over a uniform random sample of `examined` genomes.
    pub exact: bool,
    /// For each constraint, how many examined genomes violate it (a genome may violate
    /// several), in declaration order.
    pub rejected_by: Vec<(String, u128)>,
    /// Examined genomes on which some expression could not be evaluated.
    pub eval_errors: u128,
}

impl SpaceStats {
    /// Estimated number of valid genomes in the whole space.
    pub fn estimated_valid(&self) -> u128 {
        if self.exact || self.examined == 0 {
            self.valid
        } else {
            (self.valid as f64 / self.examined as f64 * self.raw_size as f64).round() as u128
        }
    }
}

#[derive(Debug)]
pub struct Space {
    knobs: Vec<Knob>,
    /// In evaluation order (dependencies first).
    derived: Vec<(String, Expr)>,
    constraints: Vec<(String, Expr)>,
    contexts: Vec<Vars>,
    /// Knobs whose value lists are ordered (a tile size, a pipeline depth): neighbours in
    /// the list are close. The others are categorical.
    ordinal: BTreeSet<String>,
    /// The value a genome that does not name a knob has (see [`Space::with_defaults`]).
    defaults: BTreeMap<String, Value>,
    valid_indices: OnceLock<Vec<u128>>,
}

impl Clone for Space {
    fn clone(&self) -> Self {
        Space {
            knobs: self.knobs.clone(),
            derived: self.derived.clone(),
            constraints: self.constraints.clone(),
            contexts: self.contexts.clone(),
            ordinal: self.ordinal.clone(),
            defaults: self.defaults.clone(),
            valid_indices: OnceLock::new(),
        }
    }
}

impl Space {
    /// Builds and checks a space. `derived` may be in any order; it is sorted so that
    /// each value comes after those it reads. An empty `contexts` means one empty context.
    pub fn new(
        mut knobs: Vec<Knob>,
        derived: Vec<(String, Expr)>,
        constraints: Vec<(String, Expr)>,
        mut contexts: Vec<Vars>,
    ) -> Result<Space, SpaceError> {
        if contexts.is_empty() {
            contexts.push(Vars::new());
        }
        let context_names: BTreeSet<String> = contexts[0].keys().cloned().collect();
        for c in &contexts[1..] {
            let names: BTreeSet<String> = c.keys().cloned().collect();
            if names != context_names {
                return Err(SpaceError::ContextMismatch(
                    context_names.into_iter().collect(),
                    names.into_iter().collect(),
                ));
            }
        }

        knobs.sort_by(|a, b| a.name.cmp(&b.name));
        let mut names: BTreeSet<String> = context_names.clone();
        for knob in &knobs {
            check_knob(knob)?;
            if !names.insert(knob.name.clone()) {
                return Err(SpaceError::Duplicate(knob.name.clone()));
            }
        }
        for (name, _) in &derived {
            if !is_identifier(name) {
                return Err(SpaceError::BadKnobName(name.clone()));
            }
            if !names.insert(name.clone()) {
                return Err(SpaceError::Duplicate(name.clone()));
            }
        }
        for (name, expr) in derived.iter().chain(constraints.iter()) {
            check_expr_names(name, expr, &names)?;
        }
        let derived = order_derived(derived)?;
        Ok(Space {
            knobs,
            derived,
            constraints,
            contexts,
            ordinal: BTreeSet::new(),
            defaults: BTreeMap::new(),
            valid_indices: OnceLock::new(),
        })
    }

    /// The same space with these knobs declared ordinal: their value lists are in order,
    /// so a search may step along them. Every name must be a knob.
    pub fn with_ordinal(
        mut self,
        names: impl IntoIterator<Item = String>,
    ) -> Result<Space, SpaceError> {
        for name in names {
            if self.knob(&name).is_none() {
                let knobs = self.knobs.iter().map(|k| k.name.clone()).collect();
                return Err(SpaceError::UnknownOrdinal(name, knobs));
            }
            self.ordinal.insert(name);
        }
        Ok(self)
    }

    /// The same space with these knob defaults: the value a genome that does not name the
    /// knob has, i.e. the behaviour before the knob existed (so genome strings recorded
    /// before a knob was added — stored candidates, config seeds, artifact manifests —
    /// stay usable). Each must name a knob and be one of its values.
    ///
    /// Identity: a default only completes a genome ([`Space::complete`]); the completed
    /// genome, with the default written out, *is* the genome — its canonical text and
    /// [`crate::GenomeHash`] are the completed one's. A genome text stored before the knob
    /// existed keeps its own stored hash (a database row, a manifest); it names the same
    /// kernel as its completion.
    pub fn with_defaults(
        mut self,
        defaults: impl IntoIterator<Item = (String, Value)>,
    ) -> Result<Space, SpaceError> {
        for (name, value) in defaults {
            let Some(knob) = self.knob(&name) else {
                let knobs = self.knobs.iter().map(|k| k.name.clone()).collect();
                return Err(SpaceError::UnknownDefault(name, knobs));
            };
            if !knob.values.contains(&value) {
                return Err(SpaceError::DefaultNotAllowed {
                    knob: name,
                    value: value.to_string(),
                    allowed: knob.values.iter().map(|v| v.to_string()).collect(),
                });
            }
            self.defaults.insert(name, value);
        }
        Ok(self)
    }

    /// The knob defaults (see [`Space::with_defaults`]).
    pub fn defaults(&self) -> &BTreeMap<String, Value> {
        &self.defaults
    }

    /// The genome with every knob it does not name that has a default set to that
    /// default, checked by [`Space::check_genome`]: the one way a genome text from outside
    /// (a seed, `--genome`, a stored candidate, a manifest) becomes a genome of this
    /// space. A knob missing without a default is still [`SpaceError::MissingKnobs`].
    pub fn complete(&self, genome: &Genome) -> Result<Genome, SpaceError> {
        let mut completed = genome.clone();
        for (name, value) in &self.defaults {
            if completed.get(name).is_none() {
                completed.set(name.clone(), value.clone());
            }
        }
        self.check_genome(&completed)?;
        Ok(completed)
    }

    /// The same space with every knob's value list reversed: the same genomes, enumerated
    /// and indexed the other way. For checking that a search does not depend on the order
    /// the values happen to be listed in.
    pub fn with_reversed_values(&self) -> Space {
        let mut reversed = self.clone();
        for knob in &mut reversed.knobs {
            knob.values.reverse();
        }
        reversed
    }

    /// Whether the knob's values are ordered (see [`Space::with_ordinal`]).
    pub fn is_ordinal(&self, knob: &str) -> bool {
        self.ordinal.contains(knob)
    }

    /// The ordinal knobs, by name.
    pub fn ordinal(&self) -> &BTreeSet<String> {
        &self.ordinal
    }

    pub fn knobs(&self) -> &[Knob] {
        &self.knobs
    }

    pub fn knob(&self, name: &str) -> Option<&Knob> {
        self.knobs.iter().find(|k| k.name == name)
    }

    pub fn derived(&self) -> &[(String, Expr)] {
        &self.derived
    }

    pub fn constraints(&self) -> &[(String, Expr)] {
        &self.constraints
    }

    pub fn contexts(&self) -> &[Vars] {
        &self.contexts
    }

    /// Every name an expression over this space may read (context variables, knobs,
    /// derived values).
    pub fn names(&self) -> BTreeSet<String> {
        let mut n: BTreeSet<String> = self.contexts[0].keys().cloned().collect();
        n.extend(self.knobs.iter().map(|k| k.name.clone()));
        n.extend(self.derived.iter().map(|(k, _)| k.clone()));
        n
    }

    /// Number of raw combinations (product of the knob list lengths).
    pub fn raw_size(&self) -> u128 {
        self.knobs
            .iter()
            .map(|k| k.values.len() as u128)
            .try_fold(1u128, |acc, n| acc.checked_mul(n))
            .unwrap_or(u128::MAX)
    }

    /// The raw genome with this index (`0..raw_size()`); the last knob varies fastest.
    pub fn genome_at(&self, mut index: u128) -> Genome {
        let mut picks = vec![0usize; self.knobs.len()];
        for (i, knob) in self.knobs.iter().enumerate().rev() {
            let n = knob.values.len() as u128;
            picks[i] = (index % n) as usize;
            index /= n;
        }
        self.knobs
            .iter()
            .zip(picks)
            .map(|(k, p)| (k.name.clone(), k.values[p].clone()))
            .collect()
    }

    /// The index of a genome that [`Space::check_genome`] accepts.
    pub fn index_of(&self, genome: &Genome) -> Option<u128> {
        let mut index = 0u128;
        for knob in &self.knobs {
            let pos = knob
                .values
                .iter()
                .position(|v| Some(v) == genome.get(&knob.name))?;
            index = index * knob.values.len() as u128 + pos as u128;
        }
        Some(index)
    }

    /// Checks that the genome assigns an allowed value to exactly the space's knobs
    /// (constraints are not evaluated; see [`Space::rejection`]). A complete genome only:
    /// one that lacks a defaulted knob is completed by [`Space::complete`] first.
    pub fn check_genome(&self, genome: &Genome) -> Result<(), SpaceError> {
        let knob_names = || self.knobs.iter().map(|k| k.name.clone()).collect();
        for (name, value) in genome.iter() {
            let knob = self
                .knob(name)
                .ok_or_else(|| SpaceError::UnknownKnob(name.clone(), knob_names()))?;
            if !knob.values.contains(value) {
                return Err(SpaceError::ValueNotAllowed {
                    knob: name.clone(),
                    value: value.to_string(),
                    allowed: knob.values.iter().map(|v| v.to_string()).collect(),
                });
            }
        }
        let missing: Vec<String> = self
            .knobs
            .iter()
            .filter(|k| genome.get(&k.name).is_none())
            .map(|k| k.name.clone())
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(SpaceError::MissingKnobs(missing))
        }
    }

    /// The first constraint the genome violates, or `None` if it is valid in every
    /// context. The genome must pass [`Space::check_genome`].
    pub fn rejection(&self, genome: &Genome) -> Option<Rejection> {
        let mut scope = Scope::new();
        (0..self.contexts.len()).find_map(|ctx| self.first_rejection(genome, ctx, &mut scope))
    }

    pub fn is_valid(&self, genome: &Genome) -> bool {
        self.check_genome(genome).is_ok() && self.rejection(genome).is_none()
    }

    /// All variables of a genome in one context: context variables, knobs (a knob the
    /// genome does not name at its default, if it has one), derived values.
    pub fn vars(&self, genome: &Genome, context: usize) -> Result<Vars, ExprError> {
        let mut vars = self.contexts[context].clone();
        vars.extend(self.defaults.iter().map(|(k, v)| (k.clone(), v.clone())));
        vars.extend(genome.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut scope = Scope::from_vars(&vars);
        for (name, expr) in &self.derived {
            let v = expr.eval(&scope)?;
            scope.set(name, &v);
            vars.insert(name.clone(), v);
        }
        Ok(vars)
    }

    fn load_scope(
        &self,
        genome: &Genome,
        context: usize,
        scope: &mut Scope,
    ) -> Result<(), ExprError> {
        scope.extend(&self.contexts[context]);
        scope.extend(genome.as_vars());
        for (name, expr) in &self.derived {
            let v = expr.eval(scope)?;
            scope.set(name, &v);
        }
        Ok(())
    }

    fn first_rejection(
        &self,
        genome: &Genome,
        context: usize,
        scope: &mut Scope,
    ) -> Option<Rejection> {
        if let Err(e) = self.load_scope(genome, context, scope) {
            return Some(Rejection {
                constraint: "(derived values)".into(),
                context,
                error: Some(e.to_string()),
            });
        }
        self.constraints
            .iter()
            .find_map(|(name, expr)| match expr.eval_bool(scope) {
                Ok(true) => None,
                Ok(false) => Some(Rejection {
                    constraint: name.clone(),
                    context,
                    error: None,
                }),
                Err(e) => Some(Rejection {
                    constraint: name.clone(),
                    context,
                    error: Some(e.to_string()),
                }),
            })
    }

    /// Evaluates every constraint in every context; returns the indices of the violated
    /// constraints and whether an evaluation error occurred.
    fn all_violations(&self, genome: &Genome, scope: &mut Scope, violated: &mut [bool]) -> bool {
        violated.iter_mut().for_each(|v| *v = false);
        let mut error = false;
        for ctx in 0..self.contexts.len() {
            if self.load_scope(genome, ctx, scope).is_err() {
                error = true;
                continue;
            }
            for (i, (_, expr)) in self.constraints.iter().enumerate() {
                match expr.eval_bool(scope) {
                    Ok(true) => {}
                    Ok(false) => violated[i] = true,
                    Err(_) => {
                        violated[i] = true;
                        error = true;
                    }
                }
            }
        }
        error
    }

    /// The index ([`Space::genome_at`]) of every valid genome, ascending. Enumerates the
    /// raw space on the first call (cost: [`Space::raw_size`] constraint checks) and keeps
    /// the answer; callers bound the raw size first.
    pub fn valid_indices(&self) -> &[u128] {
        self.valid_indices.get_or_init(|| {
            let mut scope = Scope::new();
            (0..self.raw_size())
                .filter(|&i| {
                    let g = self.genome_at(i);
                    (0..self.contexts.len())
                        .all(|c| self.first_rejection(&g, c, &mut scope).is_none())
                })
                .collect()
        })
    }

    /// Valid genomes, lazily, in index order.
    pub fn iter_valid(&self) -> impl Iterator<Item = Genome> + '_ {
        let mut scope = Scope::new();
        (0..self.raw_size()).filter_map(move |i| {
            let g = self.genome_at(i);
            (0..self.contexts.len())
                .all(|ctx| self.first_rejection(&g, ctx, &mut scope).is_none())
                .then_some(g)
        })
    }

    /// Counts valid genomes and rejections per constraint: exactly when the space has
    /// at most `exact_limit` raw genomes, else over `sample` uniform random draws.
    pub fn stats(&self, exact_limit: u128, sample: u64, rng: &mut impl Rng) -> SpaceStats {
        let raw = self.raw_size();
        let exact = raw <= exact_limit;
        let mut violated = vec![false; self.constraints.len()];
        let mut counts = vec![0u128; self.constraints.len()];
        let (mut valid, mut errors, mut examined) = (0u128, 0u128, 0u128);
        let mut scope = Scope::new();
        let mut visit = |g: Genome| {
            examined += 1;
            // A genome whose constraints or derived values cannot be computed (a knob
            // value of 0 in a division, ...) is invalid, as `iter_valid` has it.
            let errored = self.all_violations(&g, &mut scope, &mut violated);
            errors += errored as u128;
            if violated.iter().any(|v| *v) {
                for (c, v) in counts.iter_mut().zip(&violated) {
                    *c += *v as u128;
                }
            } else if !errored {
                valid += 1;
            }
        };
        if exact {
            (0..raw).for_each(|i| visit(self.genome_at(i)));
        } else {
            (0..sample).for_each(|_| visit(self.genome_at(rng.random_range(0..raw))));
        }
        SpaceStats {
            raw_size: raw,
            examined,
            valid,
            exact,
            rejected_by: self
                .constraints
                .iter()
                .map(|(n, _)| n.clone())
                .zip(counts)
                .collect(),
            eval_errors: errors,
        }
    }

    /// A small set of valid genomes that together use every value of every knob that
    /// any valid genome uses, chosen greedily in enumeration order (deterministic).
    /// Values no valid genome takes are returned as the second element.
    pub fn covering_set(&self) -> (Vec<Genome>, Vec<(String, Value)>) {
        let all: BTreeSet<(String, Value)> = self
            .knobs
            .iter()
            .flat_map(|k| k.values.iter().map(move |v| (k.name.clone(), v.clone())))
            .collect();
        let valid: Vec<Genome> = self.iter_valid().collect();
        let values = |g: &Genome| -> Vec<(String, Value)> {
            g.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        greedy_cover(&valid, all, values)
    }

    /// A small set of valid genomes in which every pair of values of two knobs that some
    /// valid genome combines appears together at least once (pairwise coverage), chosen
    /// greedily in enumeration order (deterministic). Also returns how many value pairs
    /// no valid genome combines (excluded by constraints).
    pub fn pairwise_set(&self) -> (Vec<Genome>, usize) {
        let valid: Vec<Genome> = self.iter_valid().collect();
        let pairs = |g: &Genome| -> Vec<[(String, Value); 2]> {
            let kv: Vec<(String, Value)> = g.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let mut out = Vec::new();
            for (i, a) in kv.iter().enumerate() {
                for b in &kv[i + 1..] {
                    out.push([a.clone(), b.clone()]);
                }
            }
            out
        };
        let combined: BTreeSet<[(String, Value); 2]> = valid.iter().flat_map(pairs).collect();
        let possible: usize = self
            .knobs
            .iter()
            .enumerate()
            .map(|(i, a)| {
                self.knobs[i + 1..]
                    .iter()
                    .map(|b| a.values.len() * b.values.len())
                    .sum::<usize>()
            })
            .sum();
        let excluded = possible - combined.len();
        (greedy_cover(&valid, combined, pairs).0, excluded)
    }

    /// A valid genome drawn uniformly at random, or `None` if the space has none.
    pub fn sample(&self, rng: &mut impl Rng) -> Option<Genome> {
        let raw = self.raw_size();
        if raw == 0 {
            return None;
        }
        if self.valid_indices.get().is_none() {
            let mut scope = Scope::new();
            for _ in 0..SAMPLE_ATTEMPTS {
                let g = self.genome_at(rng.random_range(0..raw));
                if (0..self.contexts.len())
                    .all(|c| self.first_rejection(&g, c, &mut scope).is_none())
                {
                    return Some(g);
                }
            }
        }
        // Valid genomes are rare: enumerate them once and pick among them.
        let valid = self.valid_indices();
        if valid.is_empty() {
            None
        } else {
            Some(self.genome_at(valid[rng.random_range(0..valid.len())]))
        }
    }
}

fn check_knob(knob: &Knob) -> Result<(), SpaceError> {
    if !is_identifier(&knob.name) {
        return Err(SpaceError::BadKnobName(knob.name.clone()));
    }
    let first = knob
        .values
        .first()
        .ok_or_else(|| SpaceError::EmptyKnob(knob.name.clone()))?;
    let mut seen = BTreeSet::new();
    for v in &knob.values {
        if v.kind() != first.kind() {
            return Err(SpaceError::MixedKinds(
                knob.name.clone(),
                first.kind(),
                v.kind(),
            ));
        }
        if !v.is_canonical_safe() {
            return Err(SpaceError::BadValue(knob.name.clone(), v.to_string()));
        }
        if !seen.insert(v) {
            return Err(SpaceError::DuplicateValue(knob.name.clone(), v.to_string()));
        }
    }
    Ok(())
}

/// Checks that an expression reads only `names` and calls only known functions.
pub fn check_expr_names(
    name: &str,
    expr: &Expr,
    names: &BTreeSet<String>,
) -> Result<(), SpaceError> {
    for variable in expr.variables() {
        if !names.contains(&variable) {
            let close: Vec<&String> = names
                .iter()
                .filter(|n| n.eq_ignore_ascii_case(&variable) || edit_distance(n, &variable) <= 2)
                .collect();
            let hint = match close.first() {
                Some(c) => format!(" (did you mean `{c}`?)"),
                None => String::new(),
            };
            return Err(SpaceError::UnknownVariable {
                name: name.to_string(),
                source_text: expr.source().to_string(),
                variable,
                hint,
            });
        }
    }
    let unknown = expr.unknown_functions();
    if !unknown.is_empty() {
        return Err(SpaceError::UnknownFunction {
            name: name.to_string(),
            source_text: expr.source().to_string(),
            functions: unknown,
            known: crate::expr::FUNCTIONS,
        });
    }
    Ok(())
}

/// Levenshtein distance, for "did you mean" hints on short names.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + (ca != *cb) as usize)
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Sorts derived values so each follows those it reads.
fn order_derived(derived: Vec<(String, Expr)>) -> Result<Vec<(String, Expr)>, SpaceError> {
    let names: BTreeSet<String> = derived.iter().map(|(n, _)| n.clone()).collect();
    let mut pending: BTreeMap<usize, (String, Expr)> = derived.into_iter().enumerate().collect();
    let mut done: BTreeSet<String> = BTreeSet::new();
    let mut ordered = Vec::new();
    while !pending.is_empty() {
        let ready: Vec<usize> = pending
            .iter()
            .filter(|(_, (_, e))| {
                e.variables()
                    .iter()
                    .all(|v| !names.contains(v) || done.contains(v))
            })
            .map(|(i, _)| *i)
            .collect();
        if ready.is_empty() {
            return Err(SpaceError::Cycle(
                pending.values().map(|(n, _)| n.clone()).collect(),
            ));
        }
        for i in ready {
            let (n, e) = pending.remove(&i).expect("index came from the map");
            done.insert(n.clone());
            ordered.push((n, e));
        }
    }
    Ok(ordered)
}

/// Greedy set cover: repeatedly the first genome (in `valid`'s order) holding the most
/// still-missing features, until none holds any. Returns the chosen genomes and the
/// features no genome holds.
fn greedy_cover<K: Ord + Clone>(
    valid: &[Genome],
    mut missing: BTreeSet<K>,
    features: impl Fn(&Genome) -> Vec<K>,
) -> (Vec<Genome>, Vec<K>) {
    let per_genome: Vec<Vec<K>> = valid.iter().map(&features).collect();
    let mut out = Vec::new();
    loop {
        let best = per_genome
            .iter()
            .enumerate()
            .fold(None::<(usize, usize)>, |best, (i, f)| {
                let c = f.iter().filter(|k| missing.contains(*k)).count();
                match best {
                    Some((_, b)) if b >= c => best,
                    _ => Some((i, c)),
                }
            });
        match best {
            Some((i, c)) if c > 0 => {
                for k in &per_genome[i] {
                    missing.remove(k);
                }
                out.push(valid[i].clone());
            }
            _ => break,
        }
    }
    (out, missing.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn ints(name: &str, values: &[i64]) -> Knob {
        Knob {
            name: name.into(),
            values: values.iter().map(|v| Value::Int(*v)).collect(),
        }
    }

    fn e(s: &str) -> Expr {
        Expr::parse(s).unwrap()
    }

    fn ctx(head_dim: i64) -> Vars {
        let mut v = Vars::new();
        v.insert("HEAD_DIM".into(), Value::Int(head_dim));
        v.insert("MAX_SMEM".into(), Value::Int(48 * 1024));
        v
    }

    fn space() -> Space {
        Space::new(
            vec![
                ints("BLOCK_M", &[16, 32, 64, 128]),
                ints("BLOCK_N", &[32, 64, 128]),
                ints("STAGES", &[1, 2, 3]),
                Knob {
                    name: "SWIZZLE".into(),
                    values: vec!["none".into(), "pad".into(), "xor".into()],
                },
            ],
            vec![
                // Deliberately listed before the value it reads.
                ("SMEM".into(), e("(BLOCK_M + STAGES * BLOCK_N) * ROW_BYTES")),
                (
                    "ROW_BYTES".into(),
                    e("HEAD_DIM * 2 + if(SWIZZLE == \"pad\", 16, 0)"),
                ),
            ],
            vec![
                ("smem".into(), e("SMEM <= MAX_SMEM")),
                ("tile".into(), e("BLOCK_M <= BLOCK_N || STAGES == 1")),
            ],
            vec![ctx(64), ctx(128)],
        )
        .unwrap()
    }

    #[test]
    fn derived_values_are_ordered_by_dependency() {
        let s = space();
        let names: Vec<&str> = s.derived().iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["ROW_BYTES", "SMEM"]);
        let g = Genome::parse("BLOCK_M=64,BLOCK_N=64,STAGES=2,SWIZZLE=pad").unwrap();
        let vars = s.vars(&g, 1).unwrap();
        assert_eq!(vars["ROW_BYTES"], Value::Int(272));
        assert_eq!(vars["SMEM"], Value::Int(192 * 272));
    }

    #[test]
    fn validity_holds_in_every_context() {
        let s = space();
        // 64 + 2*128 rows of 128 bytes fit in 48 KB at HEAD_DIM 64, not of 256 at 128.
        let g = Genome::parse("BLOCK_M=64,BLOCK_N=128,STAGES=2,SWIZZLE=none").unwrap();
        let r = s.rejection(&g).unwrap();
        assert_eq!(
            (r.constraint.as_str(), r.context, r.error),
            ("smem", 1, None)
        );
        let g = Genome::parse("BLOCK_M=16,BLOCK_N=32,STAGES=2,SWIZZLE=xor").unwrap();
        assert!(s.is_valid(&g));
    }

    #[test]
    fn enumeration_matches_brute_force_and_stats() {
        let s = space();
        assert_eq!(s.raw_size(), 4 * 3 * 3 * 3);
        let valid: Vec<Genome> = s.iter_valid().collect();
        let brute = (0..s.raw_size())
            .map(|i| s.genome_at(i))
            .filter(|g| s.rejection(g).is_none())
            .count();
        assert_eq!(valid.len(), brute);
        assert!(!valid.is_empty() && valid.len() < 108);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let stats = s.stats(EXACT_STATS_LIMIT, 0, &mut rng);
        assert!(stats.exact);
        assert_eq!(stats.valid as usize, valid.len());
        assert_eq!(stats.eval_errors, 0);
        assert!(stats.rejected_by.iter().all(|(_, n)| *n > 0));
        // Index and genome are inverse.
        for (i, g) in (0..s.raw_size()).map(|i| (i, s.genome_at(i))) {
            assert_eq!(s.index_of(&g), Some(i));
        }
    }

    #[test]
    fn genomes_whose_values_cannot_be_computed_are_not_counted_valid() {
        // WARPS = 0 divides by zero in a derived value: such genomes are errors, not
        // valid genomes (the count must equal what enumeration yields).
        let s = Space::new(
            vec![ints("BLOCK_M", &[32, 64]), ints("WARPS", &[0, 1, 2])],
            vec![("WARP_M".into(), e("BLOCK_M / WARPS"))],
            vec![("tile".into(), e("WARP_M >= 32"))],
            vec![ctx(64)],
        )
        .unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let stats = s.stats(EXACT_STATS_LIMIT, 0, &mut rng);
        assert_eq!(stats.eval_errors, 2);
        assert_eq!(stats.valid as usize, s.iter_valid().count());
        assert_eq!(stats.valid, 3);
    }

    #[test]
    fn estimated_stats_on_large_spaces() {
        let s = space();
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let est = s.stats(10, 20_000, &mut rng);
        assert!(!est.exact);
        let exact = s.stats(EXACT_STATS_LIMIT, 0, &mut rng).valid as f64;
        let ratio = est.estimated_valid() as f64 / exact;
        assert!((0.9..1.1).contains(&ratio), "estimate off: {ratio}");
    }

    #[test]
    fn genome_checks_name_the_problem() {
        let s = space();
        let g = Genome::parse("BLOCK_M=64,BLOCK_N=64,STAGES=2").unwrap();
        assert_eq!(
            s.check_genome(&g),
            Err(SpaceError::MissingKnobs(vec!["SWIZZLE".into()]))
        );
        let g = Genome::parse("BLOCK_M=65,BLOCK_N=64,STAGES=2,SWIZZLE=xor").unwrap();
        assert!(matches!(
            s.check_genome(&g),
            Err(SpaceError::ValueNotAllowed { .. })
        ));
        let g = Genome::parse("BLOCK_Q=64").unwrap();
        assert!(matches!(
            s.check_genome(&g),
            Err(SpaceError::UnknownKnob(..))
        ));
    }

    #[test]
    fn defaults_complete_genomes_that_predate_a_knob() {
        let s = space()
            .with_defaults([("SWIZZLE".to_string(), Value::from("none"))])
            .unwrap();
        let old = Genome::parse("BLOCK_M=64,BLOCK_N=64,STAGES=2").unwrap();
        let full = Genome::parse("BLOCK_M=64,BLOCK_N=64,STAGES=2,SWIZZLE=none").unwrap();
        // Completion writes the default out: the completed genome is the genome.
        assert_eq!(s.complete(&old), Ok(full.clone()));
        assert_eq!(s.complete(&old).unwrap().hash(), full.hash());
        assert_eq!(s.complete(&full), Ok(full.clone()));
        assert_eq!(s.vars(&old, 0), s.vars(&full, 0));
        // A genome that names the knob keeps its value; check_genome wants it complete.
        let xor = Genome::parse("BLOCK_M=64,BLOCK_N=64,STAGES=2,SWIZZLE=xor").unwrap();
        assert_eq!(s.complete(&xor), Ok(xor));
        assert!(matches!(
            s.check_genome(&old),
            Err(SpaceError::MissingKnobs(_))
        ));
        // A knob without a default is still missing.
        let g = Genome::parse("BLOCK_M=64,BLOCK_N=64,SWIZZLE=xor").unwrap();
        assert_eq!(
            s.complete(&g),
            Err(SpaceError::MissingKnobs(vec!["STAGES".into()]))
        );
        // A default must be a value of a knob.
        assert!(matches!(
            space().with_defaults([("SWIZZLE".to_string(), Value::from("diagonal"))]),
            Err(SpaceError::DefaultNotAllowed { .. })
        ));
        assert!(matches!(
            space().with_defaults([("SWIZLE".to_string(), Value::from("none"))]),
            Err(SpaceError::UnknownDefault(..))
        ));
    }

    #[test]
    fn bad_spaces_are_refused() {
        let err = Space::new(
            vec![ints("A", &[1])],
            vec![],
            vec![("c".into(), e("A <= LIMTI"))],
            vec![{
                let mut v = Vars::new();
                v.insert("LIMIT".into(), Value::Int(1));
                v
            }],
        )
        .unwrap_err();
        assert!(err.to_string().contains("did you mean `LIMIT`"), "{err}");
        let cycle = Space::new(
            vec![ints("A", &[1])],
            vec![("X".into(), e("Y + 1")), ("Y".into(), e("X + A"))],
            vec![],
            vec![],
        );
        assert!(matches!(cycle, Err(SpaceError::Cycle(_))));
        let mixed = Space::new(
            vec![Knob {
                name: "A".into(),
                values: vec![Value::Int(1), "x".into()],
            }],
            vec![],
            vec![],
            vec![],
        );
        assert!(matches!(mixed, Err(SpaceError::MixedKinds(..))));
        let dup = Space::new(vec![ints("A", &[1, 1])], vec![], vec![], vec![]);
        assert!(matches!(dup, Err(SpaceError::DuplicateValue(..))));
    }

    #[test]
    fn covering_set_uses_every_value() {
        let s = space();
        let (cover, unused) = s.covering_set();
        assert!(unused.is_empty(), "{unused:?}");
        assert!(cover.iter().all(|g| s.is_valid(g)));
        for k in s.knobs() {
            for v in &k.values {
                assert!(
                    cover.iter().any(|g| g.get(&k.name) == Some(v)),
                    "{} = {v} not covered",
                    k.name
                );
            }
        }
        // At least 4 (BLOCK_M has 4 values); greedy may take a few more, far fewer than all.
        assert!((4..=6).contains(&cover.len()), "cover of {}", cover.len());
        assert_eq!(cover, s.covering_set().0, "deterministic");
    }

    #[test]
    fn pairwise_set_combines_every_combinable_pair() {
        let s = space();
        let (set, impossible) = s.pairwise_set();
        assert!(set.iter().all(|g| s.is_valid(g)));
        let valid: Vec<Genome> = s.iter_valid().collect();
        let knobs = s.knobs();
        let mut combinable = 0;
        for (i, a) in knobs.iter().enumerate() {
            for b in &knobs[i + 1..] {
                for va in &a.values {
                    for vb in &b.values {
                        let has =
                            |g: &Genome| g.get(&a.name) == Some(va) && g.get(&b.name) == Some(vb);
                        if valid.iter().any(has) {
                            combinable += 1;
                            assert!(set.iter().any(has), "{}={va}, {}={vb}", a.name, b.name);
                        }
                    }
                }
            }
        }
        let total: usize = knobs
            .iter()
            .enumerate()
            .map(|(i, a)| {
                knobs[i + 1..]
                    .iter()
                    .map(|b| a.values.len() * b.values.len())
                    .sum::<usize>()
            })
            .sum();
        assert_eq!(impossible, total - combinable);
        assert!(set.len() < valid.len(), "{} of {}", set.len(), valid.len());
        assert!(set.len() >= s.covering_set().0.len());
        assert_eq!(set, s.pairwise_set().0, "deterministic");
    }

    #[test]
    fn sampling_is_uniform_over_valid_genomes() {
        let s = space();
        let valid: Vec<Genome> = s.iter_valid().collect();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let draws = 200 * valid.len();
        let mut counts: BTreeMap<Genome, usize> = BTreeMap::new();
        for _ in 0..draws {
            *counts.entry(s.sample(&mut rng).unwrap()).or_default() += 1;
        }
        assert_eq!(counts.len(), valid.len(), "every valid genome is drawn");
        // Chi-square with k-1 degrees of freedom; 2x the dof is far in the tail.
        let expected = draws as f64 / valid.len() as f64;
        let chi2: f64 = counts
            .values()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        assert!(
            chi2 < 2.0 * valid.len() as f64,
            "chi2 {chi2} for {} cells",
            valid.len()
        );
    }

    #[test]
    fn sampling_an_almost_empty_space_falls_back_to_enumeration() {
        // One valid genome in 10^6: rejection sampling alone would usually fail.
        let s = Space::new(
            (0..6)
                .map(|i| ints(&format!("K{i}"), &(0..10).collect::<Vec<_>>()))
                .collect(),
            vec![],
            vec![("one".into(), e("K0 + K1 + K2 + K3 + K4 + K5 == 54"))],
            vec![],
        )
        .unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let g = s.sample(&mut rng).unwrap();
        assert_eq!(g.canonical(), "K0=9,K1=9,K2=9,K3=9,K4=9,K5=9");
        let none = Space::new(
            vec![ints("A", &[1, 2])],
            vec![],
            vec![("never".into(), e("A > 5"))],
            vec![],
        )
        .unwrap();
        assert_eq!(none.sample(&mut rng), None);
    }

    #[test]
    fn ordinal_knobs_valid_indices_and_reversed_values() {
        let space = space()
            .with_ordinal(["BLOCK_M".to_string(), "STAGES".to_string()])
            .unwrap();
        assert!(space.is_ordinal("BLOCK_M") && !space.is_ordinal("SWIZZLE"));
        assert_eq!(
            space
                .clone()
                .with_ordinal(["BLOCK".to_string()])
                .unwrap_err(),
            SpaceError::UnknownOrdinal(
                "BLOCK".into(),
                space.knobs().iter().map(|k| k.name.clone()).collect()
            )
        );
        let valid: Vec<Genome> = space.iter_valid().collect();
        let indexed: Vec<Genome> = space
            .valid_indices()
            .iter()
            .map(|&i| space.genome_at(i))
            .collect();
        assert_eq!(indexed, valid);

        let reversed = space.with_reversed_values();
        assert_eq!(reversed.ordinal(), space.ordinal());
        assert_eq!(
            reversed.knob("BLOCK_M").unwrap().values,
            [128, 64, 32, 16].map(Value::Int)
        );
        let mut back: Vec<Genome> = reversed.iter_valid().collect();
        back.sort_by_key(|g| g.canonical());
        let mut forward = valid;
        forward.sort_by_key(|g| g.canonical());
        assert_eq!(back, forward, "the same genomes, another order");
        assert_ne!(reversed.genome_at(0), space.genome_at(0));
    }
}
