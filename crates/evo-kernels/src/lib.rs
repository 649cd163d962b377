//! evo-kernels: what evo searches over.
//!
//! * [`problem`]: problems in Rust — the kernel ABI, which variables are compile-time
//!   (the specialization: dtype, head dim, ...) and which are run-time (the shape), FLOP
//!   and minimum-byte counts. A problem is the fixed contract every family of it meets.
//! * [`family`]: declarative families — `templates/<problem>/<family>.toml` (knobs,
//!   derived values, constraints, launch rules) plus a Tera template — loaded and
//!   validated so that mistakes are reported with the file and line at load time, not as
//!   a broken kernel hours into a search.
//! * [`variant`]: the specializations a config asks for, and rendering a genome into
//!   CUDA source with its launch geometry per shape.

pub mod family;
pub mod fp8;
pub mod handwritten;
pub mod harness;
pub mod problem;
pub mod problems;
pub mod variant;

pub use family::{
    arg_list, bind_abi, resolve_launch_args, resolve_scratch, swizzle_bytes, ArgRef, Family,
    FamilyError, ScratchRule,
};
pub use problem::{problem, problems, Problem, VarDecl, VarKind};
pub use variant::{RenderedVariant, Specialization, Specializations};
