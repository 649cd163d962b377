//! Resource usage of compiled kernels, read without a GPU.
//!
//! Two sources that cross-check each other: ptxas's verbose report in the NVRTC log
//! (registers, static shared memory, stack frame, spill stores and loads, barriers, a
//! serialized wgmma pipeline) and
//! the CUBIN's ELF (register count and stack frame per kernel from `.nv.info`). Tensor-core instructions are counted in
//! the SASS printed by cuobjdump, when it is available.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use object::elf::FileHeader64;
use object::read::elf::{FileHeader, SectionHeader};
use object::Endianness;
use serde::{Deserialize, Serialize};

/// Per-kernel resources from the ptxas report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelResources {
    pub name: String,
    pub registers: u32,
    pub static_smem_bytes: u32,
    pub stack_frame_bytes: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
    pub barriers: u32,
    /// ptxas's reason when it serialized the kernel's wgmma.mma_async instructions (info
    /// C7510-C7515, "Potential Performance Loss"): each then waits for the previous one, and
    /// the kernel runs well below its peers (session 20: 10-20% on an FP8 attention kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wgmma_serialized: Option<String>,
}

impl KernelResources {
    pub fn spills(&self) -> bool {
        self.spill_store_bytes > 0 || self.spill_load_bytes > 0
    }
}

fn number_before(text: &str, unit: &str) -> Option<u32> {
    let idx = text.find(unit)?;
    text[..idx].split_whitespace().last()?.parse().ok()
}

/// The marker of ptxas's notice that it serialized a function's wgmma instructions.
const WGMMA_SERIALIZED: &str = "wgmma.mma_async instructions are serialized";

/// Parses `ptxas info` lines of an NVRTC log compiled with `--ptxas-options=-v`.
pub fn parse_ptxas_report(log: &str) -> Vec<KernelResources> {
    let mut kernels: Vec<KernelResources> = Vec::new();
    // ptxas names the function at the end of the notice, not always after its entry line.
    let mut serialized: BTreeMap<String, String> = BTreeMap::new();
    for line in log.lines() {
        let line = line.trim();
        if let Some(at) = line.find(WGMMA_SERIALIZED) {
            let reason = line[at + WGMMA_SERIALIZED.len()..].trim();
            if let Some((why, function)) = reason.rsplit_once(" in the function '") {
                let function = function.trim_end_matches('\'').to_string();
                serialized
                    .entry(function)
                    .or_insert_with(|| why.trim().to_string());
            }
            continue;
        }
        if let Some(rest) = line
            .strip_prefix("ptxas info")
            .and_then(|r| r.split_once(':'))
            .map(|(_, r)| r.trim())
        {
            if let Some(name) = rest
                .strip_prefix("Compiling entry function '")
                .and_then(|r| r.split('\'').next())
            {
                kernels.push(KernelResources {
                    name: name.to_string(),
                    ..Default::default()
                });
            } else if let (Some(k), true) = (kernels.last_mut(), rest.starts_with("Used ")) {
                k.registers = number_before(rest, " registers").unwrap_or(0);
                k.static_smem_bytes = number_before(rest, " bytes smem").unwrap_or(0);
                k.barriers = number_before(rest, " barriers").unwrap_or(0);
            }
        } else if let (Some(k), true) = (kernels.last_mut(), line.contains("bytes stack frame")) {
            k.stack_frame_bytes = number_before(line, " bytes stack frame").unwrap_or(0);
            k.spill_store_bytes = number_before(line, " bytes spill stores").unwrap_or(0);
            k.spill_load_bytes = number_before(line, " bytes spill loads").unwrap_or(0);
        }
    }
    for k in &mut kernels {
        k.wgmma_serialized = serialized.remove(&k.name);
    }
    kernels
}

/// Per-kernel facts read from the CUBIN's ELF.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElfKernel {
    pub name: String,
    pub registers: u32,
    pub stack_frame_bytes: u32,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot read CUBIN as ELF: {0}")]
pub struct ElfError(String);

/// `.nv.info` attribute codes (EIATTR_*) and value formats (EIFMT_*) used below.
const EIFMT_SVAL: u8 = 0x04;
const EIATTR_FRAME_SIZE: u8 = 0x11;
const EIATTR_REGCOUNT: u8 = 0x2f;

