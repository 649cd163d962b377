//! The GPU architecture a kernel is compiled for, and the limits templates and
//! constraints may read (`ARCH`, `MAX_SMEM`, ...).

use serde::{Deserialize, Serialize};

use crate::value::{Value, Vars};

/// The default target when no GPU is present: Hopper with its arch-specific features
/// (wgmma, setmaxnreg), the first machine evo searches for.
pub const DEFAULT_ARCH: &str = "sm_90a";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// NVRTC's `--gpu-architecture` value, e.g. `sm_90a`.
    pub arch: String,
    /// Compute capability as major*10+minor, e.g. 90.
    pub cc: u32,
    /// Largest dynamic shared memory one block may opt in to, in bytes.
    pub max_smem_per_block: u32,
    /// Shared memory of one multiprocessor, in bytes.
    pub smem_per_sm: u32,
    /// 32-bit registers of one multiprocessor.
    pub regs_per_sm: u32,
    pub max_threads_per_block: u32,
    pub max_threads_per_sm: u32,
    pub max_blocks_per_sm: u32,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TargetError {
    #[error("`{0}` is not a GPU architecture; write it like `sm_90a`, `sm_89` or `sm_80`")]
    Syntax(String),
    #[error("architecture `{0}` is not supported; evo knows sm_75, sm_80, sm_86, sm_87, sm_89, sm_90(a), sm_100(a), sm_120")]
    Unknown(String),
}

impl Target {
    /// Limits of a known architecture (from NVIDIA's CUDA C++ Programming Guide,
    /// "Technical Specifications per Compute Capability").
    pub fn from_arch(arch: &str) -> Result<Target, TargetError> {
        let digits = arch
            .strip_prefix("sm_")
            .ok_or_else(|| TargetError::Syntax(arch.to_string()))?;
        let digits = digits
            .strip_suffix('a')
            .or_else(|| digits.strip_suffix('f'))
            .unwrap_or(digits);
        let cc: u32 = digits
            .parse()
            .map_err(|_| TargetError::Syntax(arch.to_string()))?;
        let kib = |k: u32| k * 1024;
        // (max dynamic smem per block, smem per SM, threads per SM, blocks per SM)
        let (max_smem_per_block, smem_per_sm, max_threads_per_sm, max_blocks_per_sm) = match cc {
            75 => (kib(64), kib(64), 1024, 16),
            80 | 87 => (kib(163), kib(164), 2048, 32),
            86 => (kib(99), kib(100), 1536, 16),
            89 => (kib(99), kib(100), 1536, 24),
            120 => (kib(99), kib(100), 1536, 32),
            90 | 100 => (kib(227), kib(228), 2048, 32),
            _ => return Err(TargetError::Unknown(arch.to_string())),
        };
        Ok(Target {
            arch: arch.to_string(),
            cc,
            max_smem_per_block,
            smem_per_sm,
            regs_per_sm: 65536,
            max_threads_per_block: 1024,
            max_threads_per_sm,
            max_blocks_per_sm,
        })
    }

    /// The architecture string for a device's compute capability: Hopper and Blackwell
    /// datacenter parts get their arch-specific `a` variant (wgmma, setmaxnreg, tcgen05).
    pub fn arch_for_capability(major: u32, minor: u32) -> String {
        match (major, minor) {
            (9, 0) | (10, 0) => format!("sm_{major}{minor}a"),
            _ => format!("sm_{major}{minor}"),
        }
    }

    /// Variables templates and expressions can read.
    pub fn vars(&self) -> Vars {
        let mut v = Vars::new();
        v.insert("ARCH".into(), Value::Int(self.cc as i64));
        v.insert(
            "MAX_SMEM".into(),
            Value::Int(self.max_smem_per_block as i64),
        );
        v.insert("SMEM_PER_SM".into(), Value::Int(self.smem_per_sm as i64));
        v.insert("REGS_PER_SM".into(), Value::Int(self.regs_per_sm as i64));
        v.insert(
            "MAX_THREADS".into(),
            Value::Int(self.max_threads_per_block as i64),
        );
        v
    }

    /// Names of [`Target::vars`], for validating expressions without a target at hand.
    pub const VAR_NAMES: &'static [&'static str] = &[
        "ARCH",
        "MAX_SMEM",
        "SMEM_PER_SM",
        "REGS_PER_SM",
        "MAX_THREADS",
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_architectures() {
        let h = Target::from_arch("sm_90a").unwrap();
        assert_eq!((h.cc, h.max_smem_per_block), (90, 232_448));
        assert_eq!(
            Target::from_arch("sm_80").unwrap().max_smem_per_block,
            166_912
        );
        assert_eq!(
            Target::from_arch("sm_89").unwrap().max_smem_per_block,
            101_376
        );
        assert_eq!(Target::arch_for_capability(9, 0), "sm_90a");
        assert_eq!(Target::arch_for_capability(8, 9), "sm_89");
        let names: Vec<String> = h.vars().into_keys().collect();
        let mut expected: Vec<String> = Target::VAR_NAMES.iter().map(|s| s.to_string()).collect();
        expected.sort();
        assert_eq!(names, expected);
    }

    #[test]
    fn bad_architectures() {
        assert!(matches!(
            Target::from_arch("90"),
            Err(TargetError::Syntax(_))
        ));
        assert!(matches!(
            Target::from_arch("sm_x"),
            Err(TargetError::Syntax(_))
        ));
        assert!(matches!(
            Target::from_arch("sm_61"),
            Err(TargetError::Unknown(_))
        ));
    }
}
