//! The worker's own kernels (`gate_kernels.cu`): fresh inputs for every timing replay, the
//! comparison of a timed output with its reference, and byte checks of inputs and guard
//! regions, all on the GPU so verifying what is timed costs little next to the reference.
//! Jobs are packed on the host in the C layout of the structs in `gate_kernels.cu`.

use evo_core::LaunchDims;
use evo_gpu::runtime::{CudaError, Function, Gpu, KernelArg, Module};
use evo_kernels::harness::{ElemType, Fill, Tolerance};

use crate::protocol::ErrorStats;

pub(crate) const SOURCE: &str = include_str!("gate_kernels.cu");

/// The element codes of `gate_kernels.cu`.
fn elem_code(e: ElemType) -> i32 {
    match e {
        ElemType::F16 => 0,
        ElemType::Bf16 => 1,
        ElemType::F32 => 2,
        ElemType::E4m3 => 3,
        ElemType::U8 => 4,
    }
}

/// Writes `n` elements of `elem` at `ptr` with `fill`'s values from `seed`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FillJob {
    pub ptr: u64,
    pub n: u64,
    pub seed: u64,
    pub elem: ElemType,
    pub fill: Fill,
}

/// Compares `n` elements of `elem` at `got` with the float32 reference at `reference`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CompareJob {
    pub got: u64,
    pub reference: u64,
    pub n: u64,
    pub elem: ElemType,
    pub tolerance: Tolerance,
}

/// Counts the bytes of `n` at `a` that differ from `b` (a region of `n` bytes, or with
/// `pattern` a pattern of that many bytes repeated).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DifferJob {
    pub a: u64,
    pub b: u64,
    pub n: u64,
    pub pattern: Option<u64>,
}

/// Differing bytes of a region and the first one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Difference {
    pub count: u64,
    pub first: u64,
}

pub(crate) struct GateKernels {
    _module: Module,
    fill: Function,
    absmax: Function,
    compare: Function,
    differ: Function,
}

const THREADS: u32 = 256;

/// Blocks per job: enough to cover `n` elements four per thread, at most 2048 (the
/// kernels stride over the rest).
fn dims(jobs: usize, max_n: u64) -> LaunchDims {
    let x = max_n.div_ceil(4 * THREADS as u64).clamp(1, 2048) as u32;
    LaunchDims {
        grid: [x, jobs as u32, 1],
        block: [THREADS, 1, 1],
        shared_bytes: 0,
    }
}

impl GateKernels {
    pub fn load(gpu: &Gpu, cubin: &[u8]) -> Result<GateKernels, CudaError> {
        let module = gpu.load_module(cubin)?;
        Ok(GateKernels {
            fill: module.function("evo_fill")?,
            absmax: module.function("evo_absmax")?,
            compare: module.function("evo_compare")?,
            differ: module.function("evo_differ")?,
            _module: module,
        })
    }

    /// Launches `f` over `jobs` (packed), waiting for it: the job array lives in a device
    /// buffer freed on return.
    fn run(
        &self,
        gpu: &Gpu,
        f: &Function,
        packed: &[u8],
        jobs: usize,
        max_n: u64,
    ) -> Result<(), CudaError> {
        if jobs == 0 {
            return Ok(());
        }
        let table = gpu.alloc(packed.len())?;
        gpu.upload(&table, packed)?;
        gpu.launch(f, &dims(jobs, max_n), &[KernelArg::Ptr(table.ptr())])?;
        gpu.synchronize()
    }

    pub fn fill(&self, gpu: &Gpu, jobs: &[FillJob]) -> Result<(), CudaError> {
        let mut packed = Vec::with_capacity(jobs.len() * 40);
        for j in jobs {
            let (kind, a, b) = match j.fill {
                Fill::Normal(sd) => (0i32, sd, 0.0f32),
                Fill::Uniform(lo, hi) => (1, lo, hi),
            };
            packed.extend(j.ptr.to_le_bytes());
            packed.extend(j.n.to_le_bytes());
            packed.extend(j.seed.to_le_bytes());
            packed.extend(elem_code(j.elem).to_le_bytes());
            packed.extend(kind.to_le_bytes());
            packed.extend(a.to_le_bytes());
            packed.extend(b.to_le_bytes());
        }
        let max_n = jobs.iter().map(|j| j.n).max().unwrap_or(0);
        self.run(gpu, &self.fill, &packed, jobs.len(), max_n)
    }

