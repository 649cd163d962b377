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
    /// The compiler of a config's `[compile]` section for `arch`, with the compile cache
    /// every command shares ([`CompileCache::default_dir`]).
    pub fn for_config(
        arch: &str,
        compile: &evo_core::config::CompileConfig,
    ) -> Result<Compiler, NvrtcError> {
        Compiler::new(
            arch,
            &compile.options,
            compile.max_registers,
            Some(CompileCache::new(CompileCache::default_dir())),
        )
    }

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
        // NVRTC 12.9+ keeps a compute cache: a hit skips ptxas, and with it the resource
        // report the static gate reads (seen on an H200: a genome compiled earlier in the
        // same machine came back with an empty report, three times in a row). evo caches
        // compiles itself (`CompileCache`), report included.
        if (major, minor) >= (12, 9) {
            options.push("--no-cache".to_string());
        }
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
        let mut out = nvrtc::compile(&req.source, &req.name, &self.options)?;
        // The report must describe the CUBIN's kernels (resource usage comes from it). On an
        // H200 successful compiles came back without it: NVRTC's compute cache, now off
        // (`--no-cache` above). Should a report still disagree, compile again, and never
        // cache a result whose report and CUBIN disagree.
        let mut retries = 0;
        let mut mismatch = report_mismatch(&out);
        while let (Some(why), true) = (&mismatch, retries < 2) {
            retries += 1;
            tracing::warn!(name = %req.name, %why, retries, "NVRTC: ptxas report does not match the CUBIN; compiling again");
            out = nvrtc::compile(&req.source, &req.name, &self.options)?;
            mismatch = report_mismatch(&out);
        }
        if let Some(why) = &mismatch {
            out.log.push_str(&format!(
                "\nevo: after {} compiles, ptxas's report still does not match the CUBIN: {why}\n",
                retries + 1
            ));
        }
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
        if let (Some(cache), None) = (&self.cache, &mismatch) {
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

/// Why a successful compile's ptxas report (in the log) does not describe its CUBIN:
/// a kernel of the CUBIN missing from the report, or reported with another register
/// count than the CUBIN's `.nv.info` records. `None` when they agree, or when there is
/// no CUBIN to compare with (a failed compile, PTX only).
fn report_mismatch(out: &nvrtc::NvrtcOutput) -> Option<String> {
    let cubin = out.cubin.as_ref().filter(|_| out.success)?;
    let elf = match resources::elf_kernels(cubin) {
        Ok(k) => k,
        Err(e) => return Some(e.to_string()),
    };
    let report = resources::parse_ptxas_report(&out.log);
    for k in &elf {
        match report.iter().find(|r| r.name == k.name) {
            None => return Some(format!("kernel `{}` is not in the report", k.name)),
            Some(r) if r.registers != k.registers => {
                return Some(format!(
                    "kernel `{}`: {} registers in the report, {} in the CUBIN",
                    k.name, r.registers, k.registers
                ))
            }
            Some(_) => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_that_does_not_describe_the_cubin_is_a_mismatch() {
        let options = [
            "--gpu-architecture=sm_90a".to_string(),
            "--ptxas-options=-v".to_string(),
        ];
        let source = r#"extern "C" __global__ void probe(float* x) { x[threadIdx.x] *= 2.f; }"#;
        let out = nvrtc::compile(source, "probe.cu", &options)
            .expect("NVRTC is required (scripts/install-cuda.sh)");
        assert!(out.success, "{}", out.log);
        assert_eq!(report_mismatch(&out), None, "{}", out.log);

        let no_report = nvrtc::NvrtcOutput {
            log: String::new(),
            ..out.clone()
        };
        let why = report_mismatch(&no_report).expect("an empty log is a mismatch");
        assert!(why.contains("`probe` is not in the report"), "{why}");

        let registers = resources::parse_ptxas_report(&out.log)[0].registers;
        let other = nvrtc::NvrtcOutput {
            log: out.log.replace(
                &format!("Used {registers} registers"),
                &format!("Used {} registers", registers + 1),
            ),
            ..out.clone()
        };
        let why = report_mismatch(&other).expect("another register count is a mismatch");
        assert!(why.contains("registers in the report"), "{why}");

        let failed = nvrtc::NvrtcOutput {
            success: false,
            ..no_report
        };
        assert_eq!(report_mismatch(&failed), None);
    }

    /// The same source compiled again in one process still carries ptxas's report: with
    /// NVRTC's own compute cache on, the second compile on a GPU machine had none.
    #[test]
    fn a_repeated_compile_keeps_its_resource_report() {
        let compiler = Compiler::new("sm_90a", &[], 0, None)
            .expect("NVRTC is required (scripts/install-cuda.sh)");
        assert!(
            compiler.options().iter().any(|o| o == "--no-cache"),
            "{:?}",
            compiler.options()
        );
        let source = r#"extern "C" __global__ void twice(float* x) { x[threadIdx.x] += 1.f; }"#;
        for attempt in 0..3 {
            let out = nvrtc::compile(source, "twice.cu", compiler.options()).expect("compiles");
            assert!(out.success, "{}", out.log);
            assert_eq!(
                report_mismatch(&out),
                None,
                "compile {attempt}: {}",
                out.log
            );
        }
    }
}
