//! Tensor maps for the Hopper tensor memory accelerator (TMA): the description of a tiled
//! global-memory tensor that `cp.async.bulk.tensor` reads, checked on the host before
//! `cuTensorMapEncodeTiled` sees it (the driver only says `CUDA_ERROR_INVALID_VALUE`), and
//! the 128-byte `CUtensorMap` value a kernel receives as a `const __grid_constant__
//! CUtensorMap` parameter.
//!
//! The checks are the driver's documented rules for `CU_TENSOR_MAP_INTERLEAVE_NONE`
//! (the only interleave evo uses): rank 1 to 5, a 16-byte aligned base, non-zero
//! dimensions of at most 2^32 elements, strides multiples of 16 bytes below 2^40, box
//! sizes 1 to 256 whose innermost extent is a multiple of 16 bytes, and with a swizzle the
//! innermost box extent at most the swizzle span (32, 64 or 128 bytes). Encoding itself is
//! [`crate::runtime::Gpu::encode_tensor_map_tiled`].

/// Element type of a tensor map (the subset of `CUtensorMapDataType` evo uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorDtype {
    U8,
    F16,
    Bf16,
    F32,
}

impl TensorDtype {
    pub fn size(self) -> u64 {
        match self {
            TensorDtype::U8 => 1,
            TensorDtype::F16 | TensorDtype::Bf16 => 2,
            TensorDtype::F32 => 4,
        }
    }
}

/// Shared-memory swizzle of the boxes a tensor map writes (`CUtensorMapSwizzle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Swizzle {
    None,
    B32,
    B64,
    B128,
}

impl Swizzle {
    /// From the swizzle span in bytes (0 = none).
    pub fn from_bytes(bytes: u32) -> Result<Swizzle, TensorMapError> {
        match bytes {
            0 => Ok(Swizzle::None),
            32 => Ok(Swizzle::B32),
            64 => Ok(Swizzle::B64),
            128 => Ok(Swizzle::B128),
            other => Err(TensorMapError::Swizzle(other)),
        }
    }

    /// Span in bytes (0 for none).
    pub fn bytes(self) -> u64 {
        match self {
            Swizzle::None => 0,
            Swizzle::B32 => 32,
            Swizzle::B64 => 64,
            Swizzle::B128 => 128,
        }
    }
}

/// A tiled tensor map: `dims[0]` is the innermost (contiguous) dimension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TiledSpec {
    pub dtype: TensorDtype,
    /// Device address of element 0.
    pub address: u64,
    /// Elements per dimension, innermost first (rank = `dims.len()`).
    pub dims: Vec<u64>,
    /// Byte strides of dimensions 1.. (`rank - 1` entries; dimension 0 is contiguous).
    pub strides_bytes: Vec<u64>,
    /// Box (tile) extent per dimension, innermost first.
    pub box_dims: Vec<u32>,
    pub swizzle: Swizzle,
}

/// Why a tensor map was refused (by the host checks or the driver).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TensorMapError {
    #[error("tensor map rank {0} is not supported: use 1 to 5 dimensions")]
    Rank(usize),
    #[error("tensor map with {dims} dimensions needs {expected} strides (dimension 0 is contiguous) and {dims} box sizes; got {strides} strides and {boxes} box sizes")]
    Lengths {
        dims: usize,
        expected: usize,
        strides: usize,
        boxes: usize,
    },
    #[error("tensor map base address {0:#x} is not 16-byte aligned: allocate or offset the buffer to a multiple of 16 bytes")]
    Address(u64),
    #[error("tensor map dimension {index} has {value} elements: each must be 1 to 2^32")]
    Dim { index: usize, value: u64 },
    #[error("tensor map stride of dimension {index} is {value} bytes: it must be a multiple of 16 bytes and below 2^40 (pad the rows, e.g. a multiple of 8 fp16 elements)")]
    Stride { index: usize, value: u64 },
    #[error("tensor map box size {value} in dimension {index} is out of range: each must be 1 to 256 elements")]
    BoxDim { index: usize, value: u32 },
    #[error("tensor map inner box extent is {0} bytes: it must be a multiple of 16 bytes")]
    InnerBoxBytes(u64),
    #[error("tensor map inner box extent is {inner} bytes, larger than the {span}-byte swizzle span: make the inner box at most {span} bytes (split the tile into column blocks) or use a wider swizzle")]
    SwizzleSpan { inner: u64, span: u64 },
    #[error("swizzle of {0} bytes is not one of 0, 32, 64, 128")]
    Swizzle(u32),
    #[error("{0}")]
    Driver(crate::runtime::CudaError),
}

impl TiledSpec {
    /// The driver's rules, checked on the host with a message that says what to change.
    pub fn validate(&self) -> Result<(), TensorMapError> {
        let rank = self.dims.len();
        if !(1..=5).contains(&rank) {
            return Err(TensorMapError::Rank(rank));
        }
        if self.strides_bytes.len() != rank - 1 || self.box_dims.len() != rank {
            return Err(TensorMapError::Lengths {
                dims: rank,
                expected: rank - 1,
                strides: self.strides_bytes.len(),
                boxes: self.box_dims.len(),
            });
        }
        if !self.address.is_multiple_of(16) {
            return Err(TensorMapError::Address(self.address));
        }
        for (index, &value) in self.dims.iter().enumerate() {
            if value == 0 || value > 1 << 32 {
                return Err(TensorMapError::Dim { index, value });
            }
        }
        for (i, &value) in self.strides_bytes.iter().enumerate() {
            if !value.is_multiple_of(16) || value >= 1 << 40 {
                return Err(TensorMapError::Stride {
                    index: i + 1,
                    value,
                });
            }
        }
        for (index, &value) in self.box_dims.iter().enumerate() {
            if value == 0 || value > 256 {
                return Err(TensorMapError::BoxDim { index, value });
            }
        }
        let inner = self.box_dims[0] as u64 * self.dtype.size();
        if !inner.is_multiple_of(16) {
            return Err(TensorMapError::InnerBoxBytes(inner));
        }
        let span = self.swizzle.bytes();
        if span != 0 && inner > span {
            return Err(TensorMapError::SwizzleSpan { inner, span });
        }
        Ok(())
    }

