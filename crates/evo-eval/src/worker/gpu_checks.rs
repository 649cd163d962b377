//! The worker's own kernels (`gate_kernels.cu`): the inputs of correctness trials and fresh
//! inputs for every timing replay, written straight into a call's layout; poison and padding
//! patterns; the comparison of an output with its reference; byte checks of inputs, guard
//! regions and repeat launches. All on the GPU, so the host reads a few numbers per check.
//! Jobs are packed on the host in the C layout of the structs in `gate_kernels.cu`.

use evo_core::LaunchDims;
use evo_gpu::runtime::{CudaError, DeviceBuffer, Function, Gpu, KernelArg, Module};
use evo_kernels::harness::{ElemType, Fill, InputFill, Layout, Tolerance};

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

/// `MAX_RANK` of `gate_kernels.cu`: the most dimensions of a layout the kernels take.
pub(crate) const MAX_RANK: usize = 6;

/// Writes `n` logical elements of `elem` at `ptr` with `fill`'s values, element `i` at
/// `layout`'s offset of `i` (`None`: at `i`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FillJob<'a> {
    pub ptr: u64,
    pub n: u64,
    pub elem: ElemType,
    pub fill: InputFill,
    pub layout: Option<&'a Layout>,
}

impl FillJob<'_> {
    /// `n` contiguous elements of a counter-based `fill` from `seed` (timing inputs).
    pub fn counter(ptr: u64, n: u64, elem: ElemType, seed: u64, fill: Fill) -> FillJob<'static> {
        FillJob {
            ptr,
            n,
            elem,
            fill: InputFill::Counter { seed, fill },
            layout: None,
        }
    }
}

/// Writes the bytes of one `elem` element, `pattern`, at each of `n` logical elements of
/// `layout` (`None`: at each of `n` element slots).
#[derive(Clone, Debug)]
pub(crate) struct PatternJob<'a> {
    pub ptr: u64,
    pub n: u64,
    pub pattern: Vec<u8>,
    pub layout: Option<&'a Layout>,
}

/// Compares `n` logical elements of `elem` at `got` (in `layout`, `None`: contiguous) with
/// the float32 reference at `reference` (contiguous).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CompareJob<'a> {
    pub got: u64,
    pub reference: u64,
    pub n: u64,
    pub elem: ElemType,
    pub tolerance: Tolerance,
    pub layout: Option<&'a Layout>,
}

/// Counts the units of `unit` bytes of the `n` bytes at `a` that differ from `b` (a
/// region of `n` bytes, or with `pattern` a pattern of that many bytes repeated).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DifferJob {
    pub a: u64,
    pub b: u64,
    pub n: u64,
    pub pattern: Option<u64>,
    pub unit: u64,
}

impl DifferJob {
    /// Bytes of `n` at `a` that differ from the `n` at `b`.
    pub fn bytes(a: u64, b: u64, n: u64) -> DifferJob {
        DifferJob {
            a,
            b,
            n,
            pattern: None,
            unit: 1,
        }
    }
}

/// Differing units of a region and the first one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Difference {
    pub count: u64,
    pub first: u64,
}

/// A comparison's statistics and whether its reference was finite everywhere.
#[derive(Clone, Debug)]
pub(crate) struct Compared {
    pub stats: ErrorStats,
    /// Elements of the reference that are NaN or Inf.
    pub reference_not_finite: u64,
}

/// Why a check on the GPU could not run: a CUDA error, or a job its kernels cannot take.
#[derive(Debug)]
pub(crate) enum GateError {
    Cuda(CudaError),
    Job(String),
}

impl From<CudaError> for GateError {
    fn from(e: CudaError) -> Self {
        GateError::Cuda(e)
    }
}

impl From<String> for GateError {
    fn from(e: String) -> Self {
        GateError::Job(e)
    }
}