    /// Every job's error statistics, by the rule of `compare::compare`.
    pub fn compare(&self, gpu: &Gpu, jobs: &[CompareJob]) -> Result<Vec<ErrorStats>, CudaError> {
        const STATS: usize = 48;
        let stats = gpu.alloc(jobs.len().max(1) * STATS)?;
        let mut init = Vec::with_capacity(jobs.len() * STATS);
        for _ in jobs {
            init.extend(0u64.to_le_bytes());
            init.extend(0u64.to_le_bytes());
            init.extend(u64::MAX.to_le_bytes());
            init.extend([0u8; 24]);
        }
        if !jobs.is_empty() {
            gpu.upload(&stats, &init)?;
        }
        let mut packed = Vec::with_capacity(jobs.len() * 56);
        for (i, j) in jobs.iter().enumerate() {
            packed.extend(j.got.to_le_bytes());
            packed.extend(j.reference.to_le_bytes());
            packed.extend(j.n.to_le_bytes());
            packed.extend((stats.ptr() + (i * STATS) as u64).to_le_bytes());
            packed.extend(elem_code(j.elem).to_le_bytes());
            packed.extend(0i32.to_le_bytes());
            packed.extend((j.tolerance.rtol as f32).to_le_bytes());
            packed.extend((j.tolerance.atol_of_max as f32).to_le_bytes());
            packed.extend((j.tolerance.atol_floor as f32).to_le_bytes());
            packed.extend(0f32.to_le_bytes());
        }
        let max_n = jobs.iter().map(|j| j.n).max().unwrap_or(0);
        self.run(gpu, &self.absmax, &packed, jobs.len(), max_n)?;
        self.run(gpu, &self.compare, &packed, jobs.len(), max_n)?;
        let raw = if jobs.is_empty() {
            Vec::new()
        } else {
            gpu.download(&stats)?
        };
        Ok(raw
            .chunks(STATS)
            .take(jobs.len())
            .map(|c| {
                let u64_at = |o: usize| u64::from_le_bytes(c[o..o + 8].try_into().expect("8"));
                let f64_at = |o: usize| f64::from_le_bytes(c[o..o + 8].try_into().expect("8"));
                let f32_at = |o: usize| {
                    f32::from_bits(u32::from_le_bytes(c[o..o + 4].try_into().expect("4"))) as f64
                };
                let (not_finite, bad, first) = (u64_at(0), u64_at(8), u64_at(16));
                let (err2, ref2) = (f64_at(24), f64_at(32));
                ErrorStats {
                    max_abs: f32_at(40),
                    rel_l2: if not_finite > 0 {
                        f64::INFINITY
                    } else if ref2 > 0.0 {
                        (err2 / ref2).sqrt()
                    } else if err2 > 0.0 {
                        f64::INFINITY
                    } else {
                        0.0
                    },
                    bad,
                    first_bad: (first != u64::MAX).then_some(first as usize),
                    nan: not_finite,
                    inf: 0,
                    max_ref: f32_at(44),
                }
            })
            .collect())
    }