    /// Bytes of shared memory one box fills.
    pub fn box_bytes(&self) -> u64 {
        self.box_dims.iter().map(|&b| b as u64).product::<u64>() * self.dtype.size()
    }
}

/// An encoded `CUtensorMap`: 128 opaque bytes, 64-byte aligned, passed to a kernel by value.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct TensorMap(pub [u8; 128]);

impl std::fmt::Debug for TensorMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TensorMap({}…)", hex::encode(&self.0[..16]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A (rows, 128) fp16 matrix read in 64x64 boxes with the 128-byte swizzle.
    fn spec() -> TiledSpec {
        TiledSpec {
            dtype: TensorDtype::F16,
            address: 0x7f00_0000_0000,
            dims: vec![128, 1000],
            strides_bytes: vec![256],
            box_dims: vec![64, 64],
            swizzle: Swizzle::B128,
        }
    }

    #[test]
    fn valid_spec_passes() {
        assert_eq!(spec().validate(), Ok(()));
        assert_eq!(spec().box_bytes(), 64 * 64 * 2);
    }

    #[test]
    fn each_rule_refuses() {
        let mut s = spec();
        s.dims = vec![];
        assert_eq!(s.validate(), Err(TensorMapError::Rank(0)));
        s.dims = vec![1; 6];
        assert_eq!(s.validate(), Err(TensorMapError::Rank(6)));

        let mut s = spec();
        s.strides_bytes = vec![256, 512];
        assert!(matches!(s.validate(), Err(TensorMapError::Lengths { .. })));

        let mut s = spec();
        s.address += 8;
        assert!(matches!(s.validate(), Err(TensorMapError::Address(_))));

        let mut s = spec();
        s.dims[1] = 0;
        assert_eq!(
            s.validate(),
            Err(TensorMapError::Dim { index: 1, value: 0 })
        );
        s.dims[1] = (1 << 32) + 1;
        assert!(matches!(
            s.validate(),
            Err(TensorMapError::Dim { index: 1, .. })
        ));

        let mut s = spec();
        s.strides_bytes[0] = 250; // 125 fp16 elements: not a multiple of 16 bytes
        assert_eq!(
            s.validate(),
            Err(TensorMapError::Stride {
                index: 1,
                value: 250
            })
        );
        s.strides_bytes[0] = 1 << 40;
        assert!(matches!(s.validate(), Err(TensorMapError::Stride { .. })));

        let mut s = spec();
        s.box_dims[1] = 257;
        assert_eq!(
            s.validate(),
            Err(TensorMapError::BoxDim {
                index: 1,
                value: 257
            })
        );
        s.box_dims[1] = 0;
        assert!(matches!(s.validate(), Err(TensorMapError::BoxDim { .. })));

        let mut s = spec();
        s.swizzle = Swizzle::None;
        s.box_dims[0] = 4; // 8 bytes
        assert_eq!(s.validate(), Err(TensorMapError::InnerBoxBytes(8)));
    }

    #[test]
    fn swizzle_span_bounds_the_inner_box() {
        let mut s = spec();
        s.box_dims[0] = 128; // 256 bytes > 128-byte span
        assert_eq!(
            s.validate(),
            Err(TensorMapError::SwizzleSpan {
                inner: 256,
                span: 128
            })
        );
        s.swizzle = Swizzle::None; // no swizzle: any multiple of 16 bytes
        assert_eq!(s.validate(), Ok(()));
        s.box_dims[0] = 32; // 64 bytes
        s.swizzle = Swizzle::B32;
        assert!(matches!(
            s.validate(),
            Err(TensorMapError::SwizzleSpan {
                inner: 64,
                span: 32
            })
        ));
        s.swizzle = Swizzle::B64;
        assert_eq!(s.validate(), Ok(()));
        let msg = TensorMapError::SwizzleSpan {
            inner: 256,
            span: 128,
        }
        .to_string();
        assert!(msg.contains("column blocks"), "{msg}");
    }

    #[test]
    fn swizzle_from_bytes() {
        assert_eq!(Swizzle::from_bytes(128), Ok(Swizzle::B128));
        assert_eq!(Swizzle::from_bytes(0), Ok(Swizzle::None));
        assert_eq!(Swizzle::from_bytes(16), Err(TensorMapError::Swizzle(16)));
        for s in [Swizzle::None, Swizzle::B32, Swizzle::B64, Swizzle::B128] {
            assert_eq!(Swizzle::from_bytes(s.bytes() as u32), Ok(s));
        }
    }

    #[test]
    fn tensor_map_layout_matches_cutensormap() {
        assert_eq!(std::mem::size_of::<TensorMap>(), 128);
        assert_eq!(std::mem::align_of::<TensorMap>(), 64);
        assert_eq!(
            std::mem::size_of::<TensorMap>(),
            std::mem::size_of::<cudarc::driver::sys::CUtensorMap>()
        );
    }
}
