//! A problem's tensor-map slot becomes the evo-gpu spec the worker encodes: dimensions
//! innermost first, byte strides from the input's element type, the rank's entries only,
//! and the driver's rules checked before any GPU is involved.

use evo_eval::worker::tensor_map_spec;
use evo_gpu::tensor_map::{Swizzle, TensorDtype, TensorMapError};
use evo_kernels::harness::{ElemType, TensorMapSlot};

#[test]
fn matrix_slot_maps_to_a_valid_2d_spec() {
    // (b*h*s, 128) bf16 rows, 64x64 boxes, 128-byte swizzle.
    let slot = TensorMapSlot::matrix(1, ElemType::Bf16, 4 * 8 * 1000, 128, 128, 64, 64, 128);
    let spec = tensor_map_spec(&slot, 0x1000).unwrap();
    assert_eq!(spec.dtype, TensorDtype::Bf16);
    assert_eq!(spec.dims, vec![128, 32000]);
    assert_eq!(spec.strides_bytes, vec![256]);
    assert_eq!(spec.box_dims, vec![64, 64]);
    assert_eq!(spec.swizzle, Swizzle::B128);
    assert_eq!(spec.validate(), Ok(()));
}

#[test]
fn slot_rules_are_checked_on_the_host() {
    // A 128-column box is 256 bytes: wider than the 128-byte swizzle span.
    let slot = TensorMapSlot::matrix(0, ElemType::F16, 100, 128, 128, 64, 128, 128);
    let spec = tensor_map_spec(&slot, 0x1000).unwrap();
    assert_eq!(
        spec.validate(),
        Err(TensorMapError::SwizzleSpan {
            inner: 256,
            span: 128
        })
    );
    // Rows of 100 fp16 elements (200 bytes) cannot be strided by TMA.
    let slot = TensorMapSlot::matrix(0, ElemType::F16, 100, 100, 100, 8, 8, 0);
    let spec = tensor_map_spec(&slot, 0x1000).unwrap();
    assert!(matches!(
        spec.validate(),
        Err(TensorMapError::Stride {
            index: 1,
            value: 200
        })
    ));
    let mut bad = slot;
    bad.swizzle_bytes = 48;
    assert_eq!(
        tensor_map_spec(&bad, 0).unwrap_err(),
        TensorMapError::Swizzle(48)
    );
}
