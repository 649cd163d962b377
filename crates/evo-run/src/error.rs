//! What can go wrong opening, working on or reading a run.

use evo_core::config::ConfigError;
use evo_core::target::TargetError;
use evo_eval::landscape::LandscapeError;
use evo_gpu::nvrtc::NvrtcError;
use evo_kernels::FamilyError;
use evo_store::StoreError;

/// A CUDA component the work needs (the driver, a GPU) is missing; the message says what
/// to install. The CLI exits with code 3 on it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MissingComponent(pub String);

/// The command line is wrong whatever the run, its files or this machine: an option
/// missing, options that conflict, a value the option does not take. The CLI exits with
/// code 2 on it, as on the usage errors its argument parser finds.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Missing(#[from] MissingComponent),
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Family(#[from] FamilyError),
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Landscape(#[from] LandscapeError),
    #[error(transparent)]
    Compiler(#[from] NvrtcError),
    /// The request cannot be done as asked; the message says what to change.
    #[error("{0}")]
    Refused(String),
    /// Something failed while doing `what`.
    #[error("{what}")]
    Context {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl RunError {
    /// Whether a CUDA component is missing (the driver, a GPU, NVRTC or its headers).
    pub fn is_missing_component(&self) -> bool {
        matches!(
            self,
            RunError::Missing(_) | RunError::Compiler(NvrtcError::Locate(_))
        )
    }

    /// Whether the request's options are wrong ([`UsageError`], or a database location
    /// evo cannot open whatever is there).
    pub fn is_usage(&self) -> bool {
        match self {
            RunError::Usage(_) => true,
            RunError::Store(e) => e.is_usage(),
            _ => false,
        }
    }
}

pub type Result<T, E = RunError> = std::result::Result<T, E>;

/// `Result::context`: the error becomes the source of a [`RunError::Context`].
pub(crate) trait ResultExt<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> ResultExt<T> for Result<T, E> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| RunError::Context {
            what: what(),
            source: Box::new(e),
        })
    }
}

/// `return Err(RunError::Refused(format!(...)))`.
macro_rules! refuse {
    ($($arg:tt)*) => {
        return Err($crate::error::RunError::Refused(format!($($arg)*)))
    };
}
pub(crate) use refuse;

/// `return Err(UsageError(format!(...)).into())`: a usage error found after parsing, into
/// the caller's error type (this crate's [`RunError`], the CLI's `anyhow::Error`).
#[macro_export]
macro_rules! usage {
    ($($arg:tt)*) => {
        return Err($crate::UsageError(format!($($arg)*)).into())
    };
}

/// `RunError::Refused(format!(...))`.
macro_rules! refused {
    ($($arg:tt)*) => {
        $crate::error::RunError::Refused(format!($($arg)*))
    };
}
pub(crate) use refused;
