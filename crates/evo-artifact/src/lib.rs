//! evo-artifact: the frozen artifact, and nothing else — what a program calls without
//! evo. Its one job is the API boundary between a searched run and its users:
//!
//! * [`export()`]: the best genome of a run (or one candidate; with `per_shape` the
//!   fastest correct genome of each shape over one run or several), through the
//!   sanitizer gate, recompiled for every specialization exactly as the search did
//!   (same template, options and architecture), written to a folder with its
//!   `manifest.json`; per shape, the entries where the run measured PyTorch's SDPA
//!   faster are marked for `evo_kernel.py` to defer to it. It returns the manifest and
//!   its notes; it prints nothing.
//! * [`manifest`]: the `evo-artifact-3` format (what was exported, from which runs, how
//!   to launch it, what it measured, the SHA-256 of every file).
//! * [`files`]: the fixed files (`evo_kernel.py`, `bench.py` with `sdpa_bench.py`,
//!   `example.cpp`) and the generated ones (`kernel.h`, `README.md`).
//! * [`verify`]: an artifact checked in steps — the hashes, each variant re-rendered
//!   from its genome, then (on a GPU) the gates — filling a [`verify::Report`].
//!
//! No command-line parsing and no terminal here: the caller prints the manifest, the
//! notes and the report (`evo export`, `evo verify`). The format is in `docs/artifact.md`.

mod error;
pub mod export;
pub mod files;
pub mod manifest;
pub mod verify;

pub use error::ArtifactError;
pub use export::{export, spec_tag, ExportOptions, Exported};
pub use manifest::{Manifest, MANIFEST, SCHEMA};
