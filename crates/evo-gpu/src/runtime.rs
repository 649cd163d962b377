//! A thin, owned wrapper over the CUDA driver for the evaluator's worker: one device,
//! its primary context, one stream, buffers, modules loaded from CUBIN, launches with
//! arguments built at run time, events and CUDA graphs.
//!
//! Every call returns a [`CudaError`] that names the call and the driver's error;
//! [`CudaError::is_sticky`] says whether the context is dead afterwards (an illegal
//! address and friends), in which case the process must be replaced.

use std::ffi::{c_void, CString};
use std::sync::Arc;

use cudarc::driver::result;
use cudarc::driver::sys::{self, CUresult};

use crate::device::{self, DeviceInfo};
use crate::tensor_map::{Swizzle, TensorDtype, TensorMap, TensorMapError, TiledSpec};

/// A driver call that failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{call}: {name} ({description})")]
pub struct CudaError {
    pub call: &'static str,
    pub code: i32,
    pub name: String,
    pub description: String,
}

impl CudaError {
    fn new(call: &'static str, e: result::DriverError) -> CudaError {
        let name = e
            .error_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("{:?}", e.0));
        let description = e
            .error_string()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        CudaError {
            call,
            code: e.0 as i32,
            name,
            description,
        }
    }

    /// Errors after which the CUDA context cannot be used again: the process that saw
    /// one must exit and be replaced.
    pub fn is_sticky(&self) -> bool {
        matches!(
            self.name.as_str(),
            "CUDA_ERROR_ILLEGAL_ADDRESS"
                | "CUDA_ERROR_LAUNCH_FAILED"
                | "CUDA_ERROR_MISALIGNED_ADDRESS"
                | "CUDA_ERROR_ILLEGAL_INSTRUCTION"
                | "CUDA_ERROR_INVALID_ADDRESS_SPACE"
                | "CUDA_ERROR_INVALID_PC"
                | "CUDA_ERROR_HARDWARE_STACK_ERROR"
                | "CUDA_ERROR_LAUNCH_TIMEOUT"
                | "CUDA_ERROR_ASSERT"
                | "CUDA_ERROR_TENSOR_MEMORY_LEAK"
                | "CUDA_ERROR_CONTEXT_IS_DESTROYED"
                | "CUDA_ERROR_ECC_UNCORRECTABLE"
                | "CUDA_ERROR_UNKNOWN"
        )
    }
}

fn check(call: &'static str, r: CUresult) -> Result<(), CudaError> {
    r.result().map_err(|e| CudaError::new(call, e))
}

/// One GPU, its primary context (made current on the calling thread) and a stream.
pub struct Gpu {
    pub info: DeviceInfo,
    handles: Arc<Handles>,
    context: sys::CUcontext,
    /// Memory from the device's stream-ordered pool (cuMemAllocAsync on the stream), else
    /// cuMemAlloc. A cuMemFree waits for the whole device, and a check allocates and frees
    /// buffers by the hundred; the pool hands freed memory back without a wait.
    pooled: bool,
}

/// The context and stream, released when the Gpu and the last buffer freed on its stream
/// are gone (a pooled buffer's free is queued on the stream).
struct Handles {
    device: sys::CUdevice,
    stream: sys::CUstream,
}

// The worker uses a Gpu from one thread at a time; the context is made current by
// `Gpu::bind` on whichever thread uses it.
unsafe impl Send for Gpu {}
unsafe impl Send for Handles {}
unsafe impl Sync for Handles {}

impl Drop for Handles {
    fn drop(&mut self) {
        unsafe {
            let _ = result::stream::destroy(self.stream);
            let _ = result::primary_ctx::release(self.device);
        }
    }
}

/// Set (to anything) to allocate with cuMemAlloc instead of the stream-ordered pool: the
/// sanitizer gate runs its worker so, for memcheck's view of every allocation's bounds.
pub const SYNC_ALLOC_ENV: &str = "EVO_SYNC_ALLOC";

/// Bytes the pool keeps for reuse across synchronisations (the rest goes back to the
/// driver): more than a timing gate's sets and check buffers of one shape.
const POOL_KEEP_BYTES: u64 = 8 << 30;

