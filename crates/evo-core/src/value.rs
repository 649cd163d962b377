//! Typed values shared by knobs, specializations, shapes and derived quantities.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A knob, specialization or shape value. Knob values are always one of these three;
/// expressions may also produce them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    Bool(bool),
    Int(i64),
    Str(String),
}

/// Named values, sorted by name: a scope for expressions and a context for templates.
pub type Vars = BTreeMap<String, Value>;

impl Value {
    /// Parses the canonical text form: `true`/`false`, a decimal integer, else a string.
    /// The inverse of `Display`, provided strings never look like integers or booleans
    /// (spaces enforce that for knob values).
    pub fn parse_canonical(text: &str) -> Value {
        match text {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => match text.parse::<i64>() {
                Ok(i) if i.to_string() == text => Value::Int(i),
                _ => Value::Str(text.to_string()),
            },
        }
    }

    /// Whether `Display` followed by [`Value::parse_canonical`] gives this value back
    /// and the text can sit inside a canonical genome (`K=V,K=V`).
    pub fn is_canonical_safe(&self) -> bool {
        match self {
            Value::Bool(_) | Value::Int(_) => true,
            Value::Str(s) => {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
                    && Value::parse_canonical(s) == *self
            }
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The kind of value, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Bool(_) => "boolean",
            Value::Int(_) => "integer",
            Value::Str(_) => "string",
        }
    }

    /// Converts a TOML value (from a config or family file).
    pub fn from_toml(v: &toml::Value) -> Option<Value> {
        match v {
            toml::Value::Boolean(b) => Some(Value::Bool(*b)),
            toml::Value::Integer(i) => Some(Value::Int(*i)),
            toml::Value::String(s) => Some(Value::Str(s.clone())),
            _ => None,
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Str(s) => serde_json::Value::String(s.clone()),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Str(s) => f.write_str(s),
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Str(v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_text_round_trips() {
        for v in [
            Value::Int(-3),
            Value::Int(128),
            Value::Bool(true),
            Value::Str("xor".into()),
        ] {
            assert!(v.is_canonical_safe());
            assert_eq!(Value::parse_canonical(&v.to_string()), v);
        }
    }

    #[test]
    fn strings_that_look_like_other_types_are_not_canonical_safe() {
        for s in ["12", "true", "a,b", "a=b", ""] {
            assert!(!Value::Str(s.into()).is_canonical_safe(), "{s}");
        }
    }
}