/// Kernels of a CUBIN (its `.text.<kernel>` sections) with the register count and
/// stack frame size recorded in the global `.nv.info` section (per-symbol attributes
/// EIATTR_REGCOUNT and EIATTR_FRAME_SIZE).
pub fn elf_kernels(cubin: &[u8]) -> Result<Vec<ElfKernel>, ElfError> {
    let err = |e: object::read::Error| ElfError(e.to_string());
    let header = FileHeader64::<Endianness>::parse(cubin).map_err(err)?;
    let endian = header.endian().map_err(err)?;
    let sections = header.sections(endian, cubin).map_err(err)?;
    let symbols = sections
        .symbols(endian, cubin, object::elf::SHT_SYMTAB)
        .map_err(err)?;
    let mut kernels = Vec::new();
    let mut info: BTreeMap<(u32, u8), u32> = BTreeMap::new();
    for section in sections.iter() {
        let name = sections.section_name(endian, section).map_err(err)?;
        if let Some(k) = name.strip_prefix(b".text.") {
            kernels.push(ElfKernel {
                name: String::from_utf8_lossy(k).into_owned(),
                registers: 0,
                stack_frame_bytes: 0,
            });
        } else if name == b".nv.info" {
            let data = section.data(endian, cubin).map_err(err)?;
            let mut at = 0;
            while at + 4 <= data.len() {
                let (fmt, attr) = (data[at], data[at + 1]);
                let size = u16::from_le_bytes([data[at + 2], data[at + 3]]) as usize;
                at += 4;
                if fmt != EIFMT_SVAL {
                    continue;
                }
                if size == 8 && at + 8 <= data.len() {
                    let word = |o: usize| {
                        u32::from_le_bytes(data[at + o..at + o + 4].try_into().expect("4 bytes"))
                    };
                    info.insert((word(0), attr), word(4));
                }
                at += size;
            }
        }
    }
    for (index, symbol) in symbols.iter().enumerate() {
        let name = symbols.symbol_name(endian, symbol).map_err(err)?;
        if let Some(k) = kernels.iter_mut().find(|k| k.name.as_bytes() == name) {
            let get = |attr| info.get(&(index as u32, attr)).copied();
            k.registers = get(EIATTR_REGCOUNT).unwrap_or(0);
            k.stack_frame_bytes = get(EIATTR_FRAME_SIZE).unwrap_or(0);
        }
    }
    Ok(kernels)
}

/// SASS instruction counts of one kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SassCounts {
    pub instructions: u64,
    /// Tensor-core instructions by opcode (HMMA, HGMMA, QGMMA, IMMA, QMMA, ...).
    pub tensor: BTreeMap<String, u64>,
}

impl SassCounts {
    pub fn tensor_total(&self) -> u64 {
        self.tensor.values().sum()
    }
}

/// Opcodes that run on the tensor cores.
pub const TENSOR_OPCODES: &[&str] = &[
    "HMMA", "HGMMA", "QGMMA", "IMMA", "IGMMA", "QMMA", "BMMA", "BGMMA", "OMMA", "UTCHMMA",
    "UTCQMMA", "UTCIMMA",
];

/// Counts instructions per kernel in `cuobjdump -sass` output.
pub fn parse_sass(sass: &str) -> BTreeMap<String, SassCounts> {
    let mut out: BTreeMap<String, SassCounts> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in sass.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("Function : ") {
            current = Some(name.trim().to_string());
            out.entry(name.trim().to_string()).or_default();
            continue;
        }
        let (Some(kernel), Some(rest)) = (&current, t.strip_prefix("/*")) else {
            continue;
        };
        // Instruction lines look like `/*0070*/  @!P0 HMMA.16816.F32 R4, ... ;`
        let Some((addr, body)) = rest.split_once("*/") else {
            continue;
        };
        if addr.len() < 4 || !addr.chars().all(|c| c.is_ascii_hexdigit()) {
            continue;
        }
        let mut tokens = body.split_whitespace();
        let mut op = tokens.next().unwrap_or("");
        if op.starts_with('@') {
            op = tokens.next().unwrap_or("");
        }
        let op = op.trim_end_matches(';');
        if op.is_empty() || op.starts_with("/*") {
            continue;
        }
        let base = op.split('.').next().unwrap_or(op);
        let counts = out.get_mut(kernel).expect("inserted at `Function :`");
        counts.instructions += 1;
        if TENSOR_OPCODES.contains(&base) {
            *counts.tensor.entry(base.to_string()).or_default() += 1;
        }
    }
    out
}

