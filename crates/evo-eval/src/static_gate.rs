//! The static gate: resource usage read from the compiled kernels (no GPU), checked
//! against the target's limits and the config's rejection rules, before any launch.

use std::collections::BTreeMap;

use evo_core::config::StaticConfig;
use evo_core::{LaunchDims, Target};
use evo_gpu::{KernelResources, SassCounts};
use serde::{Deserialize, Serialize};

/// Shared memory the driver reserves per block on sm_80 and newer.
const RESERVED_SMEM_PER_BLOCK: u32 = 1024;

/// What the static gate saw, per kernel.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StaticKernel {
    pub name: String,
    pub registers: u32,
    pub static_smem_bytes: u32,
    /// Largest dynamic shared memory over the shapes.
    pub dynamic_smem_bytes: u32,
    pub threads: u32,
    pub spill_bytes: u32,
    pub stack_frame_bytes: u32,
    /// Resident blocks per multiprocessor (theoretical occupancy).
    pub blocks_per_sm: u32,
    /// Tensor-core instructions in the SASS, when cuobjdump was available.
    pub tensor_ops: Option<BTreeMap<String, u64>>,
}

/// Blocks of `threads` threads using `registers` per thread and `smem` bytes of shared
/// memory that fit on one multiprocessor (register allocation in 256-register units
/// per warp, as on sm_80 and newer).
pub fn blocks_per_sm(target: &Target, threads: u32, registers: u32, smem: u32) -> u32 {
    let warps = threads.div_ceil(32);
    let regs_per_warp = (registers.max(1) * 32).div_ceil(256) * 256;
    let by_regs = target.regs_per_sm / (warps * regs_per_warp).max(1);
    let by_smem = target.smem_per_sm / (smem + RESERVED_SMEM_PER_BLOCK);
    let by_threads = target.max_threads_per_sm / threads.max(1);
    by_regs
        .min(by_smem)
        .min(by_threads)
        .min(target.max_blocks_per_sm)
}

