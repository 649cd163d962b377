//! A genome is one assignment of a value to every knob of a family.
//!
//! Its canonical form sorts the knobs by name and joins `NAME=value` with commas, e.g.
//! `BLOCK_M=64,STAGES=2,SWIZZLE=xor`. The [`GenomeHash`] is the first 16 hex digits of
//! the SHA-256 of that text: the same on every run and every platform, so it can name a
//! genome in a database, a cache or an artifact.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::value::{Value, Vars};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GenomeError {
    #[error("genome entry `{0}` is not of the form NAME=value")]
    BadEntry(String),
    #[error("knob `{0}` is given twice")]
    Duplicate(String),
    #[error(
        "knob name `{0}` is not an identifier (letters, digits, `_`, not starting with a digit)"
    )]
    BadName(String),
}

/// A knob assignment, kept sorted by knob name.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Genome(BTreeMap<String, Value>);

/// Stable 64-bit identity of a genome's canonical form, as 16 lowercase hex digits.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GenomeHash(pub String);

impl fmt::Display for GenomeHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `name` can be a knob or variable name (also a valid C identifier and
/// evalexpr identifier).
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Genome {
    pub fn new() -> Self {
        Genome(BTreeMap::new())
    }

    pub fn from_vars(vars: Vars) -> Self {
        Genome(vars)
    }

    pub fn get(&self, knob: &str) -> Option<&Value> {
        self.0.get(knob)
    }

    pub fn set(&mut self, knob: impl Into<String>, value: Value) {
        self.0.insert(knob.into(), value);
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_vars(&self) -> &Vars {
        &self.0
    }

    /// `NAME=value,NAME=value`, sorted by name.
    pub fn canonical(&self) -> String {
        let mut out = String::new();
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(k);
            out.push('=');
            out.push_str(&v.to_string());
        }
        out
    }

    pub fn hash(&self) -> GenomeHash {
        let digest = Sha256::digest(self.canonical().as_bytes());
        GenomeHash(hex::encode(&digest[..8]))
    }

    /// Parses `NAME=value` entries separated by commas (whitespace around entries is
    /// ignored; order does not matter). Values are typed as in
    /// [`Value::parse_canonical`]; [`crate::Space::complete`] then fills in knob defaults
    /// and checks them against the knobs.
    pub fn parse(text: &str) -> Result<Genome, GenomeError> {
        let mut genome = Genome::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, value) = entry
                .split_once('=')
                .ok_or_else(|| GenomeError::BadEntry(entry.to_string()))?;
            let (name, value) = (name.trim(), value.trim());
            if !is_identifier(name) {
                return Err(GenomeError::BadName(name.to_string()));
            }
            if value.is_empty() {
                return Err(GenomeError::BadEntry(entry.to_string()));
            }
            if genome
                .0
                .insert(name.to_string(), Value::parse_canonical(value))
                .is_some()
            {
                return Err(GenomeError::Duplicate(name.to_string()));
            }
        }
        Ok(genome)
    }
}

impl fmt::Display for Genome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical())
    }
}

impl FromStr for Genome {
    type Err = GenomeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Genome::parse(s)
    }
}

impl FromIterator<(String, Value)> for Genome {
    fn from_iter<T: IntoIterator<Item = (String, Value)>>(iter: T) -> Self {
        Genome(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Genome {
        Genome::parse("STAGES=2, BLOCK_M=64,SWIZZLE=xor,Q_IN_REGS=true").unwrap()
    }

    #[test]
    fn canonical_form_is_sorted_and_typed() {
        let g = sample();
        assert_eq!(
            g.canonical(),
            "BLOCK_M=64,Q_IN_REGS=true,STAGES=2,SWIZZLE=xor"
        );
        assert_eq!(g.get("BLOCK_M"), Some(&Value::Int(64)));
        assert_eq!(g.get("Q_IN_REGS"), Some(&Value::Bool(true)));
        assert_eq!(g.get("SWIZZLE"), Some(&Value::Str("xor".into())));
    }

    /// The hash is part of evo's on-disk formats (database, cache, artifacts): it must
    /// never change across runs, versions or platforms. These values were computed once
    /// with `printf %s '<canonical>' | sha256sum | cut -c1-16`.
    #[test]
    fn hash_is_stable() {
        assert_eq!(sample().hash().0, "3faffb3e200ffd91");
        assert_eq!(Genome::new().hash().0, "e3b0c44298fc1c14");
    }

    #[test]
    fn bad_entries_are_rejected() {
        assert_eq!(
            Genome::parse("BLOCK_M"),
            Err(GenomeError::BadEntry("BLOCK_M".into()))
        );
        assert_eq!(
            Genome::parse("A=1,A=2"),
            Err(GenomeError::Duplicate("A".into()))
        );
        assert_eq!(
            Genome::parse("1A=2"),
            Err(GenomeError::BadName("1A".into()))
        );
        assert_eq!(Genome::parse("A="), Err(GenomeError::BadEntry("A=".into())));
    }
}
