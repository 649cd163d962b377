//! `evo doctor`: what evo finds on this machine and what is missing.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use evo_gpu::device::{self, DriverInfo};
use evo_gpu::{CompileCache, CudaInstall};
use evo_kernels::Family;
use serde::Serialize;

use crate::output::{bytes, exit_code, outln, print_json};

#[derive(Serialize)]
struct Check<T: Serialize> {
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    found: Option<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
}

impl<T: Serialize> Check<T> {
    fn from(r: Result<T, String>) -> Self {
        match r {
            Ok(v) => Check {
                ok: true,
                found: Some(v),
                problem: None,
            },
            Err(e) => Check {
                ok: false,
                found: None,
                problem: Some(e),
            },
        }
    }
}

#[derive(Serialize)]
struct FamilyCheck {
    problem: String,
    family: String,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
struct Report {
    evo_version: &'static str,
    cuda: Check<CudaInstall>,
    nvrtc_version: Check<String>,
    driver: Check<DriverInfo>,
    /// NVRTC must not be newer than the driver, or its PTX will not load.
    nvrtc_driver_compatible: Option<bool>,
    templates: Check<PathBuf>,
    families: Vec<FamilyCheck>,
    compile_cache: PathBuf,
    database: PathBuf,
    database_exists: bool,
    can_compile: bool,
    can_search: bool,
}

fn scan_families(root: &Path) -> Vec<FamilyCheck> {
    let mut out = Vec::new();
    let Ok(dirs) = std::fs::read_dir(root) else {
        return out;
    };
    let mut dirs: Vec<PathBuf> = dirs
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        let problem = dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if problem == "common" {
            continue;
        }
        let Ok(files) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = files
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        for f in files {
            let family = f
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .to_string();
            let r = Family::load_file(&f, root);
            out.push(FamilyCheck {
                problem: problem.clone(),
                family,
                ok: r.is_ok(),
                error: r.err().map(|e| e.to_string()),
            });
        }
    }
    out
}

pub fn run(templates: Option<&Path>, compile_only: bool, json: bool) -> Result<ExitCode> {
    let cuda = CudaInstall::global().cloned().map_err(|e| e.to_string());
    let nvrtc_version = match &cuda {
        Ok(_) => evo_gpu::nvrtc::version()
            .map(|(a, b)| format!("{a}.{b}"))
            .map_err(|e| e.to_string()),
        Err(_) => Err("NVRTC not found (see cuda)".to_string()),
    };
    let driver = device::probe().map_err(|e| e.to_string()).and_then(|d| {
        if d.devices.is_empty() {
            Err(format!("driver CUDA {} sees no GPU", d.cuda_version))
        } else {
            Ok(d)
        }
    });
    let compatible = match (&nvrtc_version, &driver) {
        (Ok(v), Ok(d)) => {
            let mut parts = v.split('.').map(|p| p.parse::<i32>().unwrap_or(0));
            let nvrtc = parts.next().unwrap_or(0) * 1000 + parts.next().unwrap_or(0) * 10;
            Some(nvrtc <= d.cuda_version)
        }
        _ => None,
    };
    let templates_root = templates
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("templates"));
    let templates_check = if templates_root.is_dir() {
        Ok(templates_root.clone())
    } else {
        Err(format!(
            "no templates folder at {} (run from the project root or pass --templates)",
            templates_root.display()
        ))
    };
    let families = if templates_root.is_dir() {
        scan_families(&templates_root)
    } else {
        Vec::new()
    };
    let database = PathBuf::from(evo_store::DEFAULT_DB_FILE);
    let can_compile = cuda.is_ok() && nvrtc_version.is_ok();
    let can_search = can_compile && driver.is_ok() && compatible != Some(false);
    let report = Report {
        evo_version: env!("CARGO_PKG_VERSION"),
        cuda: Check::from(cuda),
        nvrtc_version: Check::from(nvrtc_version),
        driver: Check::from(driver),
        nvrtc_driver_compatible: compatible,
        templates: Check::from(templates_check),
        families,
        compile_cache: CompileCache::default_dir(),
        database_exists: database.exists(),
        database,
        can_compile,
        can_search,
    };
    let printed = if json {
        print_json(&report)
    } else {
        print_human(&report)
    };
    let ready = if compile_only {
        report.can_compile
    } else {
        report.can_search
    };
    let code = if ready {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::EXIT_MISSING)
    };
    exit_code(printed, code)
}