/// Checks every kernel of a variant; `launches` lists each shape's launch geometry per
/// kernel name. `Err` is the reason for rejection.
pub fn check(
    target: &Target,
    rules: &StaticConfig,
    kernels: &[KernelResources],
    sass: Option<&BTreeMap<String, SassCounts>>,
    launches: &[Vec<(String, LaunchDims)>],
) -> Result<Vec<StaticKernel>, String> {
    let mut out = Vec::new();
    let names: Vec<&String> = launches.iter().flatten().map(|(n, _)| n).collect();
    for name in names
        .iter()
        .copied()
        .collect::<std::collections::BTreeSet<_>>()
    {
        let k = kernels.iter().find(|k| &k.name == name).ok_or_else(|| {
            format!(
                "kernel `{name}` is not in the compiled module (ptxas reported {:?})",
                kernels.iter().map(|k| &k.name).collect::<Vec<_>>()
            )
        })?;
        let dims: Vec<&LaunchDims> = launches
            .iter()
            .flatten()
            .filter(|(n, _)| n == name)
            .map(|(_, d)| d)
            .collect();
        let dynamic = dims.iter().map(|d| d.shared_bytes).max().unwrap_or(0);
        let threads = dims
            .iter()
            .map(|d| d.threads_per_block())
            .max()
            .unwrap_or(1);
        let smem = k.static_smem_bytes + dynamic;
        if smem > target.max_smem_per_block {
            return Err(format!(
                "`{name}` needs {smem} bytes of shared memory per block ({} static + {dynamic} dynamic); {} allows {}",
                k.static_smem_bytes, target.arch, target.max_smem_per_block
            ));
        }
        if threads > target.max_threads_per_block {
            return Err(format!(
                "`{name}` launches {threads} threads per block; the limit is {}",
                target.max_threads_per_block
            ));
        }
        let spill = k.spill_store_bytes + k.spill_load_bytes;
        if spill > rules.max_spill_bytes {
            return Err(format!(
                "`{name}` spills {} bytes stored + {} loaded (limit {} in [static] max_spill_bytes)",
                k.spill_store_bytes, k.spill_load_bytes, rules.max_spill_bytes
            ));
        }
        if let (Some(why), false) = (&k.wgmma_serialized, rules.allow_wgmma_serialization) {
            return Err(format!(
                "ptxas serialized the wgmma instructions of `{name}` ({why}): each waits for the one before (allow it with [static] allow_wgmma_serialization = true)"
            ));
        }
        if k.registers > rules.max_registers {
            return Err(format!(
                "`{name}` uses {} registers per thread (limit {})",
                k.registers, rules.max_registers
            ));
        }
        let blocks = blocks_per_sm(target, threads, k.registers, smem);
        if blocks < rules.min_blocks_per_sm {
            return Err(format!(
                "`{name}` fits {blocks} blocks per multiprocessor ({threads} threads, {} registers, {smem} bytes shared); at least {} required",
                k.registers, rules.min_blocks_per_sm
            ));
        }
        let tensor_ops = sass
            .and_then(|s| s.get(name.as_str()))
            .map(|c| c.tensor.clone());
        if rules.require_tensor_ops && tensor_ops.as_ref().is_some_and(|t| t.is_empty()) {
            return Err(format!(
                "`{name}` has no tensor-core instruction in its SASS"
            ));
        }
        if let Some(ops) = &tensor_ops {
            for op in rules.sass_required_of(name) {
                if ops.get(op).copied().unwrap_or(0) == 0 {
                    return Err(format!(
                        "`{name}` has no {op} instruction in its SASS (required by the family or [static] require_sass; found {ops:?})"
                    ));
                }
            }
        }
        out.push(StaticKernel {
            name: name.clone(),
            registers: k.registers,
            static_smem_bytes: k.static_smem_bytes,
            dynamic_smem_bytes: dynamic,
            threads,
            spill_bytes: spill,
            stack_frame_bytes: k.stack_frame_bytes,
            blocks_per_sm: blocks,
            tensor_ops,
        });
    }
    Ok(out)
}

/// One `.param` of a PTX `.entry`: its size in bytes and whether it is a float.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PtxParam {
    pub bytes: usize,
    pub float: bool,
}

/// The parameters of every `.entry` in a PTX module, by kernel name.
pub fn ptx_params(ptx: &str) -> BTreeMap<String, Vec<PtxParam>> {
    let mut out = BTreeMap::new();
    let mut lines = ptx.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.trim().split(".entry ").nth(1) else {
            continue;
        };
        let name = rest.trim_end_matches('(').trim().to_string();
        let mut params = Vec::new();
        for p in lines.by_ref() {
            let p = p.trim();
            if p.starts_with(')') {
                break;
            }
            let words: Vec<&str> = p.split_whitespace().collect();
            if words.first() != Some(&".param") {
                continue;
            }
            // `.param .u64 x`, `.param .u64 .ptr .global .align 1 x`, `.param .f32 x`,
            // `.param .align 64 .b8 x[128]` (a by-value struct).
            let ty = words
                .iter()
                .skip(1)
                .find(|w| w.len() > 2 && w.starts_with('.') && w[2..].parse::<usize>().is_ok())
                .copied()
                .unwrap_or(".b8");
            let name = words.last().copied().unwrap_or("");
            let count = name
                .split_once('[')
                .and_then(|(_, n)| n.trim_end_matches([']', ',']).parse::<usize>().ok())
                .unwrap_or(1);
            let bits: usize = ty[2..].parse().unwrap_or(8);
            params.push(PtxParam {
                bytes: bits / 8 * count,
                float: ty.starts_with(".f"),
            });
        }
        out.insert(name, params);
    }
    out
}

