//! One NVRTC compilation: CUDA source to PTX and, for a real architecture, CUBIN.

use std::ffi::{c_char, CString};

use cudarc::nvrtc::{result, sys};

use crate::locate::{CudaInstall, LocateError};

#[derive(Debug, thiserror::Error)]
pub enum NvrtcError {
    #[error(transparent)]
    Locate(#[from] LocateError),
    #[error("NVRTC call {call} failed: {error:?}")]
    Call {
        call: &'static str,
        error: cudarc::nvrtc::result::NvrtcError,
    },
    #[error("source contains a NUL byte")]
    NulInSource,
}

/// What NVRTC produced. A failed compilation is an `Ok` with `success == false` and the
/// log: it is a verdict on the source, not an error of evo.
#[derive(Clone, Debug)]
pub struct NvrtcOutput {
    pub success: bool,
    pub log: String,
    pub ptx: Option<String>,
    pub cubin: Option<Vec<u8>>,
}

/// NVRTC's version as (major, minor). Loads NVRTC if needed.
pub fn version() -> Result<(i32, i32), NvrtcError> {
    CudaInstall::global()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|error| NvrtcError::Call {
            call: "nvrtcVersion",
            error,
        })?;
    Ok((major, minor))
}

fn c_chars_to_string(v: Vec<c_char>) -> String {
    let bytes: Vec<u8> = v
        .into_iter()
        .map(|c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Compiles `source` (program name `name`, used in messages) with the full option list.
/// NVRTC programs are independent, so this may run on several threads at once (the
/// `concurrent_compiles_match_serial_ones` test checks the outputs are identical).
pub fn compile(source: &str, name: &str, options: &[String]) -> Result<NvrtcOutput, NvrtcError> {
    CudaInstall::global()?;
    let src = CString::new(source).map_err(|_| NvrtcError::NulInSource)?;
    let name = CString::new(name).map_err(|_| NvrtcError::NulInSource)?;
    let call = |call: &'static str| move |error| NvrtcError::Call { call, error };
    let prog = result::create_program(&src, Some(&name)).map_err(call("nvrtcCreateProgram"))?;
    // SAFETY: `prog` is live until destroy_program below; src and name outlive it.
    let out = unsafe {
        let compiled = result::compile_program(prog, options);
        let mut log = result::get_program_log(prog)
            .map(c_chars_to_string)
            .unwrap_or_default();
        let out = match compiled {
            Err(e) => {
                if log.trim().is_empty() {
                    log = format!("nvrtcCompileProgram failed: {e:?}");
                }
                Ok(NvrtcOutput {
                    success: false,
                    log,
                    ptx: None,
                    cubin: None,
                })
            }
            Ok(()) => (|| {
                let ptx = result::get_ptx(prog).map_err(call("nvrtcGetPTX"))?;
                let mut size = 0usize;
                sys::nvrtcGetCUBINSize(prog, &mut size)
                    .result()
                    .map_err(call("nvrtcGetCUBINSize"))?;
                // Size 0 means a virtual architecture (compute_XX): PTX only.
                let cubin = if size > 0 {
                    let mut buf = vec![0u8; size];
                    sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char)
                        .result()
                        .map_err(call("nvrtcGetCUBIN"))?;
                    Some(buf)
                } else {
                    None
                };
                Ok(NvrtcOutput {
                    success: true,
                    log,
                    ptx: Some(c_chars_to_string(ptx)),
                    cubin,
                })
            })(),
        };
        let _ = result::destroy_program(prog);
        out
    };
    out
}