fn mark(ok: bool) -> &'static str {
    if ok {
        "ok  "
    } else {
        "MISSING"
    }
}

fn print_human(r: &Report) -> Result<()> {
    outln!("evo {}", r.evo_version)?;
    match (&r.cuda.found, &r.cuda.problem) {
        (Some(c), _) => {
            outln!(
                "{} CUDA compiler pieces at {} ({:?})",
                mark(true),
                c.root.display(),
                c.origin
            )?;
            outln!("     NVRTC     {}", c.nvrtc.display())?;
            outln!("     headers   {}", c.include.display())?;
            match &c.cuobjdump {
                Some(p) => outln!("     cuobjdump {}", p.display())?,
                None => outln!("     cuobjdump not found: no SASS inspection (scripts/install-cuda.sh installs it)")?,
            }
        }
        (None, Some(p)) => outln!("{} CUDA compiler pieces: {p}", mark(false))?,
        _ => {}
    }
    match (&r.nvrtc_version.found, &r.nvrtc_version.problem) {
        (Some(v), _) => outln!("{} NVRTC version {v}", mark(true))?,
        (None, Some(p)) => outln!("{} NVRTC: {p}", mark(false))?,
        _ => {}
    }
    match (&r.driver.found, &r.driver.problem) {
        (Some(d), _) => {
            outln!(
                "{} driver: CUDA {}.{}",
                mark(true),
                d.cuda_version / 1000,
                (d.cuda_version % 1000) / 10
            )?;
            for g in &d.devices {
                outln!(
                    "     GPU {}: {} (sm_{}{}), {} SMs, {} memory, {} L2, {} shared per block, {} MHz",
                    g.ordinal,
                    g.name,
                    g.compute_capability.0,
                    g.compute_capability.1,
                    g.multiprocessors,
                    bytes(g.memory_bytes),
                    bytes(g.l2_bytes as u64),
                    bytes(g.max_smem_per_block_optin as u64),
                    g.clock_mhz
                )?;
            }
        }
        (None, Some(p)) => outln!("{} GPU: {p}", mark(false))?,
        _ => {}
    }
    if r.nvrtc_driver_compatible == Some(false) {
        outln!("MISSING NVRTC is newer than the driver: its PTX will not load; install NVRTC 13.0 (scripts/install-cuda.sh) or point EVO_CUDA_HOME at a matching toolkit")?;
    }
    match (&r.templates.found, &r.templates.problem) {
        (Some(t), _) => outln!("{} templates at {}", mark(true), t.display())?,
        (None, Some(p)) => outln!("{} templates: {p}", mark(false))?,
        _ => {}
    }
    for f in &r.families {
        match &f.error {
            None => outln!("     family {}/{}: loads", f.problem, f.family)?,
            Some(e) => outln!("     family {}/{}: BROKEN: {e}", f.problem, f.family)?,
        }
    }
    outln!("     compile cache {}", r.compile_cache.display())?;
    outln!(
        "     database {} ({})",
        r.database.display(),
        if r.database_exists {
            "exists"
        } else {
            "created by the first search"
        }
    )?;
    outln!(
        "can compile: {}; can search: {}",
        if r.can_compile { "yes" } else { "no" },
        if r.can_search {
            "yes"
        } else {
            "no (needs a GPU with its driver)"
        }
    )?;
    Ok(())
}
