//! Completing a generation and proposing the next: when no candidate of the run is
//! pending (or, with an overlap, only the last few of the generation are still being
//! evaluated), the history of every stored result gives the elites, the insights and the
//! patience count; the strategy proposes from the seed and that history alone; and one
//! compare-and-set transaction stores it all. Any host computes the same proposals from
//! the same history, and one wins. Results that arrive after an overlapping advance join
//! the history the next advance reads; the run's last advance waits for every result.

use std::time::Instant;

use evo_core::Genome;
use evo_search::{History, Insights};
use evo_store::{
    Advance, Candidate, EliteEntry, Generation, GenerationRow, NewCandidate, Origin, RunStatus,
    SearchState,
};

use crate::error::{refused, Result, ResultExt};
use crate::host::Tally;
use crate::scoring::outcome;
use crate::{Progress, Run};

/// What one attempt to advance found.
pub(crate) enum Step {
    /// The run is finished (by any host).
    RunFinished,
    /// Candidates are pending: other hosts hold them; their results, or their expired
    /// leases, come soon.
    Pending,
    /// Another host advanced first; its proposals are in the queue.
    Lost,
    /// This host advanced; `Some(reason)` when it also finished the run.
    Advanced(Option<&'static str>),
}

/// A stored candidate's genome as a genome of `space`: its text parsed and completed with
/// the family's `[defaults]` ([`evo_core::Space::complete`]; a genome stored before a knob
/// existed). One the space does not accept (the family changed otherwise) stays as stored.
pub(crate) fn stored_genome(c: &Candidate, space: &evo_core::Space) -> Result<Genome> {
    let genome =
        Genome::parse(&c.genome).context(|| format!("the genome of candidate {}", c.id))?;
    Ok(space.complete(&genome).unwrap_or(genome))
}

/// The search history of the stored candidates, their genomes completed
/// ([`stored_genome`]): a genome stored before a knob existed is the same genome as its
/// completion, so a search does not propose it again.
pub(crate) fn history_of(candidates: &[Candidate], space: &evo_core::Space) -> Result<History> {
    let mut history = History::new();
    for c in candidates {
        let genome = stored_genome(c, space)?;
        history.insert(genome, c.generation, outcome(c));
    }
    Ok(history)
}

/// The stored hash of each stored candidate whose completed genome ([`stored_genome`])
/// hashes otherwise (a genome stored before a knob existed), by the completed hash: a
/// proposal's parents name the rows as stored, so `evo lineage` finds them.
fn stored_hashes(
    candidates: &[Candidate],
    space: &evo_core::Space,
) -> std::collections::BTreeMap<String, String> {
    candidates
        .iter()
        .filter_map(|c| {
            let h = stored_genome(c, space).ok()?.hash().0;
            (h != c.hash).then(|| (h, c.hash.clone()))
        })
        .collect()
}

/// This invocation's clock and counters, for the state an advance stores.
pub(crate) struct Invocation<'a> {
    pub started: Instant,
    pub tally: &'a mut Tally,
}

impl Run {
    /// The state every advance starts from.
    fn state_base(&self) -> SearchState {
        SearchState {
            config_path: Some(self.context.config.path.display().to_string()),
            strategy: self.kind.name().into(),
            params: self.params.clone(),
            ..SearchState::default()
        }
    }

    /// How many of a generation's genomes may still be in evaluation when the next is
    /// proposed: the backend's (`[search] overlap` per GPU), at most `limit` (what this
    /// host evaluates at once) and half the population. A quarter left the GPU idle at
    /// every generation boundary of the Hopper config (population 8): two genomes in
    /// flight were less GPU work than the next generation's first compile.
    pub(crate) fn overlap(&self, limit: usize) -> usize {
        let search = &self.context.config.search;
        self.backend
            .overlap(search.overlap)
            .min(limit)
            .min(search.params.population / 2)
    }

