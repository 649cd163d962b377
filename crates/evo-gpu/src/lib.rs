//! evo-gpu: the only place (with evo-eval) that talks to CUDA.
//!
//! * [`locate`]: finds NVRTC, the CUDA headers and cuobjdump (`EVO_CUDA_HOME`,
//!   `CUDA_HOME`, `/usr/local/cuda`, or the project-local `.cuda/` wheel install) and
//!   loads NVRTC before cudarc would look for it, so a missing library is an error that
//!   says how to install it instead of a panic.
//! * [`nvrtc`]: compiles CUDA source to PTX and CUBIN for one architecture, keeping
//!   the log on success and failure.
//! * [`cache`]: a content-addressed on-disk cache of compile results keyed by source,
//!   options, architecture and NVRTC version; [`Compiler`] ties it together and compiles
//!   many sources in parallel.
//! * [`resources`]: registers, shared memory, stack and spills per kernel from the
//!   ptxas report and the CUBIN's ELF, and tensor-core instruction counts from SASS.
//! * [`device`]: the driver, its version and the GPUs it sees.

pub mod cache;
pub mod compiler;
pub mod device;
pub mod locate;
pub mod nvrtc;
pub mod resources;
pub mod runtime;
pub mod tensor_map;

pub use cache::CompileCache;
pub use compiler::{CompileRequest, Compiled, Compiler};
pub use locate::{CudaInstall, LocateError};
pub use resources::{KernelResources, SassCounts};