    pub fn differ(&self, gpu: &Gpu, jobs: &[DifferJob]) -> Result<Vec<Difference>, CudaError> {
        let out = gpu.alloc(jobs.len().max(1) * 16)?;
        let mut init = Vec::with_capacity(jobs.len() * 16);
        for _ in jobs {
            init.extend(0u64.to_le_bytes());
            init.extend(u64::MAX.to_le_bytes());
        }
        if !jobs.is_empty() {
            gpu.upload(&out, &init)?;
        }
        let mut packed = Vec::with_capacity(jobs.len() * 40);
        for (i, j) in jobs.iter().enumerate() {
            packed.extend(j.a.to_le_bytes());
            packed.extend(j.b.to_le_bytes());
            packed.extend(j.n.to_le_bytes());
            packed.extend(j.pattern.unwrap_or(0).to_le_bytes());
            packed.extend((out.ptr() + (i * 16) as u64).to_le_bytes());
        }
        let max_n = jobs.iter().map(|j| j.n).max().unwrap_or(0);
        self.run(gpu, &self.differ, &packed, jobs.len(), max_n)?;
        let raw = if jobs.is_empty() {
            Vec::new()
        } else {
            gpu.download(&out)?
        };
        Ok(raw
            .chunks(16)
            .take(jobs.len())
            .map(|c| Difference {
                count: u64::from_le_bytes(c[..8].try_into().expect("8")),
                first: u64::from_le_bytes(c[8..].try_into().expect("8")),
            })
            .collect())
    }
}

/// The host copy of `evo_fill`'s generator (splitmix64 of seed and index, Irwin-Hall
/// normal or uniform), bit for bit: what the GPU writes for element `i`, before rounding
/// to the element type.
pub fn fill_value(seed: u64, i: u64, fill: Fill) -> f32 {
    fn mix(mut x: u64) -> u64 {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }
    let h = mix(seed ^ mix(i));
    match fill {
        Fill::Normal(sd) => {
            let s = (h & 0xffff) + ((h >> 16) & 0xffff) + ((h >> 32) & 0xffff) + (h >> 48);
            (s as f32 - 131070.0) * (1.0 / 37837.23) * sd
        }
        Fill::Uniform(lo, hi) => lo + (hi - lo) * ((h >> 40) as f32 * (1.0 / 16777216.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generator's values are what its name says: unit variance, centred, bounded;
    /// uniform within its range; different per seed and index.
    #[test]
    fn fill_values_have_the_stated_distribution() {
        let n = 200_000u64;
        let xs: Vec<f64> = (0..n)
            .map(|i| fill_value(7, i, Fill::Normal(2.0)) as f64)
            .collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(
            mean.abs() < 0.02 && (var - 4.0).abs() < 0.05,
            "{mean} {var}"
        );
        assert!(xs.iter().all(|x| x.abs() < 2.0 * 3.47));
        let us: Vec<f32> = (0..n)
            .map(|i| fill_value(7, i, Fill::Uniform(0.5, 1.5)))
            .collect();
        assert!(us.iter().all(|u| (0.5..1.5).contains(u)));
        let mean = us.iter().map(|&u| u as f64).sum::<f64>() / n as f64;
        assert!((mean - 1.0).abs() < 0.01, "{mean}");
        assert_ne!(
            fill_value(7, 3, Fill::Normal(1.0)),
            fill_value(8, 3, Fill::Normal(1.0))
        );
        assert_ne!(
            fill_value(7, 3, Fill::Normal(1.0)),
            fill_value(7, 4, Fill::Normal(1.0))
        );
    }

    /// The kernels compile with the pinned NVRTC (CI has no GPU to find out later).
    #[test]
    fn gate_kernels_compile() {
        let compiler = evo_gpu::Compiler::new("sm_90a", &["-std=c++17".to_string()], 0, None)
            .expect("NVRTC 13.0 (scripts/install-cuda.sh)");
        let out = compiler
            .compile(&evo_gpu::CompileRequest {
                name: "evo_gate_kernels.cu".into(),
                source: SOURCE.into(),
            })
            .unwrap();
        assert!(out.success, "{}", out.log);
        for k in ["evo_fill", "evo_absmax", "evo_compare", "evo_differ"] {
            assert!(out.kernel(k).is_some(), "no kernel {k}");
        }
    }

    #[test]
    fn blocks_cover_every_job_and_element() {
        let d = dims(3, 10_000);
        assert_eq!(d.grid, [10, 3, 1]);
        assert_eq!(dims(1, 0).grid[0], 1);
        assert_eq!(dims(64, 1 << 30).grid, [2048, 64, 1]);
    }
}