impl Gpu {
    pub fn open(ordinal: i32) -> Result<Gpu, CudaError> {
        let info = device::probe()
            .ok()
            .and_then(|d| d.devices.into_iter().find(|x| x.ordinal == ordinal))
            .ok_or_else(|| CudaError {
                call: "open",
                code: -1,
                name: "NO_SUCH_GPU".into(),
                description: format!("GPU {ordinal} not found"),
            })?;
        let device = result::device::get(ordinal).map_err(|e| CudaError::new("cuDeviceGet", e))?;
        // SAFETY: device came from cuDeviceGet; the context is released in Drop.
        let context = unsafe { result::primary_ctx::retain(device) }
            .map_err(|e| CudaError::new("cuDevicePrimaryCtxRetain", e))?;
        unsafe { result::ctx::set_current(context) }
            .map_err(|e| CudaError::new("cuCtxSetCurrent", e))?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| CudaError::new("cuStreamCreate", e))?;
        let handles = Arc::new(Handles { device, stream });
        let pooled = std::env::var_os(SYNC_ALLOC_ENV).is_none() && keep_pool_memory(device);
        Ok(Gpu {
            info,
            handles,
            context,
            pooled,
        })
    }

    /// Makes this GPU's context current on the calling thread.
    pub fn bind(&self) -> Result<(), CudaError> {
        unsafe { result::ctx::set_current(self.context) }
            .map_err(|e| CudaError::new("cuCtxSetCurrent", e))
    }

    pub fn synchronize(&self) -> Result<(), CudaError> {
        unsafe { result::stream::synchronize(self.handles.stream) }
            .map_err(|e| CudaError::new("cuStreamSynchronize", e))
    }

    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, CudaError> {
        if self.pooled {
            let ptr = unsafe { result::malloc_async(self.handles.stream, bytes.max(1)) }
                .map_err(|e| CudaError::new("cuMemAllocAsync", e))?;
            return Ok(DeviceBuffer {
                ptr,
                bytes,
                pool: Some(self.handles.clone()),
            });
        }
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }
            .map_err(|e| CudaError::new("cuMemAlloc", e))?;
        Ok(DeviceBuffer {
            ptr,
            bytes,
            pool: None,
        })
    }

    pub fn load_module(&self, image: &[u8]) -> Result<Module, CudaError> {
        // The driver reads the image during the call; it must end with a NUL for PTX.
        let mut owned = image.to_vec();
        owned.push(0);
        let module = unsafe { result::module::load_data(owned.as_ptr() as *const c_void) }
            .map_err(|e| CudaError::new("cuModuleLoadData", e))?;
        Ok(Module { module })
    }

    /// Launches `f` on this GPU's stream. Arguments are copied into the call.
    pub fn launch(
        &self,
        f: &Function,
        dims: &evo_core::LaunchDims,
        args: &[KernelArg],
    ) -> Result<(), CudaError> {
        let mut storage = pack_params(args);
        let mut params: Vec<*mut c_void> = storage
            .iter_mut()
            .map(|v| v.0.as_mut_ptr() as *mut c_void)
            .collect();
        // SAFETY: each param points to a 64-byte aligned, 128-byte slot holding the
        // argument in its first bytes (little-endian); the driver copies as many bytes
        // as the kernel's parameter has (4, 8, or 128 for a tensor map).
        unsafe {
            result::launch_kernel(
                f.function,
                (dims.grid[0], dims.grid[1], dims.grid[2]),
                (dims.block[0], dims.block[1], dims.block[2]),
                dims.shared_bytes,
                self.handles.stream,
                &mut params,
            )
        }
        .map_err(|e| CudaError::new("cuLaunchKernel", e))
    }

    /// Encodes a tiled tensor map over this GPU's memory: see [`encode_tensor_map_tiled`].
    pub fn encode_tensor_map_tiled(&self, spec: &TiledSpec) -> Result<TensorMap, TensorMapError> {
        encode_tensor_map_tiled(spec)
    }

    pub fn event(&self) -> Result<Event, CudaError> {
        // Timing enabled (cudarc's default flags disable it).
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(|e| CudaError::new("cuEventCreate", e))?;
        Ok(Event { event })
    }

    pub fn record(&self, event: &Event) -> Result<(), CudaError> {
        unsafe { result::event::record(event.event, self.handles.stream) }
            .map_err(|e| CudaError::new("cuEventRecord", e))
    }

    /// Captures whatever `body` enqueues on this GPU's stream into an executable graph.
    pub fn capture(
        &self,
        body: impl FnOnce(&Gpu) -> Result<(), CudaError>,
    ) -> Result<Graph, CudaError> {
        check("cuStreamBeginCapture", unsafe {
            sys::cuStreamBeginCapture_v2(
                self.handles.stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        })?;
        let body_result = body(self);
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        let end = check("cuStreamEndCapture", unsafe {
            sys::cuStreamEndCapture(self.handles.stream, &mut graph)
        });
        body_result?;
        end?;
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        let inst = check("cuGraphInstantiate", unsafe {
            sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0)
        });
        unsafe { sys::cuGraphDestroy(graph) };
        inst?;
        Ok(Graph { exec })
    }

    pub fn launch_graph(&self, graph: &Graph) -> Result<(), CudaError> {
        check("cuGraphLaunch", unsafe {
            sys::cuGraphLaunch(graph.exec, self.handles.stream)
        })
    }

    /// Copies `data` into `buf` at byte `offset`, ordered on this GPU's stream (before
    /// any later launch), and waits for it. Copies are never issued on the legacy NULL
    /// stream: a non-blocking stream does not wait for those, so a kernel could read
    /// half-uploaded inputs.
    pub fn upload_at(
        &self,
        buf: &DeviceBuffer,
        offset: usize,
        data: &[u8],
    ) -> Result<(), CudaError> {
        assert!(
            offset + data.len() <= buf.bytes,
            "upload past the end of a device buffer"
        );
        unsafe { result::memcpy_htod_async(buf.ptr + offset as u64, data, self.handles.stream) }
            .map_err(|e| CudaError::new("cuMemcpyHtoDAsync", e))?;
        self.synchronize()
    }

    pub fn upload(&self, buf: &DeviceBuffer, data: &[u8]) -> Result<(), CudaError> {
        self.upload_at(buf, 0, data)
    }

    /// Copies the whole buffer to the host, after everything queued on the stream.
    pub fn download(&self, buf: &DeviceBuffer) -> Result<Vec<u8>, CudaError> {
        let mut out = vec![0u8; buf.bytes];
        unsafe { result::memcpy_dtoh_async(&mut out, buf.ptr, self.handles.stream) }
            .map_err(|e| CudaError::new("cuMemcpyDtoHAsync", e))?;
        self.synchronize()?;
        Ok(out)
    }

    /// Copies `len` bytes of `buf` from byte `offset` to the host, after everything queued
    /// on the stream.
    pub fn download_at(
        &self,
        buf: &DeviceBuffer,
        offset: usize,
        len: usize,
    ) -> Result<Vec<u8>, CudaError> {
        assert!(
            offset + len <= buf.bytes,
            "download past the end of a device buffer"
        );
        let mut out = vec![0u8; len];
        unsafe {
            result::memcpy_dtoh_async(&mut out, buf.ptr + offset as u64, self.handles.stream)
        }
        .map_err(|e| CudaError::new("cuMemcpyDtoHAsync", e))?;
        self.synchronize()?;
        Ok(out)
    }

    pub fn memset_u8(&self, buf: &DeviceBuffer, value: u8) -> Result<(), CudaError> {
        self.memset_at(buf, 0, buf.bytes, value)?;
        self.synchronize()
    }

    /// Sets `len` bytes of `buf` from byte `offset` to `value`, queued on the stream
    /// (no wait).
    pub fn memset_at(
        &self,
        buf: &DeviceBuffer,
        offset: usize,
        len: usize,
        value: u8,
    ) -> Result<(), CudaError> {
        assert!(
            offset + len <= buf.bytes,
            "memset past the end of a device buffer"
        );
        check("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(buf.ptr + offset as u64, value, len, self.handles.stream)
        })
    }

    /// Copies `len` bytes from `src` at `src_offset` to `dst` at `dst_offset`, queued on
    /// the stream (no wait).
    pub fn copy_at(
        &self,
        dst: &DeviceBuffer,
        dst_offset: usize,
        src: &DeviceBuffer,
        src_offset: usize,
        len: usize,
    ) -> Result<(), CudaError> {
        assert!(
            dst_offset + len <= dst.bytes && src_offset + len <= src.bytes,
            "copy past the end of a device buffer"
        );
        check("cuMemcpyDtoDAsync", unsafe {
            sys::cuMemcpyDtoDAsync_v2(
                dst.ptr + dst_offset as u64,
                src.ptr + src_offset as u64,
                len,
                self.handles.stream,
            )
        })
    }
}