    /// Completes the current generation (when its proposals are all evaluated, or all
    /// but at most `overlap`, from [`Run::overlap`], that are being evaluated) and
    /// proposes the next, unless the run is finished, pending or another host is faster.
    /// An advance that would finish the run waits for every result.
    pub(crate) async fn step(
        &self,
        inv: Invocation<'_>,
        progress: &dyn Progress,
        overlap: usize,
    ) -> Result<Step> {
        let store = &self.store;
        let tally = inv.tally;
        let run = tally
            .db(store.run_by_id(self.id))
            .await?
            .ok_or_else(|| refused!("run `{}` was deleted", self.name))?;
        if run.status == RunStatus::Finished {
            return Ok(Step::RunFinished);
        }
        let candidates = tally.db(store.candidates(self.id)).await?;
        let latest = tally.db(store.latest_generation(self.id)).await?;
        let current = latest.as_ref().map_or(0, |g| g.generation + 1);
        let out: Vec<&Candidate> = candidates.iter().filter(|c| c.status.is_none()).collect();
        let pending = out.len();
        let overlapped = pending <= overlap
            && out
                .iter()
                .all(|c| c.generation == current && c.lease_owner.is_some());
        if pending > 0 && !overlapped {
            return Ok(Step::Pending);
        }
        let history = history_of(&candidates, &self.context.space)?;
        let proposed = candidates
            .iter()
            .any(|c| c.generation == current && c.origin != Origin::Baseline);
        let mut state = self.state_base();
        let mut finish = None;
        let (completed, next) = if proposed {
            let row = self.complete(
                current,
                &history,
                latest.as_ref(),
                &mut state,
                inv.started,
                tally,
            )?;
            if self
                .settings
                .max_generations
                .is_some_and(|n| current + 1 >= n)
            {
                finish = Some("generation budget spent");
            } else if self.settings.patience > 0
                && state.stale_generations >= Some(u64::from(self.settings.patience))
            {
                finish = Some("no improvement within the patience");
            }
            (Some(row), current + 1)
        } else {
            if self.settings.max_generations.is_some_and(|n| current >= n) {
                finish = Some("generation budget spent");
            }
            // The newest completed generation, if any.
            state.generation = current.checked_sub(1);
            (None, current)
        };
        if pending > 0 && (finish.is_some() || completed.is_none()) {
            // The run's end (or its first generation) waits for every result.
            return Ok(Step::Pending);
        }
        let proposals = match finish {
            Some(_) => Vec::new(),
            None => self
                .strategy
                .propose(&self.context.space, &history, next, &self.seeds),
        };
        if finish.is_none() && proposals.is_empty() {
            if pending > 0 {
                // Exhausted given what is known: the results still out decide.
                return Ok(Step::Pending);
            }
            finish = Some("the space is exhausted");
        }
        let stored = stored_hashes(&candidates, &self.context.space);
        let rows: Vec<NewCandidate> = proposals
            .iter()
            .map(|p| {
                NewCandidate::new(p.genome.clone(), next, origin(p.origin)).with_parents(
                    p.parents
                        .iter()
                        .map(|h| stored.get(&h.0).unwrap_or(&h.0).clone()),
                )
            })
            .collect();
        let won = tally
            .db(store.advance_generation(
                self.id,
                &Advance {
                    expected_latest: latest.as_ref().map(|g| g.generation),
                    completed: completed.as_ref(),
                    next_generation: next,
                    proposals: &rows,
                    search_state: &evo_store::to_stored_json(&state),
                    finish: finish.is_some(),
                    overlap: overlap as u64,
                },
            ))
            .await?;
        if !won {
            return Ok(Step::Lost);
        }
        tally.advanced += 1;
        if let Some(row) = &completed {
            progress.generation(row.generation, row.evaluated, row.best_fitness);
        }
        Ok(Step::Advanced(finish))
    }

