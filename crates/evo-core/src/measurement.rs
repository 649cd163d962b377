//! The per-shape measurement record: what the timing and correctness gates found for one
//! variant on one shape. One type from the search through the database to the replay
//! landscapes (`evo-eval`'s worker protocol keeps its own, richer per-trial report; the
//! inspect commands and the artifact manifest print views of this one).

use serde::{Deserialize, Serialize};

use crate::{Genome, Vars};

/// One shape's times, throughput and errors of one variant.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShapeMeasurement {
    /// The complete shape; written as its canonical text (see [`shape_key`]).
    #[serde(with = "canonical_shape")]
    pub shape: Vars,
    pub median_us: Option<f64>,
    pub p20_us: Option<f64>,
    pub p80_us: Option<f64>,
    /// Every timed sample, µs (empty where not kept, as in landscapes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<f64>,
    pub tflops: Option<f64>,
    /// Of the device's dense peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_fraction: Option<f64>,
    pub max_abs_err: Option<f64>,
    pub rel_l2: Option<f64>,
}

impl ShapeMeasurement {
    /// The canonical text of the shape.
    pub fn key(&self) -> String {
        shape_key(&self.shape)
    }
}

/// The canonical text of a shape: `NAME=value,...` sorted by name, like a genome. Baselines
/// and measurements are matched by it.
pub fn shape_key(shape: &Vars) -> String {
    Genome::from_vars(shape.clone()).canonical()
}

/// The median time on the shape whose key is `key`, if one of `measurements` has it.
pub fn median_on<'a>(
    measurements: impl IntoIterator<Item = &'a ShapeMeasurement>,
    key: &str,
) -> Option<f64> {
    measurements
        .into_iter()
        .find(|m| m.key() == key)
        .and_then(|m| m.median_us)
}

mod canonical_shape {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::{Genome, Vars};

    pub fn serialize<S: Serializer>(shape: &Vars, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::shape_key(shape))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vars, D::Error> {
        let text = String::deserialize(d)?;
        Genome::parse(&text)
            .map(|g| g.as_vars().clone())
            .map_err(|e| serde::de::Error::custom(format!("shape `{text}`: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Value;

    #[test]
    fn written_with_the_shape_as_text_and_read_back() {
        let mut shape = Vars::new();
        shape.insert("SEQ".into(), Value::Int(512));
        shape.insert("CAUSAL".into(), Value::Bool(false));
        shape.insert("DTYPE".into(), Value::Str("f16".into()));
        let m = ShapeMeasurement {
            shape,
            median_us: Some(9.5),
            max_abs_err: Some(1e-3),
            ..Default::default()
        };
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(
            text,
            r#"{"shape":"CAUSAL=false,DTYPE=f16,SEQ=512","median_us":9.5,"p20_us":null,"p80_us":null,"tflops":null,"max_abs_err":0.001,"rel_l2":null}"#
        );
        assert_eq!(serde_json::from_str::<ShapeMeasurement>(&text).unwrap(), m);
        assert_eq!(median_on([&m], "CAUSAL=false,DTYPE=f16,SEQ=512"), Some(9.5));
        assert_eq!(median_on([&m], "SEQ=512"), None);
    }
}