#[derive(Debug, thiserror::Error)]
pub enum SassError {
    #[error("cannot write CUBIN for cuobjdump: {0}")]
    Io(#[from] std::io::Error),
    #[error("cuobjdump failed ({status}): {stderr}")]
    Failed { status: String, stderr: String },
}

/// Runs `cuobjdump -sass` on a CUBIN and returns its text.
pub fn disassemble(cuobjdump: &Path, cubin: &[u8]) -> Result<String, SassError> {
    // A folder of its own per call, removed with it: threads of one process may disassemble
    // the same CUBIN at once (genomes whose code is equal for a specialization).
    let dir = tempfile::Builder::new().prefix("evo-sass-").tempdir()?;
    let file = dir.path().join("kernel.cubin");
    std::fs::write(&file, cubin)?;
    let out = Command::new(cuobjdump).arg("-sass").arg(&file).output()?;
    if !out.status.success() {
        return Err(SassError::Failed {
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'gemm' for 'sm_90a'
ptxas info    : Function properties for gemm
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function 'combine' for 'sm_90a'
ptxas info    : Function properties for combine
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, 380 bytes cmem[0]
";

    #[test]
    fn ptxas_report_per_kernel() {
        let k = parse_ptxas_report(LOG);
        assert_eq!(k.len(), 2);
        assert_eq!(
            k[0],
            KernelResources {
                name: "gemm".into(),
                registers: 168,
                static_smem_bytes: 1024,
                stack_frame_bytes: 8,
                spill_store_bytes: 4,
                spill_load_bytes: 12,
                barriers: 1,
                wgmma_serialized: None,
            }
        );
        assert!(k[0].spills() && !k[1].spills());
        assert_eq!(
            (k[1].name.as_str(), k[1].registers, k[1].barriers),
            ("combine", 32, 0)
        );
    }

    /// ptxas's notice of a serialized wgmma pipeline (NVRTC 13.0's words, session 20), before
    /// the function's entry line and after another's, lands on that function only.
    #[test]
    fn ptxas_report_names_a_serialized_wgmma_pipeline() {
        let log = "\
ptxas info    : (C7519) warpgroup.arrive is injected in around line 1548 by compiler to allow use of registers in GMMA in function 'sdpa_fwd_fp8'
ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient register resources for the wgmma pipeline in the function 'sdpa_fwd_fp8'
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'sdpa_fp8_amax' for 'sm_90a'
ptxas info    : Function properties for sdpa_fp8_amax
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 26 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compiling entry function 'sdpa_fwd_fp8' for 'sm_90a'
ptxas info    : Function properties for sdpa_fwd_fp8
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers
";
        let k = parse_ptxas_report(log);
        assert_eq!(k.len(), 2);
        assert_eq!(k[0].name, "sdpa_fp8_amax");
        assert_eq!(k[0].wgmma_serialized, None);
        assert_eq!(k[1].name, "sdpa_fwd_fp8");
        assert_eq!(
            k[1].wgmma_serialized.as_deref(),
            Some("due to insufficient register resources for the wgmma pipeline")
        );
        // A log without the notice (the one above) names none.
        assert!(parse_ptxas_report(LOG)
            .iter()
            .all(|k| k.wgmma_serialized.is_none()));
    }

    #[test]
    fn sass_counts_tensor_instructions() {
        let sass = "
\tcode for sm_90a
\t\tFunction : gemm
        /*0000*/                   LDC R1, c[0x0][0x28] ;                /* 0x00000a00ff017b82 */
        /*0010*/              @!P0 HMMA.16816.F32 R4, R8, R12, R4 ;      /* 0x0000000c0804723c */
        /*0020*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ; /* 0x0000000c0804723c */
        /*0030*/                   HGMMA.64x128x16.F32 R24, gdesc[UR4], R24 ; /* 0x0 */
        /*0040*/                   EXIT ;                                /* 0x000000000000794d */
\t\tFunction : other
        /*0000*/                   EXIT ;                                /* 0x000000000000794d */
";
        let c = parse_sass(sass);
        assert_eq!(c["gemm"].instructions, 5);
        assert_eq!(c["gemm"].tensor["HMMA"], 2);
        assert_eq!(c["gemm"].tensor["HGMMA"], 1);
        assert_eq!(c["gemm"].tensor_total(), 3);
        assert_eq!(
            c["other"],
            SassCounts {
                instructions: 1,
                tensor: BTreeMap::new()
            }
        );
    }

    #[test]
    fn garbage_is_not_an_elf() {
        assert!(elf_kernels(b"not an elf file at all, certainly not a cubin").is_err());
    }
}