/// Whether the device's default pool can keep [`POOL_KEEP_BYTES`] between
/// synchronisations (without it every allocation after a synchronisation goes back to the
/// driver); false where the device has no stream-ordered allocator.
fn keep_pool_memory(device: sys::CUdevice) -> bool {
    unsafe {
        let Ok(pool) = result::device::get_default_mem_pool(device) else {
            return false;
        };
        let mut keep = POOL_KEEP_BYTES;
        result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut keep as *mut u64 as *mut c_void,
        )
        .is_ok()
    }
}

/// Device memory, freed on drop (queued on the GPU's stream when it came from the pool).
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    pool: Option<Arc<Handles>>,
}

impl DeviceBuffer {
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        unsafe {
            let _ = match &self.pool {
                Some(h) => result::free_async(self.ptr, h.stream),
                None => result::free_sync(self.ptr),
            };
        }
    }
}

pub struct Module {
    module: sys::CUmodule,
}

impl Module {
    pub fn function(&self, name: &str) -> Result<Function, CudaError> {
        let c = CString::new(name).expect("kernel names have no NUL");
        let function = unsafe { result::module::get_function(self.module, c) }
            .map_err(|e| CudaError::new("cuModuleGetFunction", e))?;
        let function = Function {
            function,
            name: name.to_string(),
        };
        function.allow_compiled_cluster()?;
        Ok(function)
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        unsafe {
            let _ = result::module::unload(self.module);
        }
    }
}

