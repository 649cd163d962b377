//! The knobs of the search itself.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Settings shared by every strategy (each reads the ones it needs): the `[search]`
/// parameters of a config, defined once in evo-core.
pub use evo_core::config::SearchParams;

/// Which strategy a run uses (the config's `strategy = "surrogate"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StrategyKind {
    /// Surrogate-assisted evolution ([`crate::Surrogate`]): the default, measured best.
    #[default]
    Surrogate,
    /// Elite-guided evolution without a model ([`crate::Evolution`]).
    Evolution,
    Random,
    Exhaustive,
}

impl StrategyKind {
    pub const ALL: [StrategyKind; 4] = [
        StrategyKind::Surrogate,
        StrategyKind::Evolution,
        StrategyKind::Random,
        StrategyKind::Exhaustive,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StrategyKind::Evolution => "evolution",
            StrategyKind::Random => "random",
            StrategyKind::Exhaustive => "exhaustive",
            StrategyKind::Surrogate => "surrogate",
        }
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for StrategyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StrategyKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                format!("unknown strategy `{s}`; known: surrogate, evolution, random, exhaustive")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_rounds_and_gives_mutation_the_rest() {
        let p = SearchParams::default();
        assert_eq!(p.split(32), (19, 8, 5));
        assert_eq!(p.split(0), (0, 0, 0));
        assert_eq!(p.split(1), (1, 0, 0));
        let only_random = SearchParams {
            mutation_share: 0.0,
            crossover_share: -1.0,
            exploration_share: 2.0,
            ..p.clone()
        };
        assert_eq!(only_random.split(7), (0, 0, 7));
        let nothing = SearchParams {
            mutation_share: 0.0,
            crossover_share: 0.0,
            exploration_share: f64::NAN,
            ..p
        };
        assert_eq!(nothing.split(5), (5, 0, 0));
    }

    #[test]
    fn params_and_kind_deserialize_from_partial_input() {
        let p: SearchParams = serde_json::from_str(r#"{"population": 8, "seed": 7}"#).unwrap();
        assert_eq!((p.population, p.seed, p.elites), (8, 7, 8));
        assert!(serde_json::from_str::<SearchParams>(r#"{"popluation": 8}"#).is_err());
        let k: StrategyKind = serde_json::from_str(r#""exhaustive""#).unwrap();
        assert_eq!(k, StrategyKind::Exhaustive);
        assert_eq!("random".parse::<StrategyKind>(), Ok(StrategyKind::Random));
        assert!("genetic".parse::<StrategyKind>().is_err());
    }
}