/// Checks that each launch's argument list matches its kernel's parameters in the PTX
/// (count, sizes, floats where the kernel takes floats): a family whose `args` disagree
/// with the kernel it launches would otherwise pass garbage. `Err` is the reason.
pub fn check_arguments(
    params: &BTreeMap<String, Vec<PtxParam>>,
    kernels: &[String],
    args: &[Vec<evo_kernels::harness::ArgSlot>],
) -> Result<(), String> {
    use evo_kernels::harness::ArgSlot;
    for (i, (kernel, list)) in kernels.iter().zip(args).enumerate() {
        let Some(want) = params.get(kernel) else {
            return Err(format!("kernel `{kernel}` is not in the PTX"));
        };
        if let Some(ArgSlot::Abi(j)) = list.iter().find(|a| matches!(a, ArgSlot::Abi(_))) {
            return Err(format!(
                "launch {} (`{kernel}`): ABI argument {j} is not bound to a call",
                i + 1
            ));
        }
        let got: Vec<PtxParam> = list
            .iter()
            .map(|a| match a {
                ArgSlot::Input(_)
                | ArgSlot::Output
                | ArgSlot::Scratch(_)
                | ArgSlot::I64(_)
                | ArgSlot::Abi(_) => PtxParam {
                    bytes: 8,
                    float: false,
                },
                ArgSlot::I32(_) => PtxParam {
                    bytes: 4,
                    float: false,
                },
                ArgSlot::F32(_) => PtxParam {
                    bytes: 4,
                    float: true,
                },
                // A CUtensorMap by value: `.param .align 64 .b8 x[128]`.
                ArgSlot::TensorMap(_) => PtxParam {
                    bytes: 128,
                    float: false,
                },
            })
            .collect();
        if got != *want {
            let show = |l: &[PtxParam]| {
                l.iter()
                    .map(|p| format!("{}{}", if p.float { "f" } else { "" }, p.bytes))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            return Err(format!(
                "launch {} (`{kernel}`): its argument list does not match the kernel's parameters: the kernel takes {} ({}), the list gives {} ({}) [bytes, f = float]",
                i + 1,
                want.len(),
                show(want),
                got.len(),
                show(&got)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = "
.visible .entry sdpa_fp8_quantize(
	.param .u64 .ptr .global .align 1 sdpa_fp8_quantize_param_0,
	.param .u64 sdpa_fp8_quantize_param_1,
	.param .u32 sdpa_fp8_quantize_param_2,
	.param .f32 sdpa_fp8_quantize_param_3,
	.param .align 64 .b8 sdpa_fp8_quantize_param_4[128]
)
.maxntid 256, 1, 1
{
}
.visible .entry empty(

)
{
}
";

    #[test]
    fn argument_lists_must_match_the_ptx_parameters() {
        use evo_kernels::harness::ArgSlot;
        let p = ptx_params(PTX);
        assert_eq!(p["empty"], vec![]);
        let sizes: Vec<(usize, bool)> = p["sdpa_fp8_quantize"]
            .iter()
            .map(|p| (p.bytes, p.float))
            .collect();
        assert_eq!(
            sizes,
            [(8, false), (8, false), (4, false), (4, true), (128, false)]
        );
        let k = vec!["empty".to_string()];
        assert!(check_arguments(&p, &k, &[vec![]]).is_ok());
        let e = check_arguments(&p, &k, &[vec![ArgSlot::I32(1)]]).unwrap_err();
        assert!(
            e.contains("launch 1 (`empty`)") && e.contains("takes 0"),
            "{e}"
        );
        // A tensor map fills the 128-byte by-value parameter.
        let map = evo_kernels::harness::TensorMapSlot::matrix(
            0,
            evo_kernels::harness::ElemType::F16,
            64,
            64,
            64,
            64,
            64,
            128,
        );
        let q = vec!["sdpa_fp8_quantize".to_string()];
        let full = vec![
            ArgSlot::Input(0),
            ArgSlot::I64(1),
            ArgSlot::I32(1),
            ArgSlot::F32(1.0),
            ArgSlot::TensorMap(map),
        ];
        assert!(check_arguments(&p, &q, std::slice::from_ref(&full)).is_ok());
        let mut wrong = full.clone();
        wrong[4] = ArgSlot::I64(0);
        assert!(check_arguments(&p, &q, &[wrong]).is_err());
        let e = check_arguments(&p, &["nope".to_string()], &[vec![]]).unwrap_err();
        assert!(e.contains("`nope` is not in the PTX"), "{e}");
        // Through PTX of a real multi-kernel family: tests/multi_kernel_cpu.rs.
    }

    fn kernel(registers: u32, spill: u32) -> KernelResources {
        KernelResources {
            name: "k".into(),
            registers,
            static_smem_bytes: 0,
            stack_frame_bytes: 0,
            spill_store_bytes: spill,
            spill_load_bytes: spill,
            barriers: 1,
            wgmma_serialized: None,
        }
    }

    fn launch(threads: u32, smem: u32) -> Vec<Vec<(String, LaunchDims)>> {
        vec![vec![(
            "k".into(),
            LaunchDims {
                grid: [10, 1, 1],
                block: [threads, 1, 1],
                shared_bytes: smem,
            },
        )]]
    }

    fn h100() -> Target {
        Target::from_arch("sm_90a").unwrap()
    }

    #[test]
    fn occupancy_math() {
        let t = h100();
        // 128 threads x 128 regs = 16K regs per block: 4 blocks by registers.
        assert_eq!(blocks_per_sm(&t, 128, 128, 0), 4);
        // 255 registers round to 256 per thread: 2 blocks of 128 threads.
        assert_eq!(blocks_per_sm(&t, 128, 255, 0), 2);
        // 100 KB of shared memory: 2 blocks in 228 KB (with 1 KB reserved each).
        assert_eq!(blocks_per_sm(&t, 128, 32, 100 * 1024), 2);
        // Threads: 1024-thread blocks, 2 per SM.
        assert_eq!(blocks_per_sm(&t, 1024, 16, 0), 2);
        // Register-hungry big blocks do not fit at all.
        assert_eq!(blocks_per_sm(&t, 1024, 128, 0), 0);
    }

    #[test]
    fn rules_reject_with_reasons() {
        let t = h100();
        let rules = StaticConfig::default();
        let ok = check(&t, &rules, &[kernel(128, 0)], None, &launch(128, 48 * 1024)).unwrap();
        assert_eq!(ok[0].blocks_per_sm, 4);
        let e = check(&t, &rules, &[kernel(64, 0)], None, &launch(128, 300 * 1024)).unwrap_err();
        assert!(e.contains("shared memory") && e.contains("232448"), "{e}");
        let e = check(&t, &rules, &[kernel(64, 8)], None, &launch(128, 0)).unwrap_err();
        assert!(e.contains("spills"), "{e}");
        let relaxed = StaticConfig {
            max_spill_bytes: 64,
            ..StaticConfig::default()
        };
        assert!(check(&t, &relaxed, &[kernel(64, 8)], None, &launch(128, 0)).is_ok());
        let e = check(&t, &rules, &[kernel(128, 0)], None, &launch(1024, 0)).unwrap_err();
        assert!(e.contains("0 blocks per multiprocessor"), "{e}");
        let e = check(&t, &rules, &[kernel(64, 0)], None, &launch(2048, 0)).unwrap_err();
        assert!(e.contains("2048 threads"), "{e}");
        let mut serialized = kernel(64, 0);
        serialized.wgmma_serialized =
            Some("due to insufficient register resources for the wgmma pipeline".into());
        let e = check(
            &t,
            &rules,
            std::slice::from_ref(&serialized),
            None,
            &launch(128, 0),
        )
        .unwrap_err();
        assert!(
            e.contains("serialized the wgmma") && e.contains("insufficient register"),
            "{e}"
        );
        let allowed = StaticConfig {
            allow_wgmma_serialization: true,
            ..StaticConfig::default()
        };
        assert!(check(&t, &allowed, &[serialized], None, &launch(128, 0)).is_ok());
        let mut other = kernel(64, 0);
        other.name = "other".into();
        let e = check(&t, &rules, &[other], None, &launch(128, 0)).unwrap_err();
        assert!(e.contains("not in the compiled module"), "{e}");
    }

    #[test]
    fn tensor_op_rule_uses_sass_when_present() {
        let t = h100();
        let rules = StaticConfig {
            require_tensor_ops: true,
            ..StaticConfig::default()
        };
        let none: BTreeMap<String, SassCounts> = [("k".to_string(), SassCounts::default())]
            .into_iter()
            .collect();
        assert!(check(&t, &rules, &[kernel(64, 0)], Some(&none), &launch(128, 0)).is_err());
        let mut hmma = SassCounts::default();
        hmma.tensor.insert("HMMA".into(), 8);
        let some: BTreeMap<String, SassCounts> = [("k".to_string(), hmma)].into_iter().collect();
        assert!(check(&t, &rules, &[kernel(64, 0)], Some(&some), &launch(128, 0)).is_ok());
        // Without SASS the rule cannot be applied, and does not reject.
        assert!(check(&t, &rules, &[kernel(64, 0)], None, &launch(128, 0)).is_ok());
    }

    #[test]
    fn required_opcodes_must_each_appear() {
        let t = h100();
        let rules = StaticConfig::default().requiring(&["HGMMA".to_string()]);
        assert_eq!(rules.require_sass, vec!["HGMMA".to_string()]);
        // Requiring twice keeps one entry.
        assert_eq!(
            rules
                .clone()
                .requiring(&["HGMMA".into()])
                .require_sass
                .len(),
            1
        );
        let mut hmma = SassCounts::default();
        hmma.tensor.insert("HMMA".into(), 8);
        let only_hmma: BTreeMap<String, SassCounts> =
            [("k".to_string(), hmma)].into_iter().collect();
        let e = check(
            &t,
            &rules,
            &[kernel(64, 0)],
            Some(&only_hmma),
            &launch(128, 0),
        )
        .unwrap_err();
        assert!(e.contains("no HGMMA"), "{e}");
        let mut hgmma = SassCounts::default();
        hgmma.tensor.insert("HGMMA".into(), 12);
        let with: BTreeMap<String, SassCounts> = [("k".to_string(), hgmma)].into_iter().collect();
        assert!(check(&t, &rules, &[kernel(64, 0)], Some(&with), &launch(128, 0)).is_ok());
        // Without SASS the rule cannot be applied, and does not reject.
        assert!(check(&t, &rules, &[kernel(64, 0)], None, &launch(128, 0)).is_ok());
    }

    /// A kernel with its own list (a split-KV family's combine kernel: `[]`) is held to
    /// that list plus the config's, the others to the family's plus the config's.
    #[test]
    fn per_kernel_opcodes_replace_the_familys() {
        let t = h100();
        let config = StaticConfig {
            require_sass: vec!["HMMA".into()],
            ..StaticConfig::default()
        };
        let rules = config.requiring_per_kernel(&["HGMMA".into()], &[("k".into(), Vec::new())]);
        assert_eq!(rules.require_sass, ["HMMA", "HGMMA"]);
        assert_eq!(rules.sass_required_of("k"), ["HMMA"]);
        assert_eq!(rules.sass_required_of("other"), ["HMMA", "HGMMA"]);
        let mut hmma = SassCounts::default();
        hmma.tensor.insert("HMMA".into(), 8);
        let only_hmma: BTreeMap<String, SassCounts> =
            [("k".to_string(), hmma)].into_iter().collect();
        assert!(check(
            &t,
            &rules,
            &[kernel(64, 0)],
            Some(&only_hmma),
            &launch(128, 0)
        )
        .is_ok());
        let strict = StaticConfig::default().requiring_per_kernel(&["HGMMA".into()], &[]);
        let e = check(
            &t,
            &strict,
            &[kernel(64, 0)],
            Some(&only_hmma),
            &launch(128, 0),
        )
        .unwrap_err();
        assert!(e.contains("no HGMMA"), "{e}");
    }
}
