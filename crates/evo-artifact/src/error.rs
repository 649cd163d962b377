//! Why an export or a verify failed.

/// An export or a verify that failed. Its message is the outermost one; its source is
/// the cause with its own causes, so a caller finds there what it looks for (a CUDA
/// component missing: `evo_run::MissingComponent`, `evo_gpu::LocateError`, ...).
/// The steps inside keep `anyhow`'s context chains; this is their type at the API.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ArtifactError(#[from] anyhow::Error);

pub type Result<T, E = ArtifactError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    /// The message is the cause's, and the cause's type stays in the chain (the CLI finds
    /// a missing CUDA component there: exit code 3).
    #[test]
    fn the_cause_stays_in_the_chain() {
        let missing = evo_run::MissingComponent("no NVRTC here".into());
        let e = super::ArtifactError::from(anyhow::Error::from(missing));
        assert_eq!(e.to_string(), "no NVRTC here");
        let e = anyhow::Error::from(e);
        assert!(e.chain().any(|c| c.is::<evo_run::MissingComponent>()));
    }
}