/// A kernel of a loaded module (valid while the module lives).
pub struct Function {
    function: sys::CUfunction,
    pub name: String,
}

/// What the driver says about a function.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct FunctionAttributes {
    pub registers: i32,
    pub static_smem_bytes: i32,
    pub local_bytes: i32,
    pub max_threads_per_block: i32,
}

impl Function {
    /// A kernel compiled with a thread-block cluster of more than 8 CTAs (`__cluster_dims__`)
    /// launches only where the function allows non-portable cluster sizes (sm_90: up to 16); a
    /// kernel without a compiled cluster (every one before sm_90) is left as it is.
    fn allow_compiled_cluster(&self) -> Result<(), CudaError> {
        use sys::CUfunction_attribute as A;
        let mut ctas = 1i64;
        for a in [
            A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH,
            A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT,
            A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH,
        ] {
            // Drivers and GPUs without clusters refuse the query: no compiled cluster.
            let Ok(v) = self.attribute(a) else {
                return Ok(());
            };
            ctas *= i64::from(v.max(0));
        }
        if ctas <= 8 {
            return Ok(());
        }
        check(
            "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)",
            unsafe {
                sys::cuFuncSetAttribute(
                    self.function,
                    A::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                    1,
                )
            },
        )
    }

    /// Allows `bytes` of dynamic shared memory (needed above 48 KB).
    pub fn set_max_dynamic_smem(&self, bytes: u32) -> Result<(), CudaError> {
        check(
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
            unsafe {
                sys::cuFuncSetAttribute(
                    self.function,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    bytes as i32,
                )
            },
        )
    }

