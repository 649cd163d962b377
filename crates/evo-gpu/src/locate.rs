//! Finding a CUDA installation that can compile (NVRTC + headers) and, optionally,
//! disassemble (cuobjdump).
//!
//! Candidates, in order: `$EVO_CUDA_HOME` (an error if it is set but unusable),
//! `$CUDA_HOME`, `/usr/local/cuda`, then the project-local install of the pinned PyPI
//! wheels, `.cuda/nvidia/cu13`, looked for in the current folder, its ancestors, and the
//! ancestors of the running executable. A candidate is usable when it has
//! `lib64/` or `lib/` with `libnvrtc.so.13` and `include/cuda_fp16.h`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Serialize;

/// The NVRTC major version evo pins (PTX from a newer NVRTC does not load on the
/// 13.0 driver of the GPU machines).
pub const NVRTC_SONAME: &str = "libnvrtc.so.13";
/// Where `scripts/install-cuda.sh` puts the wheels, relative to the project root.
pub const PROJECT_LOCAL_DIR: &str = ".cuda/nvidia/cu13";
pub const INSTALL_HINT: &str = "install NVRTC 13.0 with `scripts/install-cuda.sh` (pip wheels nvidia-cuda-nvrtc==13.0.88, nvidia-cuda-runtime==13.0.96, nvidia-cuda-crt==13.0.88 into .cuda/), or point EVO_CUDA_HOME at a CUDA 13.0 toolkit";

#[derive(Debug, thiserror::Error, Clone)]
pub enum LocateError {
    #[error("EVO_CUDA_HOME={path} is not usable: {why}; {INSTALL_HINT}")]
    BadEvoCudaHome { path: PathBuf, why: String },
    #[error(
        "no CUDA installation with NVRTC 13 and headers found (looked in: {tried}); {INSTALL_HINT}"
    )]
    NotFound { tried: String },
    #[error("cannot load {path}: {why}; {INSTALL_HINT}")]
    Load { path: PathBuf, why: String },
}

/// Where a candidate came from, for `evo doctor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    EvoCudaHome,
    CudaHome,
    UsrLocalCuda,
    ProjectLocal,
}

/// A usable CUDA installation.
#[derive(Clone, Debug, Serialize)]
pub struct CudaInstall {
    pub root: PathBuf,
    pub origin: Origin,
    pub nvrtc: PathBuf,
    /// `libnvrtc-builtins.so.13.*`, which NVRTC opens by name at compile time.
    pub nvrtc_builtins: Option<PathBuf>,
    pub include: PathBuf,
    pub cuobjdump: Option<PathBuf>,
    pub nvdisasm: Option<PathBuf>,
}

impl CudaInstall {
    /// Checks one candidate root; `Err` says what is missing.
    pub fn at(root: &Path, origin: Origin) -> Result<CudaInstall, String> {
        let lib = ["lib64", "lib"]
            .iter()
            .map(|d| root.join(d))
            .find(|d| d.join(NVRTC_SONAME).is_file())
            .ok_or_else(|| format!("no lib64/{NVRTC_SONAME} or lib/{NVRTC_SONAME}"))?;
        let include = root.join("include");
        if !include.join("cuda_fp16.h").is_file() {
            return Err("no include/cuda_fp16.h (CUDA headers)".into());
        }
        let nvrtc_builtins = std::fs::read_dir(&lib).ok().and_then(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("libnvrtc-builtins.so.13"))
                })
                .min()
        });
        let tool = |name: &str| {
            let p = root.join("bin").join(name);
            p.is_file().then_some(p)
        };
        Ok(CudaInstall {
            root: root.to_path_buf(),
            origin,
            nvrtc: lib.join(NVRTC_SONAME),
            nvrtc_builtins,
            include,
            cuobjdump: tool("cuobjdump").or_else(|| which("cuobjdump")),
            nvdisasm: tool("nvdisasm").or_else(|| which("nvdisasm")),
        })
    }

    /// Finds the first usable candidate (see the module docs).
    pub fn find() -> Result<CudaInstall, LocateError> {
        if let Some(home) = std::env::var_os("EVO_CUDA_HOME") {
            let path = PathBuf::from(home);
            return CudaInstall::at(&path, Origin::EvoCudaHome)
                .map_err(|why| LocateError::BadEvoCudaHome { path, why });
        }
        let mut tried = Vec::new();
        for (root, origin) in candidates() {
            match CudaInstall::at(&root, origin) {
                Ok(install) => return Ok(install),
                Err(why) => tried.push(format!("{} ({why})", root.display())),
            }
        }
        Err(LocateError::NotFound {
            tried: tried.join("; "),
        })
    }

    /// The process-wide install, found and loaded once. NVRTC is opened here by its
    /// full path, so cudarc's later lookup by soname finds the same library instead of
    /// panicking when it is not on the loader's path.
    pub fn global() -> Result<&'static CudaInstall, LocateError> {
        static GLOBAL: OnceLock<Result<CudaInstall, LocateError>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                let install = CudaInstall::find()?;
                install.load_nvrtc()?;
                Ok(install)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    fn load_nvrtc(&self) -> Result<(), LocateError> {
        use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
        let open = |path: &Path| -> Result<(), LocateError> {
            // SAFETY: NVRTC's initialisers are safe to run; the library stays loaded for
            // the life of the process (forgotten on purpose).
            let lib =
                unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }.map_err(|e| {
                    LocateError::Load {
                        path: path.to_path_buf(),
                        why: e.to_string(),
                    }
                })?;
            std::mem::forget(lib);
            Ok(())
        };
        if let Some(b) = &self.nvrtc_builtins {
            open(b)?;
        }
        open(&self.nvrtc)?;
        // SAFETY: only probes whether the library can be opened.
        if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            Ok(())
        } else {
            Err(LocateError::Load {
                path: self.nvrtc.clone(),
                why: "loaded by path but not found again by name".into(),
            })
        }
    }
}

fn candidates() -> Vec<(PathBuf, Origin)> {
    let mut c = Vec::new();
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        c.push((PathBuf::from(home), Origin::CudaHome));
    }
    c.push((PathBuf::from("/usr/local/cuda"), Origin::UsrLocalCuda));
    let mut starts: Vec<PathBuf> = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        starts.push(cwd);
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            starts.push(dir.to_path_buf());
        }
    }
    for start in starts {
        for dir in start.ancestors() {
            let p = dir.join(PROJECT_LOCAL_DIR);
            if p.is_dir() && !c.iter().any(|(q, _)| *q == p) {
                c.push((p, Origin::ProjectLocal));
            }
        }
    }
    c
}

/// The first executable called `name` on `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_without_nvrtc_says_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let why = CudaInstall::at(dir.path(), Origin::CudaHome).unwrap_err();
        assert!(why.contains(NVRTC_SONAME), "{why}");
        std::fs::create_dir_all(dir.path().join("lib")).unwrap();
        std::fs::write(dir.path().join("lib").join(NVRTC_SONAME), b"").unwrap();
        let why = CudaInstall::at(dir.path(), Origin::CudaHome).unwrap_err();
        assert!(why.contains("cuda_fp16.h"), "{why}");
        std::fs::create_dir_all(dir.path().join("include")).unwrap();
        std::fs::write(dir.path().join("include/cuda_fp16.h"), b"").unwrap();
        let ok = CudaInstall::at(dir.path(), Origin::CudaHome).unwrap();
        assert_eq!(ok.nvrtc, dir.path().join("lib").join(NVRTC_SONAME));
    }
}
