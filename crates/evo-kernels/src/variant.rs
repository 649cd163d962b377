//! The specializations a config asks for, and the compile contexts they give.
//!
//! Each shape of a config is split into its compile-time part (the problem's
//! specialization variables, e.g. DTYPE, HEAD_DIM, CAUSAL) and its run-time part. Each
//! distinct compile-time part is one specialization; a genome is compiled once per
//! specialization and must be valid in all of them.

use evo_core::{Target, Vars};

use crate::family::Family;
use crate::problem::Problem;

/// One compile-time assignment of a problem's specialization variables.
pub type Specialization = Vars;

/// The specializations and completed shapes of a config, for one target.
#[derive(Clone, Debug)]
pub struct Specializations {
    pub target: Target,
    pub specs: Vec<Specialization>,
    /// Every shape, completed with defaults, with the index of its specialization.
    pub shapes: Vec<(usize, Vars)>,
}

/// A genome rendered for one specialization.
#[derive(Clone, Debug)]
pub struct RenderedVariant {
    pub spec: usize,
    pub source: String,
}

impl Specializations {
    pub fn new(
        problem: &dyn Problem,
        target: Target,
        shapes: &[Vars],
    ) -> Result<Specializations, String> {
        let mut specs: Vec<Specialization> = Vec::new();
        let mut out = Vec::new();
        for (i, shape) in shapes.iter().enumerate() {
            let full = problem
                .complete_shape(shape)
                .map_err(|e| format!("shape #{}: {e}", i + 1))?;
            let spec: Specialization = problem
                .spec_vars()
                .iter()
                .map(|d| (d.name.to_string(), full[d.name].clone()))
                .collect();
            let idx = match specs.iter().position(|s| *s == spec) {
                Some(idx) => idx,
                None => {
                    specs.push(spec);
                    specs.len() - 1
                }
            };
            out.push((idx, full));
        }
        Ok(Specializations {
            target,
            specs,
            shapes: out,
        })
    }

    /// One expression context per specialization: its variables plus the target's.
    pub fn contexts(&self) -> Vec<Vars> {
        self.specs
            .iter()
            .map(|s| {
                let mut v = self.target.vars();
                v.extend(s.iter().map(|(k, v)| (k.clone(), v.clone())));
                v
            })
            .collect()
    }

    /// Refuses a target older than the family supports.
    pub fn check_family(&self, family: &Family) -> Result<(), String> {
        if self.target.cc < family.min_arch {
            return Err(format!(
                "family {} needs sm_{} or newer, the target is {}",
                family.name, family.min_arch, self.target.arch
            ));
        }
        Ok(())
    }
}