/// Appends `gate_kernels.cu`'s `Strided` for `layout` (rank 0: contiguous).
fn pack_layout(out: &mut Vec<u8>, layout: Option<&Layout>) -> Result<(), String> {
    let (dims, strides): (&[usize], &[usize]) = match layout {
        Some(l) if !l.is_contiguous() => (&l.dims, &l.strides),
        _ => (&[], &[]),
    };
    if dims.len() > MAX_RANK {
        return Err(format!(
            "a layout of {} dimensions (the worker's kernels take at most {MAX_RANK})",
            dims.len()
        ));
    }
    for list in [dims, strides] {
        for k in 0..MAX_RANK {
            out.extend((list.get(k).copied().unwrap_or(0) as u64).to_le_bytes());
        }
    }
    out.extend((dims.len() as i32).to_le_bytes());
    out.extend(0i32.to_le_bytes());
    Ok(())
}

pub(crate) struct GateKernels {
    _module: Module,
    fill: Function,
    pattern: Function,
    absmax: Function,
    compare: Function,
    differ: Function,
    checksum: Function,
    /// Device buffers for job tables and results, kept between calls (an allocation and
    /// its free, which synchronises the device, on every check cost more than the check).
    tables: std::cell::RefCell<Option<DeviceBuffer>>,
    results: std::cell::RefCell<Option<DeviceBuffer>>,
    /// The pattern of `differ_from_pattern`.
    pattern_bytes: std::cell::RefCell<Option<DeviceBuffer>>,
}

