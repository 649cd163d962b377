//! Device buffers of one call, each inside guard regions, and the binding of argument
//! slots to their addresses.

use evo_core::Vars;
use evo_gpu::runtime::{CudaError, DeviceBuffer, Gpu, KernelArg};
use evo_kernels::harness::{ArgSlot, ElemType, Layout, MappedBuffer, TensorSpec};
use evo_kernels::Problem;

use super::gpu_checks::GateKernels;
use crate::compare::GUARD_BYTE;
use crate::protocol::CheckFailure;

/// A device buffer of `len` payload bytes between two guard regions of `guard` bytes
/// holding [`GUARD_BYTE`]: a kernel that writes near its buffer but outside it changes a
/// guard (a write far away faults, or is memcheck's to find).
pub(crate) struct Guarded {
    buffer: DeviceBuffer,
    guard: usize,
    len: usize,
}

impl Guarded {
    pub fn alloc(gpu: &Gpu, len: usize, guard: usize) -> Result<Guarded, CudaError> {
        let buffer = gpu.alloc(2 * guard + len)?;
        gpu.memset_u8(&buffer, GUARD_BYTE)?;
        Ok(Guarded { buffer, guard, len })
    }

    /// The payload's first byte.
    pub fn ptr(&self) -> u64 {
        self.buffer.ptr() + self.guard as u64
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The whole allocation (guards included) and the payload's offset in it.
    pub fn buffer(&self) -> &DeviceBuffer {
        &self.buffer
    }

    pub fn offset(&self) -> usize {
        self.guard
    }

    pub fn upload(&self, gpu: &Gpu, data: &[u8]) -> Result<(), CudaError> {
        assert_eq!(data.len(), self.len, "payload of another size");
        gpu.upload_at(&self.buffer, self.guard, data)
    }

    /// Sets every payload byte to `value`, queued on the stream.
    pub fn fill(&self, gpu: &Gpu, value: u8) -> Result<(), CudaError> {
        gpu.memset_at(&self.buffer, self.guard, self.len, value)
    }

    /// (address, length) of each guard region, for checks on the GPU.
    pub fn guard_regions(&self) -> [(u64, usize); 2] {
        let base = self.buffer.ptr();
        [
            (base, self.guard),
            (base + (self.guard + self.len) as u64, self.guard),
        ]
    }
}

/// Scratch poison: NaN in f16, bf16, f32 and e4m3, so a kernel that reads scratch no earlier
/// kernel wrote yields NaN ...
pub const SCRATCH_NAN: u8 = 0xff;
/// ... unless it reads it through something that drops NaN (`fmaxf`, a NaN test): then this
/// one, large and finite in every element type (f32 and bf16 1.3e36, f16 60,000, e4m3 352,
/// i32 2.07e9), shows (the stale-output trials use it; an artifact's workspace is never
/// initialised either).
pub const SCRATCH_LARGE: u8 = 0x7b;

/// The buffers of one call of a variant: its inputs and output (in the call's layouts) and
/// its scratch, each guarded, with the names messages use.
pub(crate) struct CallBuffers {
    pub inputs: Vec<Guarded>,
    pub output: Guarded,
    pub output_elem: ElemType,
    pub scratch: Vec<Guarded>,
    pub names: Vec<String>,
}

impl CallBuffers {
    /// Buffers for `layouts` (the problem's inputs, then its output) and `scratch`.
    pub fn alloc(
        gpu: &Gpu,
        problem: &dyn Problem,
        vars: &Vars,
        layouts: &[Layout],
        scratch: &[TensorSpec],
        guard: usize,
    ) -> Result<CallBuffers, CudaError> {
        let specs: Vec<TensorSpec> = problem
            .inputs(vars)
            .into_iter()
            .chain([problem.output(vars)])
            .collect();
        let mut tensors = specs
            .iter()
            .zip(layouts)
            .map(|(t, l)| Guarded::alloc(gpu, l.len * t.elem.size(), guard))
            .collect::<Result<Vec<_>, _>>()?;
        let output = tensors.pop().expect("an output layout");
        let scratch_buffers = scratch
            .iter()
            .map(|t| Guarded::alloc(gpu, t.len * t.elem.size(), guard))
            .collect::<Result<Vec<_>, _>>()?;
        let names = specs
            .iter()
            .map(|t| t.name.clone())
            .chain(scratch.iter().map(|t| format!("scratch {}", t.name)))
            .collect();
        Ok(CallBuffers {
            inputs: tensors,
            output,
            output_elem: problem.output(vars).elem,
            scratch: scratch_buffers,
            names,
        })
    }

    /// Every buffer with its name: inputs, the output, scratch.
    pub fn all(&self) -> impl Iterator<Item = (&Guarded, &str)> {
        self.inputs
            .iter()
            .chain([&self.output])
            .chain(&self.scratch)
            .zip(self.names.iter().map(String::as_str))
    }

    /// Fills every scratch buffer with `byte`: [`SCRATCH_NAN`] or [`SCRATCH_LARGE`].
    pub fn poison_scratch(&self, gpu: &Gpu, byte: u8) -> Result<(), CudaError> {
        for b in &self.scratch {
            b.fill(gpu, byte)?;
        }
        Ok(())
    }

    pub fn pointers(&self) -> (Vec<u64>, u64, Vec<u64>) {
        (
            self.inputs.iter().map(Guarded::ptr).collect(),
            self.output.ptr(),
            self.scratch.iter().map(Guarded::ptr).collect(),
        )
    }

