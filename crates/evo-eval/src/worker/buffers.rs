//! Device buffers of one call, each inside guard regions, and the binding of argument
//! slots to their addresses.

use evo_core::Vars;
use evo_gpu::runtime::{CudaError, DeviceBuffer, Gpu, KernelArg};
use evo_kernels::harness::{ArgSlot, Layout, TensorSpec};
use evo_kernels::Problem;

use crate::compare::{self, GUARD_BYTE};
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

    pub fn upload(&self, gpu: &Gpu, data: &[u8]) -> Result<(), CudaError> {
        assert_eq!(data.len(), self.len, "payload of another size");
        gpu.upload_at(&self.buffer, self.guard, data)
    }

    pub fn download(&self, gpu: &Gpu) -> Result<Vec<u8>, CudaError> {
        gpu.download_at(&self.buffer, self.guard, self.len)
    }

    /// Sets every payload byte to `value`, queued on the stream.
    pub fn fill(&self, gpu: &Gpu, value: u8) -> Result<(), CudaError> {
        gpu.memset_at(&self.buffer, self.guard, self.len, value)
    }

    /// The guard regions as the GPU holds them now, checked.
    pub fn check_guards(&self, gpu: &Gpu, name: &str) -> Result<Option<CheckFailure>, CudaError> {
        if self.guard == 0 {
            return Ok(None);
        }
        let before = gpu.download_at(&self.buffer, 0, self.guard)?;
        let after = gpu.download_at(&self.buffer, self.guard + self.len, self.guard)?;
        Ok(compare::check_guards(name, &before, &after))
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

/// The buffers of one call of a variant: its inputs and output (in the call's layouts) and
/// its scratch, each guarded, with the names messages use.
pub(crate) struct CallBuffers {
    pub inputs: Vec<Guarded>,
    pub output: Guarded,
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

    /// The first changed guard region of any buffer.
    pub fn check_guards(&self, gpu: &Gpu) -> Result<Option<CheckFailure>, CudaError> {
        for (b, name) in self.all() {
            if let Some(f) = b.check_guards(gpu, name)? {
                return Ok(Some(f));
            }
        }
        Ok(None)
    }

    /// Fills every scratch buffer with 0xFF bytes: NaN in f16, bf16, f32 and e4m3, so a
    /// kernel that reads scratch no earlier kernel wrote yields NaN.
    pub fn poison_scratch(&self, gpu: &Gpu) -> Result<(), CudaError> {
        for b in &self.scratch {
            b.fill(gpu, 0xff)?;
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
            ArgSlot::TensorMap(m) => {
                let address = p.inputs.get(m.input).copied().ok_or_else(|| {
                    format!(
                        "tensor map names input {}, but the call has {} input buffers",
                        m.input,
                        p.inputs.len()
                    )
                })?;
                tensor_map_spec(&m, address)
                    .and_then(|spec| evo_gpu::runtime::encode_tensor_map_tiled(&spec))
                    .map(KernelArg::TensorMap)
                    .map_err(|e| format!("tensor map over input {}: {e}", m.input))
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