/// `slot`'s buffer, grown to at least `bytes`.
fn grown<'a>(
    gpu: &Gpu,
    slot: &'a std::cell::RefCell<Option<DeviceBuffer>>,
    bytes: usize,
) -> Result<std::cell::RefMut<'a, Option<DeviceBuffer>>, CudaError> {
    let mut b = slot.borrow_mut();
    if b.as_ref().is_none_or(|d| d.bytes() < bytes) {
        *b = None;
        *b = Some(gpu.alloc(bytes.max(4096))?);
    }
    Ok(b)
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
            pattern: module.function("evo_pattern")?,
            absmax: module.function("evo_absmax")?,
            compare: module.function("evo_compare")?,
            differ: module.function("evo_differ")?,
            checksum: module.function("evo_checksum")?,
            _module: module,
            tables: Default::default(),
            results: Default::default(),
            pattern_bytes: Default::default(),
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
        let table = grown(gpu, &self.tables, packed.len())?;
        let table = table.as_ref().expect("grown");
        gpu.upload_at(table, 0, packed)?;
        gpu.launch(f, &dims(jobs, max_n), &[KernelArg::Ptr(table.ptr())])?;
        gpu.synchronize()
    }

    pub fn fill(&self, gpu: &Gpu, jobs: &[FillJob]) -> Result<(), GateError> {
        let mut packed = Vec::with_capacity(jobs.len() * 168);
        for j in jobs {
            // (kind, a, b, seed, cols, seq, tensor) of gate_kernels.cu's FillJob.
            let (kind, a, b, seed, cols, seq, tensor) = match j.fill {
                InputFill::Counter {
                    seed,
                    fill: Fill::Normal(sd),
                } => (0i32, sd, 0.0f32, seed, 1u64, 1u64, 0i32),
                InputFill::Counter {
                    seed,
                    fill: Fill::Uniform(lo, hi),
                } => (1, lo, hi, seed, 1, 1, 0),
                InputFill::Zeros => (2, 0.0, 0.0, 0, 1, 1, 0),
                InputFill::OneHot { seed, cols } => (3, 0.0, 0.0, seed, cols.max(1) as u64, 1, 0),
                InputFill::AttentionRows {
                    seed,
                    tensor,
                    seq,
                    head_dim,
                    very_negative,
                } => (
                    4,
                    very_negative,
                    0.0,
                    seed,
                    head_dim.max(1) as u64,
                    seq.max(1) as u64,
                    tensor as i32,
                ),
            };
            for v in [j.ptr, j.n, seed, cols, seq] {
                packed.extend(v.to_le_bytes());
            }
            packed.extend(elem_code(j.elem).to_le_bytes());
            packed.extend(kind.to_le_bytes());
            packed.extend(tensor.to_le_bytes());
            packed.extend(0i32.to_le_bytes());
            packed.extend(a.to_le_bytes());
            packed.extend(b.to_le_bytes());
            pack_layout(&mut packed, j.layout)?;
        }
        let max_n = jobs.iter().map(|j| j.n).max().unwrap_or(0);
        Ok(self.run(gpu, &self.fill, &packed, jobs.len(), max_n)?)
    }

    pub fn pattern(&self, gpu: &Gpu, jobs: &[PatternJob]) -> Result<(), GateError> {
        let mut packed = Vec::with_capacity(jobs.len() * 128);
        for j in jobs {
            if j.pattern.is_empty() || j.pattern.len() > 4 {
                return Err(GateError::Job(format!(
                    "a pattern of {} bytes (1 to 4)",
                    j.pattern.len()
                )));
            }
            let mut word = [0u8; 4];
            word[..j.pattern.len()].copy_from_slice(&j.pattern);
            packed.extend(j.ptr.to_le_bytes());
            packed.extend(j.n.to_le_bytes());
            packed.extend(word);
            packed.extend((j.pattern.len() as i32).to_le_bytes());
            pack_layout(&mut packed, j.layout)?;
        }
        let max_n = jobs.iter().map(|j| j.n).max().unwrap_or(0);
        Ok(self.run(gpu, &self.pattern, &packed, jobs.len(), max_n)?)
    }

    /// Every job's error statistics, by the rule of `compare::compare`.
    pub fn compare(&self, gpu: &Gpu, jobs: &[CompareJob]) -> Result<Vec<Compared>, GateError> {
        const STATS: usize = 64;
        let stats = grown(gpu, &self.results, jobs.len().max(1) * STATS)?;
        let stats = stats.as_ref().expect("grown");
        let mut init = Vec::with_capacity(jobs.len() * STATS);
        for _ in jobs {
            init.extend(0u64.to_le_bytes());
            init.extend(0u64.to_le_bytes());
            init.extend(u64::MAX.to_le_bytes());
            init.extend([0u8; 40]);
        }
        if !jobs.is_empty() {
            gpu.upload_at(stats, 0, &init)?;
        }
        let mut packed = Vec::with_capacity(jobs.len() * 168);
        for (i, j) in jobs.iter().enumerate() {
            packed.extend(j.got.to_le_bytes());
            packed.extend(j.reference.to_le_bytes());
            packed.extend(j.n.to_le_bytes());
            packed.extend((stats.ptr() + (i * STATS) as u64).to_le_bytes());
            packed.extend(elem_code(j.elem).to_le_bytes());
            packed.extend(0i32.to_le_bytes());
            packed.extend(j.tolerance.rtol.to_le_bytes());
            packed.extend(j.tolerance.atol_of_max.to_le_bytes());
            packed.extend(j.tolerance.atol_floor.to_le_bytes());
            pack_layout(&mut packed, j.layout)?;
        }
        let max_n = jobs.iter().map(|j| j.n).max().unwrap_or(0);
        self.run(gpu, &self.absmax, &packed, jobs.len(), max_n)?;
        self.run(gpu, &self.compare, &packed, jobs.len(), max_n)?;
        let raw = if jobs.is_empty() {
            Vec::new()
        } else {
            gpu.download_at(stats, 0, jobs.len() * STATS)?
        };
        Ok(raw
            .chunks(STATS)
            .take(jobs.len())
            .map(|c| {
                let u64_at = |o: usize| u64::from_le_bytes(c[o..o + 8].try_into().expect("8"));
                let f64_at = |o: usize| f64::from_bits(u64_at(o));
                let (not_finite, bad, first) = (u64_at(0), u64_at(8), u64_at(16));
                let (err2, ref2) = (f64_at(32), f64_at(40));
                let max_ref =
                    f32::from_bits(u32::from_le_bytes(c[56..60].try_into().expect("4"))) as f64;
                Compared {
                    stats: ErrorStats {
                        max_abs: f64_at(48),
                        rel_l2: crate::compare::relative_l2(err2, ref2, not_finite),
                        bad,
                        first_bad: (first != u64::MAX).then_some(first as usize),
                        nan: not_finite,
                        inf: 0,
                        max_ref,
                    },
                    reference_not_finite: u64_at(24),
                }
            })
            .collect())
    }

    /// Units of `unit` bytes of each region (address, bytes) that differ from `pattern`
    /// repeated (1 to 64 bytes).
    pub fn differ_from_pattern(
        &self,
        gpu: &Gpu,
        regions: &[(u64, u64)],
        pattern: &[u8],
        unit: u64,
    ) -> Result<Vec<Difference>, CudaError> {
        let held = grown(gpu, &self.pattern_bytes, pattern.len().max(1))?;
        let held = held.as_ref().expect("grown");
        gpu.upload_at(held, 0, pattern)?;
        let jobs: Vec<DifferJob> = regions
            .iter()
            .map(|&(a, n)| DifferJob {
                a,
                b: held.ptr(),
                n,
                pattern: Some(pattern.len() as u64),
                unit,
            })
            .collect();
        self.differ(gpu, &jobs)
    }

    pub fn differ(&self, gpu: &Gpu, jobs: &[DifferJob]) -> Result<Vec<Difference>, CudaError> {
        let out = grown(gpu, &self.results, jobs.len().max(1) * 16)?;
        let out = out.as_ref().expect("grown");
        let mut init = Vec::with_capacity(jobs.len() * 16);
        for _ in jobs {
            init.extend(0u64.to_le_bytes());
            init.extend(u64::MAX.to_le_bytes());
        }
        if !jobs.is_empty() {
            gpu.upload_at(out, 0, &init)?;
        }
        let mut packed = Vec::with_capacity(jobs.len() * 48);
        for (i, j) in jobs.iter().enumerate() {
            packed.extend(j.a.to_le_bytes());
            packed.extend(j.b.to_le_bytes());
            packed.extend(j.n.to_le_bytes());
            packed.extend(j.pattern.unwrap_or(0).to_le_bytes());
            packed.extend((out.ptr() + (i * 16) as u64).to_le_bytes());
            packed.extend(j.unit.max(1).to_le_bytes());
        }
        let max_n = jobs.iter().map(|j| j.n).max().unwrap_or(0);
        self.run(gpu, &self.differ, &packed, jobs.len(), max_n)?;
        let raw = if jobs.is_empty() {
            Vec::new()
        } else {
            gpu.download_at(out, 0, jobs.len() * 16)?
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

    /// The `evo_checksum` of each region (address, bytes).
    pub fn checksum(&self, gpu: &Gpu, regions: &[(u64, u64)]) -> Result<Vec<u64>, CudaError> {
        if regions.is_empty() {
            return Ok(Vec::new());
        }
        let out = grown(gpu, &self.results, regions.len() * 8)?;
        let out = out.as_ref().expect("grown");
        gpu.upload_at(out, 0, &vec![0u8; regions.len() * 8])?;
        let mut packed = Vec::with_capacity(regions.len() * 24);
        for (i, &(ptr, n)) in regions.iter().enumerate() {
            packed.extend(ptr.to_le_bytes());
            packed.extend(n.to_le_bytes());
            packed.extend((out.ptr() + (i * 8) as u64).to_le_bytes());
        }
        let words = regions.iter().map(|r| r.1.div_ceil(8)).max().unwrap_or(0);
        self.run(gpu, &self.checksum, &packed, regions.len(), words)?;
        Ok(gpu
            .download_at(out, 0, regions.len() * 8)?
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
            .collect())
    }
}

#[cfg(test)]
/// For GPU tests: GPU 0 with the gate kernels loaded, or `None` (said) where there is none.
pub(super) fn gpu_with_kernels() -> Option<(Gpu, GateKernels)> {
    let gpu = match Gpu::open(0) {
        Ok(g) => g,
        Err(e) => {
            println!("skipping: no GPU ({e})");
            return None;
        }
    };
    let (major, minor) = gpu.info.compute_capability;
    let arch = evo_core::Target::arch_for_capability(major, minor);
    let compiled = evo_gpu::Compiler::new(&arch, &["-std=c++17".to_string()], 0, None)
        .unwrap()
        .compile(&evo_gpu::CompileRequest {
            name: "evo_gate_kernels.cu".into(),
            source: SOURCE.into(),
        })
        .unwrap();
    assert!(compiled.success, "{}", compiled.log);
    let kernels = GateKernels::load(&gpu, &compiled.cubin.unwrap()).unwrap();
    Some((gpu, kernels))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `evo_checksum` of `bytes`, on the host: the wrapping sum over 8-byte little-endian words
    /// (the last zero-padded) of mix(word ^ mix(index)).
    fn checksum_of(bytes: &[u8]) -> u64 {
        use evo_kernels::harness::mix;
        bytes
            .chunks(8)
            .enumerate()
            .map(|(i, c)| {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                mix(u64::from_le_bytes(w) ^ mix(i as u64))
            })
            .fold(0u64, u64::wrapping_add)
    }

    use evo_kernels::harness::counter_value as fill_value;
    use evo_kernels::harness::HostTensor;

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
        for k in [
            "evo_fill",
            "evo_pattern",
            "evo_absmax",
            "evo_compare",
            "evo_differ",
            "evo_checksum",
        ] {
            assert!(out.kernel(k).is_some(), "no kernel {k}");
        }
    }

    /// Every problem's reference kernels compile with the pinned NVRTC for sm_90a, without
    /// spills and within the 48 KB of static shared memory a launch gets without opting in.
    #[test]
    fn reference_kernels_compile_without_spills() {
        let compiler = evo_gpu::Compiler::new("sm_90a", &["-std=c++17".to_string()], 0, None)
            .expect("NVRTC 13.0 (scripts/install-cuda.sh)");
        let mut seen = std::collections::BTreeSet::new();
        for p in evo_kernels::problems() {
            let shape = p
                .complete_shape(
                    &p.shape_vars()
                        .iter()
                        .chain(p.spec_vars())
                        .map(|d| (d.name.to_string(), d.probe_value()))
                        .collect(),
                )
                .unwrap();
            let Some(r) = p.reference(&shape, &p.default_call(&shape)) else {
                continue;
            };
            if !seen.insert(r.source) {
                continue;
            }
            let out = compiler
                .compile(&evo_gpu::CompileRequest {
                    name: format!("{}_reference.cu", p.name()),
                    source: r.source.into(),
                })
                .unwrap();
            assert!(out.success, "{}: {}", p.name(), out.log);
            assert!(!out.kernels.is_empty(), "{}", p.name());
            for k in &out.kernels {
                assert!(!k.spills(), "{} spills: {k:?}", k.name);
                assert!(k.static_smem_bytes <= 48 << 10, "{k:?}");
            }
            assert!(out.kernel(&r.entry).is_some(), "no kernel {}", r.entry);
        }
        assert!(seen.len() >= 3, "{seen:?}");
    }

    fn sdpa_shape() -> evo_core::Vars {
        evo_kernels::problem("sdpa_fwd")
            .unwrap()
            .complete_shape(
                &[
                    ("BATCH", 2),
                    ("HEADS", 3),
                    ("SEQ_Q", 77),
                    ("SEQ_KV", 130),
                    ("HEAD_DIM", 64),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.into()))
                .collect(),
            )
            .unwrap()
    }

    /// On a GPU: inputs written by `evo_fill` into strided layouts (NaN padding by
    /// `evo_pattern`) are the bytes the host generates and scatters, for every kind the
    /// problems give as fills, in f16 and bf16.
    #[test]
    fn gpu_fills_are_the_host_inputs_bit_for_bit() {
        let Some((gpu, gate)) = gpu_with_kernels() else {
            return;
        };
        let mut checked = 0;
        for (name, dtype) in [("sdpa_fwd", "f16"), ("sdpa_fwd", "bf16"), ("gemm", "bf16")] {
            let p = evo_kernels::problem(name).unwrap();
            let mut vars = if name == "gemm" {
                p.complete_shape(
                    &[("M", 33), ("N", 17), ("K", 24)]
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v.into()))
                        .collect(),
                )
                .unwrap()
            } else {
                sdpa_shape()
            };
            vars.insert("DTYPE".into(), evo_core::Value::Str(dtype.into()));
            for (kind, seed) in [evo_kernels::harness::InputKind::Random]
                .into_iter()
                .chain(evo_kernels::harness::InputKind::ADVERSARIAL)
                .zip(7..)
            {
                let call = p.varied_call(&vars, seed, &[]);
                let Some(fills) = p.input_fills(&vars, &call, kind, seed) else {
                    continue;
                };
                let host = p.generate(&vars, &call, kind, seed);
                for (((fill, h), layout), spec) in fills
                    .iter()
                    .zip(&host)
                    .zip(&call.layouts)
                    .zip(p.inputs(&vars))
                {
                    let want = layout.scatter(h, &h.elem.nan_bytes());
                    let buf = gpu.alloc(want.bytes.len()).unwrap();
                    gpu.memset_u8(&buf, 0x11).unwrap();
                    gate.pattern(
                        &gpu,
                        &[PatternJob {
                            ptr: buf.ptr(),
                            n: layout.len as u64,
                            pattern: spec.elem.nan_bytes(),
                            layout: None,
                        }],
                    )
                    .unwrap();
                    gate.fill(
                        &gpu,
                        &[FillJob {
                            ptr: buf.ptr(),
                            n: layout.elements() as u64,
                            elem: spec.elem,
                            fill: *fill,
                            layout: Some(layout),
                        }],
                    )
                    .unwrap();
                    let got = gpu.download(&buf).unwrap();
                    assert!(
                        got == want.bytes,
                        "{name} {dtype} {kind:?} input {}: the GPU's bytes differ from the host's ({})",
                        spec.name,
                        layout.describe()
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked >= 20, "{checked}");
    }

    /// On a GPU: `evo_compare` over a strided output gives the CPU rule's statistics
    /// (`compare::compare` on the gathered tensor): bad count, first bad element, NaN
    /// count, max abs error exactly, relative L2 to rounding; a non-finite reference is
    /// counted.
    #[test]
    fn gpu_comparison_is_the_cpu_rule() {
        let Some((gpu, gate)) = gpu_with_kernels() else {
            return;
        };
        let p = evo_kernels::problem("sdpa_fwd").unwrap();
        let vars = sdpa_shape();
        let call = (0..32)
            .map(|seed| p.varied_call(&vars, seed, &[]))
            .find(|c| !c.output().is_contiguous())
            .expect("a strided output among 32 calls");
        let layout = call.output();
        let n = layout.elements();
        let tol = Tolerance {
            rtol: 5e-3,
            atol_of_max: 1e-3,
            atol_floor: 1e-5,
            rel_l2: 5e-3,
        };
        let reference: Vec<f32> = evo_kernels::harness::normal_values(3, 0, n, 1.0);
        for planted in [
            vec![],
            vec![(5usize, 0.5f32)],
            vec![(n - 1, f32::NAN), (40, 0.02), (41, 1e-6)],
        ] {
            let mut values = reference.clone();
            for &(i, dv) in &planted {
                values[i] = if dv.is_nan() { dv } else { values[i] + dv };
            }
            let logical = HostTensor::from_f32(ElemType::F16, &values);
            let laid = layout.scatter(&logical, &ElemType::F16.nan_bytes());
            let got = gpu.alloc(laid.bytes.len()).unwrap();
            gpu.upload(&got, &laid.bytes).unwrap();
            let r = gpu.alloc(n * 4).unwrap();
            let ref_bytes: Vec<u8> = reference.iter().flat_map(|x| x.to_le_bytes()).collect();
            gpu.upload(&r, &ref_bytes).unwrap();
            let gpu_stats = gate
                .compare(
                    &gpu,
                    &[CompareJob {
                        got: got.ptr(),
                        reference: r.ptr(),
                        n: n as u64,
                        elem: ElemType::F16,
                        tolerance: tol,
                        layout: Some(layout),
                    }],
                )
                .unwrap()
                .remove(0);
            let cpu = crate::compare::compare(&logical, &reference, &tol);
            let g = gpu_stats.stats;
            assert_eq!(gpu_stats.reference_not_finite, 0);
            assert_eq!(
                (g.bad, g.first_bad, g.nan + g.inf),
                (cpu.bad, cpu.first_bad, cpu.nan + cpu.inf),
                "{planted:?}"
            );
            assert_eq!(g.max_abs, cpu.max_abs, "{planted:?}");
            assert_eq!(g.max_ref, cpu.max_ref);
            assert!(
                (g.rel_l2 - cpu.rel_l2).abs() <= 1e-9 * cpu.rel_l2.max(1e-30)
                    || g.rel_l2 == cpu.rel_l2,
                "{} vs {}",
                g.rel_l2,
                cpu.rel_l2
            );
            assert_eq!(
                crate::compare::verdict(&g, &tol).is_some(),
                !planted.is_empty(),
                "{planted:?}"
            );
        }
        // A reference with an Inf is the evaluator's failure.
        let mut bad_ref = reference.clone();
        bad_ref[9] = f32::INFINITY;
        let r = gpu.alloc(n * 4).unwrap();
        gpu.upload(
            &r,
            &bad_ref
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let c = gate
            .compare(
                &gpu,
                &[CompareJob {
                    got: r.ptr(),
                    reference: r.ptr(),
                    n: n as u64,
                    elem: ElemType::F32,
                    tolerance: tol,
                    layout: None,
                }],
            )
            .unwrap();
        assert_eq!(c[0].reference_not_finite, 1);
    }

    /// On a GPU: the padding check's steps (NaN over the elements of a copy, then a
    /// comparison with NaN) find a write into one padding slot and nothing in a clean
    /// buffer; a guard-style pattern comparison names the first changed byte; element
    /// units count elements, not bytes.
    #[test]
    fn gpu_pattern_and_differ_find_padding_writes() {
        let Some((gpu, gate)) = gpu_with_kernels() else {
            return;
        };
        let layout = Layout::new(vec![3, 4], vec![8, 1], 24).unwrap();
        let nan = ElemType::F16.nan_bytes();
        let buf = gpu.alloc(24 * 2).unwrap();
        let check = |poke: Option<usize>| -> Vec<Difference> {
            let mut host: Vec<u8> = nan.repeat(24);
            for i in 0..3 {
                for j in 0..4 {
                    host[(i * 8 + j) * 2..(i * 8 + j) * 2 + 2].copy_from_slice(&[0x00, 0x3c]);
                }
            }
            if let Some(slot) = poke {
                // The high byte: f16 NaN (0x7e00) already has a zero low byte.
                host[slot * 2 + 1] = 0;
            }
            gpu.upload(&buf, &host).unwrap();
            gate.pattern(
                &gpu,
                &[PatternJob {
                    ptr: buf.ptr(),
                    n: 12,
                    pattern: nan.clone(),
                    layout: Some(&layout),
                }],
            )
            .unwrap();
            gate.differ_from_pattern(&gpu, &[(buf.ptr(), 48)], &nan, 2)
                .unwrap()
        };
        assert_eq!(check(None)[0].count, 0);
        let hit = check(Some(13));
        assert_eq!((hit[0].count, hit[0].first), (1, 13));
        // Two bytes changed in one element: one unit.
        let a = gpu.alloc(8).unwrap();
        let b = gpu.alloc(8).unwrap();
        gpu.upload(&a, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        gpu.upload(&b, &[1, 2, 0, 0, 5, 6, 7, 0]).unwrap();
        let d = gate
            .differ(
                &gpu,
                &[
                    DifferJob {
                        unit: 2,
                        ..DifferJob::bytes(a.ptr(), b.ptr(), 8)
                    },
                    DifferJob::bytes(a.ptr(), b.ptr(), 8),
                ],
            )
            .unwrap();
        assert_eq!((d[0].count, d[0].first), (2, 1));
        assert_eq!((d[1].count, d[1].first), (3, 2));
    }

    /// On a GPU: regions compared 16 bytes at a time (aligned, whole words) count every
    /// differing byte and name the first, as a byte-by-byte comparison on the host does,
    /// wherever the bytes lie in their word, and across many blocks.
    #[test]
    fn gpu_differ_counts_every_byte_of_wide_regions() {
        let Some((gpu, gate)) = gpu_with_kernels() else {
            return;
        };
        let n = 3 << 20;
        let base: Vec<u8> = (0..n).map(|i| (i * 7 + i / 251) as u8).collect();
        let a = gpu.alloc(n).unwrap();
        let b = gpu.alloc(n).unwrap();
        gpu.upload(&a, &base).unwrap();
        for pokes in [
            vec![],
            vec![n - 1],
            vec![5, 6, 7, 8, 1 << 20, (1 << 20) + 15, n - 16],
            vec![2 * (1 << 20) + 3, 17, 16],
        ] {
            let mut other = base.clone();
            for &i in &pokes {
                other[i] ^= 0x80;
            }
            gpu.upload(&b, &other).unwrap();
            let d = gate
                .differ(&gpu, &[DifferJob::bytes(a.ptr(), b.ptr(), n as u64)])
                .unwrap();
            let first = pokes.iter().min().map_or(u64::MAX, |&i| i as u64);
            assert_eq!(
                (d[0].count, d[0].first),
                (pokes.len() as u64, first),
                "{pokes:?}"
            );
            // The same bytes against a repeated pattern (a guard region's check): one byte,
            // and two (an f16 NaN) repeated.
            for pattern in [vec![0xA5u8], vec![0x00, 0x7e]] {
                let mut region: Vec<u8> = pattern.iter().copied().cycle().take(n).collect();
                for &i in &pokes {
                    region[i] ^= 0x80;
                }
                gpu.upload(&b, &region).unwrap();
                let d = gate
                    .differ_from_pattern(&gpu, &[(b.ptr(), n as u64)], &pattern, 1)
                    .unwrap();
                assert_eq!(
                    (d[0].count, d[0].first),
                    (pokes.len() as u64, first),
                    "{pokes:?} against {pattern:?}"
                );
            }
        }
    }

    /// On a GPU: `evo_checksum` is the host's `checksum_of` for aligned and ragged regions
    /// and unaligned starts, over many blocks, and a single changed bit anywhere changes it.
    #[test]
    fn gpu_checksum_is_the_host_rule_and_sees_one_bit() {
        let Some((gpu, gate)) = gpu_with_kernels() else {
            return;
        };
        let n = (5 << 20) + 13;
        let mut bytes: Vec<u8> = (0..n).map(|i| (i * 31 + i / 509) as u8).collect();
        let b = gpu.alloc(n).unwrap();
        gpu.upload(&b, &bytes).unwrap();
        let regions = [(b.ptr(), n as u64), (b.ptr() + 3, 1001), (b.ptr() + 8, 64)];
        let got = gate.checksum(&gpu, &regions).unwrap();
        let want: Vec<u64> = [(0, n), (3, 1001), (8, 64)]
            .iter()
            .map(|&(at, len)| checksum_of(&bytes[at..at + len]))
            .collect();
        assert_eq!(got, want);
        for poke in [0, 4097, n - 1] {
            bytes[poke] ^= 0x10;
            gpu.upload(&b, &bytes).unwrap();
            let changed = gate.checksum(&gpu, &[(b.ptr(), n as u64)]).unwrap()[0];
            assert_eq!(changed, checksum_of(&bytes), "byte {poke}");
            assert_ne!(
                changed, want[0],
                "byte {poke} changed, the checksum did not"
            );
            bytes[poke] ^= 0x10;
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