    /// Each kernel's arguments bound to these buffers.
    pub fn kernel_args(&self, lists: &[Vec<ArgSlot>]) -> Result<Vec<Vec<KernelArg>>, String> {
        let (inputs, output, scratch) = self.pointers();
        let p = CallPointers {
            inputs: &inputs,
            output,
            scratch: &scratch,
        };
        lists.iter().map(|l| bind_args(l, &p)).collect()
    }
}

/// The first changed guard region of any buffer of `calls` (inputs, output, scratch), in
/// one pass on the GPU.
pub(crate) fn changed_guard(
    gpu: &Gpu,
    gate: &GateKernels,
    calls: &[&CallBuffers],
) -> Result<Option<CheckFailure>, CudaError> {
    let regions: Vec<(u64, usize, &str, bool)> = calls
        .iter()
        .flat_map(|c| c.all())
        .flat_map(|(b, name)| {
            let [before, after] = b.guard_regions();
            [
                (before.0, before.1, name, true),
                (after.0, after.1, name, false),
            ]
        })
        .filter(|r| r.1 > 0)
        .collect();
    let spans: Vec<(u64, u64)> = regions.iter().map(|r| (r.0, r.1 as u64)).collect();
    let diffs = gate.differ_from_pattern(gpu, &spans, &[GUARD_BYTE], 1)?;
    Ok(diffs
        .iter()
        .zip(&regions)
        .find(|(d, _)| d.count > 0)
        .map(|(d, r)| CheckFailure::Guard {
            buffer: r.2.to_string(),
            before: r.3,
            offset: d.first as usize,
        }))
}

/// Device addresses of one call's buffers, for [`bind_args`].
pub struct CallPointers<'a> {
    pub inputs: &'a [u64],
    /// The output's first element (after any guard region).
    pub output: u64,
    pub scratch: &'a [u64],
}

/// An argument list with its tensors bound to device addresses; an index past the
/// buffers of the call is an error (a job whose arguments do not match its problem), and
/// so is an ABI argument not yet bound to a call ([`evo_kernels::bind_abi`]).
pub fn bind_args(slots: &[ArgSlot], p: &CallPointers) -> Result<Vec<KernelArg>, String> {
    let ptr = |what: &str, list: &[u64], i: usize| {
        list.get(i).copied().map(KernelArg::Ptr).ok_or_else(|| {
            format!(
                "argument names {what} {i}, but the call has {} {what} buffers",
                list.len()
            )
        })
    };
    slots
        .iter()
        .map(|s| match *s {
            ArgSlot::Input(i) => ptr("input", p.inputs, i),
            ArgSlot::Output => Ok(KernelArg::Ptr(p.output)),
            ArgSlot::Scratch(i) => ptr("scratch", p.scratch, i),
            ArgSlot::I32(v) => Ok(KernelArg::I32(v)),
            ArgSlot::I64(v) => Ok(KernelArg::I64(v)),
            ArgSlot::F32(v) => Ok(KernelArg::F32(v)),
            ArgSlot::Abi(i) => Err(format!(
                "ABI argument {i} is not bound to a call (bind_abi first)"
            )),
            ArgSlot::TensorMap(m) if !m.is_bound() => Err(format!(
                "a tensor map over buffer {} takes strides from the ABI and is not bound to a call (bind_abi first)",
                m.buffer
            )),
            ArgSlot::TensorMap(m) => {
                let (what, list) = match m.of {
                    MappedBuffer::Input => ("input", p.inputs),
                    MappedBuffer::Scratch => ("scratch", p.scratch),
                };
                let address = list.get(m.buffer).copied().ok_or_else(|| {
                    format!(
                        "tensor map names {what} {}, but the call has {} {what} buffers",
                        m.buffer,
                        list.len()
                    )
                })?;
                tensor_map_spec(&m, address)
                    .and_then(|spec| evo_gpu::runtime::encode_tensor_map_tiled(&spec))
                    .map(KernelArg::TensorMap)
                    .map_err(|e| format!("tensor map over {what} {}: {e}", m.buffer))
            }
        })
        .collect()
}

/// The evo-gpu description of a problem's tensor-map slot at a device address.
pub fn tensor_map_spec(
    m: &evo_kernels::harness::TensorMapSlot,
    address: u64,
) -> Result<evo_gpu::tensor_map::TiledSpec, evo_gpu::tensor_map::TensorMapError> {
    use evo_gpu::tensor_map::{Swizzle, TensorDtype, TiledSpec};
    use evo_kernels::harness::ElemType;
    let rank = m.rank as usize;
    let dtype = match m.elem {
        ElemType::F16 => TensorDtype::F16,
        ElemType::Bf16 => TensorDtype::Bf16,
        ElemType::F32 => TensorDtype::F32,
        ElemType::E4m3 | ElemType::U8 => TensorDtype::U8,
    };
    Ok(TiledSpec {
        dtype,
        address,
        dims: m.dims.iter().take(rank).copied().collect(),
        strides_bytes: m
            .strides_bytes
            .iter()
            .take(rank.saturating_sub(1))
            .copied()
            .collect(),
        box_dims: m.box_dims.iter().take(rank).copied().collect(),
        swizzle: Swizzle::from_bytes(m.swizzle_bytes)?,
    })
}