    pub fn attributes(&self) -> Result<FunctionAttributes, CudaError> {
        use sys::CUfunction_attribute as A;
        Ok(FunctionAttributes {
            registers: self.attribute(A::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            static_smem_bytes: self.attribute(A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
            local_bytes: self.attribute(A::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
            max_threads_per_block: self.attribute(A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        })
    }

    /// One `cuFuncGetAttribute` value.
    fn attribute(&self, a: sys::CUfunction_attribute) -> Result<i32, CudaError> {
        let mut v = 0;
        check("cuFuncGetAttribute", unsafe {
            sys::cuFuncGetAttribute(&mut v, a, self.function)
        })
        .map(|_| v)
    }

    /// Resident blocks per multiprocessor for this block size and dynamic shared memory.
    pub fn occupancy(&self, threads: u32, dynamic_smem: u32) -> Result<i32, CudaError> {
        let mut blocks = 0;
        check("cuOccupancyMaxActiveBlocksPerMultiprocessor", unsafe {
            sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(
                &mut blocks,
                self.function,
                threads as i32,
                dynamic_smem as usize,
            )
        })?;
        Ok(blocks)
    }
}

/// Encodes a tiled tensor map (`cuTensorMapEncodeTiled`) over device memory, after
/// the host checks of [`TiledSpec::validate`]. Out-of-bounds box elements read as
/// zero; L2 promotion 128 bytes; no interleave; element strides 1. Needs the driver
/// loaded: call it once a [`Gpu`] is open (the map needs no context of its own).
pub fn encode_tensor_map_tiled(spec: &TiledSpec) -> Result<TensorMap, TensorMapError> {
    spec.validate()?;
    let dtype = match spec.dtype {
        TensorDtype::U8 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        TensorDtype::F16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        TensorDtype::Bf16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        TensorDtype::F32 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
    };
    let swizzle = match spec.swizzle {
        Swizzle::None => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
        Swizzle::B32 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_32B,
        Swizzle::B64 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        Swizzle::B128 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    let rank = spec.dims.len();
    let element_strides = vec![1u32; rank];
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: every array has `rank` entries (strides `rank - 1`), checked by
    // validate(); the driver writes only `map`.
    check("cuTensorMapEncodeTiled", unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            dtype,
            rank as u32,
            spec.address as *mut c_void,
            spec.dims.as_ptr(),
            spec.strides_bytes.as_ptr(),
            spec.box_dims.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    })
    .map_err(TensorMapError::Driver)?;
    let mut bytes = [0u8; 128];
    for (chunk, q) in bytes.chunks_exact_mut(8).zip(map.opaque) {
        chunk.copy_from_slice(&q.to_le_bytes());
    }
    Ok(TensorMap(bytes))
}

/// One kernel argument, passed by value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    /// A device pointer.
    Ptr(u64),
    I32(i32),
    I64(i64),
    F32(f32),
    /// A `CUtensorMap` for a `const __grid_constant__` 128-byte parameter.
    TensorMap(TensorMap),
}

/// One launch parameter's storage: big and aligned enough for any [`KernelArg`].
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct ParamSlot(pub(crate) [u8; 128]);

impl KernelArg {
    /// The bytes the kernel's parameter holds (little-endian scalars).
    pub fn bytes(&self) -> Vec<u8> {
        match *self {
            KernelArg::Ptr(p) => p.to_le_bytes().to_vec(),
            KernelArg::I32(v) => v.to_le_bytes().to_vec(),
            KernelArg::I64(v) => v.to_le_bytes().to_vec(),
            KernelArg::F32(v) => v.to_le_bytes().to_vec(),
            KernelArg::TensorMap(m) => m.0.to_vec(),
        }
    }
}

/// The parameter array of a launch: one zero-padded slot per argument.
pub(crate) fn pack_params(args: &[KernelArg]) -> Vec<ParamSlot> {
    args.iter()
        .map(|a| {
            let mut slot = ParamSlot([0; 128]);
            let b = a.bytes();
            slot.0[..b.len()].copy_from_slice(&b);
            slot
        })
        .collect()
}

impl From<TensorMapError> for CudaError {
    /// A refused tensor map as the error of the call that needed it (never sticky).
    fn from(e: TensorMapError) -> CudaError {
        match e {
            TensorMapError::Driver(c) => c,
            other => CudaError {
                call: "cuTensorMapEncodeTiled",
                code: -1,
                name: "INVALID_TENSOR_MAP".into(),
                description: other.to_string(),
            },
        }
    }
}

pub struct Event {
    event: sys::CUevent,
}

impl Event {
    pub fn synchronize(&self) -> Result<(), CudaError> {
        unsafe { result::event::synchronize(self.event) }
            .map_err(|e| CudaError::new("cuEventSynchronize", e))
    }

    /// Milliseconds from `self` to `end` (both recorded and complete).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32, CudaError> {
        unsafe { result::event::elapsed(self.event, end.event) }
            .map_err(|e| CudaError::new("cuEventElapsedTime", e))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        unsafe {
            let _ = result::event::destroy(self.event);
        }
    }
}

pub struct Graph {
    exec: sys::CUgraphExec,
}

impl Drop for Graph {
    fn drop(&mut self) {
        unsafe {
            sys::cuGraphExecDestroy(self.exec);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_packed_little_endian_in_aligned_slots() {
        let mut map = [0u8; 128];
        for (i, b) in map.iter_mut().enumerate() {
            *b = i as u8 ^ 0xa5;
        }
        let args = [
            KernelArg::Ptr(0x1122_3344_5566_7788),
            KernelArg::I32(-2),
            KernelArg::I64(-3),
            KernelArg::F32(1.5),
            KernelArg::TensorMap(TensorMap(map)),
        ];
        let slots = pack_params(&args);
        assert_eq!(slots.len(), 5);
        for s in &slots {
            assert_eq!(s.0.as_ptr() as usize % 64, 0, "slot not 64-byte aligned");
        }
        assert_eq!(&slots[0].0[..8], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&slots[1].0[..4], &[0xfe, 0xff, 0xff, 0xff]);
        assert!(slots[1].0[4..].iter().all(|&b| b == 0));
        assert_eq!(&slots[2].0[..8], &(-3i64).to_le_bytes());
        assert_eq!(&slots[3].0[..4], &1.5f32.to_bits().to_le_bytes());
        assert_eq!(slots[4].0, map);
    }

    #[test]
    fn refused_tensor_map_is_a_non_sticky_cuda_error() {
        let e: CudaError = TensorMapError::Rank(7).into();
        assert_eq!(e.name, "INVALID_TENSOR_MAP");
        assert!(e.description.contains("1 to 5"));
        assert!(!e.is_sticky());
    }
}
