//! evo-core: the vocabulary every other evo crate speaks.
//!
//! * [`Value`] and [`Vars`]: the typed values of knobs, specializations and shapes.
//! * [`Genome`]: one knob assignment, its canonical text form and its stable hash.
//! * [`Expr`]: derived values, constraints and launch geometry as expressions
//!   (evaluated by the `evalexpr` crate, with `ceil_div`, `min`, `max`, `if`, ...).
//! * [`Space`]: knobs, derived values and constraints bound to one or more compile
//!   contexts; lazy enumeration of valid genomes, uniform sampling, rejection statistics.
//! * [`LaunchRule`]: grid, block and dynamic shared memory of one kernel as expressions.
//! * [`Target`]: the GPU architecture a kernel is compiled for and its limits.
//! * [`config::SearchConfig`]: the user's search configuration file.
//! * [`fitness`]: speedup and regression arithmetic.
//! * [`ShapeMeasurement`]: one variant's times and errors on one shape.
//! * [`Status`] and [`Gate`]: the verdict vocabulary, from the evaluator to the database
//!   and every report.
//!
//! Nothing here touches a GPU, a compiler or a database, so it builds and tests anywhere.

pub mod config;
pub mod expr;
pub mod fitness;
pub mod genome;
pub mod launch;
pub mod measurement;
pub mod space;
pub mod status;
pub mod target;
pub mod value;

pub use expr::{Expr, ExprError};
pub use genome::{Genome, GenomeError, GenomeHash};
pub use launch::{LaunchDims, LaunchRule};
pub use measurement::{median_on, shape_key, ShapeMeasurement};
pub use space::{Knob, Rejection, Space, SpaceError, SpaceStats};
pub use status::{Gate, Status};
pub use target::Target;
pub use value::{Value, Vars};
