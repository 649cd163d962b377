//! The CUDA driver and the GPUs it sees, for `evo doctor` and for choosing the default
//! compile target.

use cudarc::driver::{result, sys};
use serde::{Deserialize, Serialize};

/// One GPU as the driver describes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub ordinal: i32,
    pub name: String,
    pub compute_capability: (u32, u32),
    pub multiprocessors: u32,
    pub memory_bytes: u64,
    pub l2_bytes: u32,
    pub max_smem_per_block_optin: u32,
    pub clock_mhz: u32,
    /// Peak memory clock (MHz) and bus width (bits): the memory bandwidth ceiling.
    #[serde(default)]
    pub memory_clock_mhz: u32,
    #[serde(default)]
    pub memory_bus_bits: u32,
}

impl DeviceInfo {
    /// The memory bandwidth the driver's numbers allow, in GB/s (double data rate), or
    /// `None` when the driver did not say.
    pub fn peak_memory_gb_per_s(&self) -> Option<f64> {
        (self.memory_clock_mhz > 0 && self.memory_bus_bits > 0).then(|| {
            2.0 * self.memory_clock_mhz as f64 * 1e6 * self.memory_bus_bits as f64 / 8.0 / 1e9
        })
    }
}

/// What the driver reports.
#[derive(Clone, Debug, Serialize)]
pub struct DriverInfo {
    /// e.g. 13000 for CUDA 13.0.
    pub cuda_version: i32,
    pub devices: Vec<DeviceInfo>,
}

#[derive(Debug, thiserror::Error, Clone)]
pub enum DriverProbeError {
    #[error("the CUDA driver library (libcuda.so.1) is not installed or not on the loader path; this machine cannot run kernels (compiling still works)")]
    NoLibrary,
    #[error("the CUDA driver failed to initialise: {0} (is a GPU present and the driver loaded?)")]
    Init(String),
    #[error("driver call failed: {0}")]
    Call(String),
}

/// Whether libcuda can be loaded, without cudarc's panic when it cannot.
pub fn driver_library_present() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { sys::is_culib_present() }
}

/// Initialises the driver and lists the GPUs.
pub fn probe() -> Result<DriverInfo, DriverProbeError> {
    if !driver_library_present() {
        return Err(DriverProbeError::NoLibrary);
    }
    result::init().map_err(|e| DriverProbeError::Init(format!("{e:?}")))?;
    let call = |e: result::DriverError| DriverProbeError::Call(format!("{e:?}"));
    let mut version = 0;
    // SAFETY: out-parameter.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(call)?;
    let count = result::device::get_count().map_err(call)?;
    let mut devices = Vec::new();
    for ordinal in 0..count {
        let dev = result::device::get(ordinal).map_err(call)?;
        // SAFETY: `dev` came from device::get.
        let attr = |a| unsafe { result::device::get_attribute(dev, a) }.map(|v| v as u32);
        use sys::CUdevice_attribute as A;
        devices.push(DeviceInfo {
            ordinal,
            name: result::device::get_name(dev).map_err(call)?,
            compute_capability: (
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).map_err(call)?,
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).map_err(call)?,
            ),
            multiprocessors: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(call)?,
            // SAFETY: `dev` came from device::get.
            memory_bytes: unsafe { result::device::total_mem(dev) }.map_err(call)? as u64,
            l2_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE).map_err(call)?,
            max_smem_per_block_optin: attr(
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )
            .map_err(call)?,
            clock_mhz: attr(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE).map_err(call)? / 1000,
            memory_clock_mhz: attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE).map_err(call)? / 1000,
            memory_bus_bits: attr(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH).map_err(call)?,
        });
    }
    Ok(DriverInfo {
        cuda_version: version,
        devices,
    })
}
