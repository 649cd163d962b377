//! The compile gate's engine: NVRTC options for a target, the cache, resource usage,
//! and parallel compilation.

use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;

use crate::cache::{CacheEntry, CompileCache, EntryMeta};
use crate::locate::CudaInstall;
use crate::nvrtc::{self, NvrtcError};
use crate::resources::{self, KernelResources, SassCounts};

/// One source to compile; `name` appears in NVRTC's messages.
#[derive(Clone, Debug)]
pub struct CompileRequest {
    pub name: String,
    pub source: String,
}

/// The result of compiling one source (from NVRTC or the cache).
#[derive(Clone, Debug, Serialize)]
pub struct Compiled {
    pub key: String,
    pub arch: String,
    pub options: Vec<String>,
    pub nvrtc_version: String,
    pub success: bool,
    pub log: String,
    #[serde(skip)]
    pub ptx: Option<String>,
    #[serde(skip)]
    pub cubin: Option<Vec<u8>>,
    /// Time NVRTC took (when the entry was made, for a cache hit).
    pub compile_ms: f64,
    pub cached: bool,
    /// From the ptxas report in the log.
    pub kernels: Vec<KernelResources>,
}

impl Compiled {
    pub fn kernel(&self, name: &str) -> Option<&KernelResources> {
        self.kernels.iter().find(|k| k.name == name)
    }
}

/// Compiles CUDA sources for one architecture with fixed options.
#[derive(Clone, Debug)]
pub struct Compiler {
    install: CudaInstall,
    arch: String,
    options: Vec<String>,
    nvrtc_version: String,
    cache: Option<CompileCache>,
}

impl Compiler {
    /// `user_options` come from the config (`-std=c++17`, `-lineinfo`, ...); evo adds
    /// the architecture, the CUDA include path, `--maxrregcount` when `max_registers`
    /// is non-zero, and `--ptxas-options=-v` for the resource report.
    pub fn new(
        arch: &str,
        user_options: &[String],
        max_registers: u32,
        cache: Option<CompileCache>,
    ) -> Result<Compiler, NvrtcError> {
        let install = CudaInstall::global()?.clone();
        let (major, minor) = nvrtc::version()?;
        let mut options = vec![
            format!("--gpu-architecture={arch}"),
            format!("-I{}", install.include.display()),
            "--ptxas-options=-v".to_string(),
        ];
        if max_registers > 0 {
            options.push(format!("--maxrregcount={max_registers}"));
        }
        options.extend(user_options.iter().cloned());
        Ok(Compiler {
            install,
            arch: arch.to_string(),
            options,
            nvrtc_version: format!("{major}.{minor}"),
            cache,
        })
    }

    pub fn arch(&self) -> &str {
        &self.arch
    }

    pub fn options(&self) -> &[String] {
        &self.options
    }

    pub fn nvrtc_version(&self) -> &str {
        &self.nvrtc_version
    }

    pub fn install(&self) -> &CudaInstall {
        &self.install
    }

    pub fn compile(&self, req: &CompileRequest) -> Result<Compiled, NvrtcError> {
        let key = CompileCache::key(&req.source, &self.options, &self.arch, &self.nvrtc_version);
        if let Some(entry) = self.cache.as_ref().and_then(|c| c.get(&key)) {
            return Ok(self.finish(key, entry, true));
        }
        let start = Instant::now();
        let out = nvrtc::compile(&req.source, &req.name, &self.options)?;
        let entry = CacheEntry {
            meta: EntryMeta {
                format: 1,
                success: out.success,
                log: out.log,
                arch: self.arch.clone(),
                options: self.options.clone(),
                nvrtc_version: self.nvrtc_version.clone(),
                compile_ms: start.elapsed().as_secs_f64() * 1e3,
            },
            ptx: out.ptx,
            cubin: out.cubin,
        };
        if let Some(cache) = &self.cache {
            if let Err(e) = cache.put(&key, &entry) {
                tracing::warn!(dir = %cache.dir().display(), error = %e, "cannot write compile cache");
            }
        }
        Ok(self.finish(key, entry, false))
    }

    fn finish(&self, key: String, entry: CacheEntry, cached: bool) -> Compiled {
        Compiled {
            key,
            arch: entry.meta.arch,
            options: entry.meta.options,
            nvrtc_version: entry.meta.nvrtc_version,
            success: entry.meta.success,
            kernels: resources::parse_ptxas_report(&entry.meta.log),
            log: entry.meta.log,
            ptx: entry.ptx,
            cubin: entry.cubin,
            compile_ms: entry.meta.compile_ms,
            cached,
        }
    }

    /// Compiles every request on a pool of `threads` threads (0: one per core); results
    /// come back in request order.
    pub fn compile_many(
        &self,
        requests: &[CompileRequest],
        threads: usize,
    ) -> Vec<Result<Compiled, NvrtcError>> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("evo-nvrtc-{i}"))
            .build()
            .expect("thread pool starts");
        pool.install(|| requests.par_iter().map(|r| self.compile(r)).collect())
    }

    /// SASS instruction counts per kernel, when cuobjdump is available.
    pub fn sass_counts(
        &self,
        cubin: &[u8],
    ) -> Option<Result<std::collections::BTreeMap<String, SassCounts>, resources::SassError>> {
        let tool = self.install.cuobjdump.as_ref()?;
        Some(resources::disassemble(tool, cubin).map(|s| resources::parse_sass(&s)))
    }
}
