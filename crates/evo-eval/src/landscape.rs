//! Recorded landscapes: the real measurements of many genomes of one family, exported
//! from a database (`evo export-landscape`) and answered back by the replay evaluator
//! (`evo search --evaluator replay:FILE`), so searches can be tested and compared on a
//! machine without a GPU. Everything a replayed result says comes from the file. A file is
//! JSON, or gzip-compressed JSON when its name ends in `.gz` (the large recorded ones).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

use evo_core::{Gate, ShapeMeasurement, Status};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub const FORMAT: &str = "evo-landscape-1";

/// The recorded outcome of one genome: its status and each shape's measurement (the
/// record the database keeps, written without the timing samples).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Point {
    pub status: Status,
    pub gate: Option<Gate>,
    pub detail: String,
    pub shapes: Vec<ShapeMeasurement>,
    /// Wall time the real evaluation took, in ms.
    pub eval_ms: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Landscape {
    pub format: String,
    pub problem: String,
    pub family: String,
    pub device: String,
    /// Where the points were measured (run names).
    pub source: String,
    /// Canonical genome → outcome.
    pub points: BTreeMap<String, Point>,
}

#[derive(Debug, thiserror::Error)]
pub enum LandscapeError {
    #[error("cannot read landscape {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("landscape {path} is not an evo landscape: {message}")]
    Parse { path: String, message: String },
    #[error("landscape {path} has format `{found}`; this evo reads `{FORMAT}`")]
    Format { path: String, found: String },
}

impl Landscape {
    /// Reads a landscape file: JSON, or gzip-compressed JSON when the name ends in `.gz`.
    pub fn load(path: &Path) -> Result<Landscape, LandscapeError> {
        Landscape::load_with_digest(path).map(|(l, _)| l)
    }

    /// [`Landscape::load`], and the SHA-256 (hex) of the JSON text read: what a replay run
    /// keeps to notice a landscape changed under it (the same for a file and its `.gz`).
    pub fn load_with_digest(path: &Path) -> Result<(Landscape, String), LandscapeError> {
        let p = path.display().to_string();
        let read = |source| LandscapeError::Read {
            path: p.clone(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read)?;
        let mut text = String::new();
        if is_gzip(path) {
            flate2::read::GzDecoder::new(file).read_to_string(&mut text)
        } else {
            std::io::BufReader::new(file).read_to_string(&mut text)
        }
        .map_err(read)?;
        let l: Landscape = serde_json::from_str(&text).map_err(|e| LandscapeError::Parse {
            path: p.clone(),
            message: e.to_string(),
        })?;
        if l.format != FORMAT {
            return Err(LandscapeError::Format {
                path: p,
                found: l.format,
            });
        }
        let digest = hex::encode(Sha256::digest(text.as_bytes()));
        Ok((l, digest))
    }

    /// Writes the landscape as pretty JSON (gzip-compressed when the name ends in `.gz`),
    /// through a temporary file renamed into place.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        let json = serde_json::to_vec_pretty(self).expect("serializes");
        if is_gzip(path) {
            let mut gz = flate2::write::GzEncoder::new(
                std::fs::File::create(&tmp)?,
                flate2::Compression::best(),
            );
            gz.write_all(&json)?;
            gz.finish()?;
        } else {
            std::fs::write(&tmp, json)?;
        }
        std::fs::rename(tmp, path)
    }

    pub fn get(&self, genome: &str) -> Option<&Point> {
        self.points.get(genome)
    }
}

fn is_gzip(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "gz")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_format_check() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Landscape {
            format: FORMAT.into(),
            problem: "gemm".into(),
            family: "gemm_mma".into(),
            device: "NVIDIA H200".into(),
            source: "run r1".into(),
            points: BTreeMap::new(),
        };
        l.points.insert(
            "A=1".into(),
            Point {
                status: Status::Evaluated,
                gate: None,
                detail: String::new(),
                shapes: vec![ShapeMeasurement {
                    shape: evo_core::Genome::parse("M=1").unwrap().as_vars().clone(),
                    median_us: Some(3.5),
                    max_abs_err: Some(1e-3),
                    rel_l2: Some(1e-4),
                    ..Default::default()
                }],
                eval_ms: Some(900.0),
            },
        );
        let path = dir.path().join("l.json");
        l.save(&path).unwrap();
        assert_eq!(Landscape::load(&path).unwrap(), l);
        let gz = dir.path().join("l.json.gz");
        l.save(&gz).unwrap();
        assert_eq!(
            &std::fs::read(&gz).unwrap()[..2],
            [0x1f, 0x8b],
            "gzip magic"
        );
        assert_eq!(Landscape::load(&gz).unwrap(), l);
        // The digest is the content's: a file and its gzip agree, an edit changes it.
        let digest = |p: &Path| Landscape::load_with_digest(p).unwrap().1;
        assert_eq!(digest(&path), digest(&gz));
        let before = digest(&path);
        l.points.get_mut("A=1").unwrap().shapes[0].median_us = Some(3.6);
        l.save(&path).unwrap();
        assert_ne!(digest(&path), before);
        l.format = "evo-landscape-99".into();
        l.save(&path).unwrap();
        assert!(matches!(
            Landscape::load(&path),
            Err(LandscapeError::Format { .. })
        ));
        std::fs::write(&path, "{").unwrap();
        assert!(matches!(
            Landscape::load(&path),
            Err(LandscapeError::Parse { .. })
        ));
    }
}