    /// The row of completed generation `current`: its elites, insights and best fitness,
    /// and in `state` the patience count and this invocation's counters.
    fn complete(
        &self,
        current: u32,
        history: &History,
        latest: Option<&Generation>,
        state: &mut SearchState,
        started: Instant,
        tally: &Tally,
    ) -> Result<GenerationRow> {
        let elites = self.params.elites;
        let insights = Insights::compute(&self.context.space, history, elites);
        let elite_rows: Vec<EliteEntry> = history
            .elites(elites)
            .iter()
            .map(|r| EliteEntry {
                genome: r.genome.canonical(),
                hash: r.hash.0.clone(),
                fitness: r.fitness(),
            })
            .collect();
        let best = history.best().and_then(|r| r.fitness());
        let previous_best = latest.and_then(|g| g.best_fitness);
        let stale = if best > previous_best {
            0
        } else {
            let previous = match latest {
                Some(g) => g.search_state()?.stale_generations,
                None => None,
            };
            previous.unwrap_or(0) + 1
        };
        let wall_ms = started.elapsed().as_secs_f64() * 1e3;
        state.generation = Some(current);
        state.stale_generations = Some(stale);
        state.advanced_by = Some(self.host.id.clone());
        state.evaluated_this_invocation = Some(tally.evaluated);
        state.gpu_busy_fraction = Some(if self.gpus == 0 {
            0.0
        } else {
            tally.gpu_ms / (wall_ms * self.gpus as f64)
        });
        state.evaluations_per_hour = Some(tally.evaluated as f64 / (wall_ms / 3.6e6).max(1e-9));
        Ok(GenerationRow {
            run_id: self.id,
            generation: current,
            elites: evo_store::to_stored_json(&elite_rows),
            insights: evo_store::to_stored_json(&insights),
            state: evo_store::to_stored_json(state),
            best_fitness: best,
            evaluated: history.evaluated().count() as u64,
        })
    }
}

fn origin(o: evo_search::Origin) -> Origin {
    match o {
        evo_search::Origin::Seed => Origin::Seed,
        evo_search::Origin::Random => Origin::Random,
        evo_search::Origin::Mutation => Origin::Mutation,
        evo_search::Origin::Crossover => Origin::Crossover,
        evo_search::Origin::Exhaustive => Origin::Exhaustive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use evo_core::{Knob, Space, Value};
    use evo_store::{CandidateId, Origin, RunId};

    fn stored(id: i64, genome: &str) -> Candidate {
        let g = Genome::parse(genome).unwrap();
        Candidate {
            id: CandidateId(id),
            run_id: RunId(1),
            genome: g.canonical(),
            hash: g.hash().0,
            generation: 0,
            parents: Vec::new(),
            origin: Origin::Random,
            status: None,
            gate: None,
            detail: None,
            resources: None,
            fitness: None,
            source_key: None,
            created_at: String::new(),
            evaluated_at: None,
            eval_ms: None,
            evaluated_by: None,
            claims: 0,
            lease_owner: None,
        }
    }

    /// A run stored before knob B existed resumes: its genomes are their completions in
    /// the history (so the search does not propose them again), and a proposal's parents
    /// name the rows by their stored hashes.
    #[test]
    fn stored_genomes_that_predate_a_knob_are_their_completions() {
        let knob = |name: &str, values: &[i64]| Knob {
            name: name.into(),
            values: values.iter().map(|v| Value::Int(*v)).collect(),
        };
        let space = Space::new(
            vec![knob("A", &[1, 2]), knob("B", &[0, 1])],
            vec![],
            vec![],
            vec![],
        )
        .unwrap()
        .with_defaults([("B".to_string(), Value::Int(0))])
        .unwrap();
        let old = stored(1, "A=1");
        let new = stored(2, "A=2,B=1");
        let candidates = [old.clone(), new.clone()];
        let history = history_of(&candidates, &space).unwrap();
        let completed = Genome::parse("A=1,B=0").unwrap();
        assert!(history.contains(&completed.hash()));
        assert!(history.contains(&Genome::parse(&new.genome).unwrap().hash()));
        assert_eq!(history.len(), 2);
        assert_eq!(stored_genome(&old, &space).unwrap(), completed);
        let hashes = stored_hashes(&candidates, &space);
        assert_eq!(hashes.len(), 1);
        assert_eq!(hashes.get(&completed.hash().0), Some(&old.hash));
    }
}
