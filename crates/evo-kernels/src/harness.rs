//! What a problem gives the correctness gate: the tensors of a call, the kernel's
//! arguments, seeded input generation (random and adversarial), the GPU reference
//! kernel, a float64 CPU reference, and tolerances.
//!
//! Everything here runs on the host; the worker (evo-eval) moves it to the GPU.

use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use evo_core::{Value, Vars};

/// Element types of tensors crossing the ABI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ElemType {
    F16,
    Bf16,
    F32,
    /// FP8 e4m3 codes (see [`crate::fp8`]).
    E4m3,
    /// Raw bytes, compared as the integers 0..=255 (bit-exact outputs).
    U8,
}

impl ElemType {
    pub fn from_dtype(dtype: &str) -> Option<ElemType> {
        match dtype {
            "f16" => Some(ElemType::F16),
            "bf16" => Some(ElemType::Bf16),
            "f32" => Some(ElemType::F32),
            "e4m3" => Some(ElemType::E4m3),
            "u8" => Some(ElemType::U8),
            _ => None,
        }
    }

    /// The name [`ElemType::from_dtype`] reads.
    pub fn dtype_name(self) -> &'static str {
        match self {
            ElemType::F16 => "f16",
            ElemType::Bf16 => "bf16",
            ElemType::F32 => "f32",
            ElemType::E4m3 => "e4m3",
            ElemType::U8 => "u8",
        }
    }

    pub fn size(self) -> usize {
        match self {
            ElemType::F16 | ElemType::Bf16 => 2,
            ElemType::F32 => 4,
            ElemType::E4m3 | ElemType::U8 => 1,
        }
    }

    /// A quiet NaN, used to poison outputs before a launch.
    pub fn nan_bytes(self) -> Vec<u8> {
        match self {
            ElemType::F16 => 0x7e00u16.to_le_bytes().to_vec(),
            ElemType::Bf16 => 0x7fc0u16.to_le_bytes().to_vec(),
            ElemType::F32 => f32::NAN.to_le_bytes().to_vec(),
            ElemType::E4m3 => vec![0x7f],
            // No NaN in a byte: 0xFF is the e4m3 code of -NaN, which no finite input gives.
            ElemType::U8 => vec![0xff],
        }
    }

    pub fn encode(self, x: f32, out: &mut Vec<u8>) {
        match self {
            ElemType::F16 => out.extend(half::f16::from_f32(x).to_le_bytes()),
            ElemType::Bf16 => out.extend(half::bf16::from_f32(x).to_le_bytes()),
            ElemType::F32 => out.extend(x.to_le_bytes()),
            ElemType::E4m3 => out.push(crate::fp8::encode(x)),
            ElemType::U8 => out.push(x as u8),
        }
    }

    pub fn decode(self, bytes: &[u8]) -> f64 {
        match self {
            ElemType::F16 => half::f16::from_le_bytes([bytes[0], bytes[1]]).to_f64(),
            ElemType::Bf16 => half::bf16::from_le_bytes([bytes[0], bytes[1]]).to_f64(),
            ElemType::F32 => f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as f64,
            ElemType::E4m3 => crate::fp8::decode(bytes[0]) as f64,
            ElemType::U8 => bytes[0] as f64,
        }
    }
}

/// A tensor in host memory, as raw little-endian elements.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub elem: ElemType,
    pub bytes: Vec<u8>,
}

impl HostTensor {
    pub fn from_f32(elem: ElemType, values: &[f32]) -> HostTensor {
        let size = elem.size();
        let mut bytes = vec![0u8; values.len() * size];
        bytes
            .par_chunks_mut(CHUNK * size)
            .zip(values.par_chunks(CHUNK))
            .for_each(|(out, vals)| {
                let mut encoded = Vec::with_capacity(out.len());
                for &v in vals {
                    elem.encode(v, &mut encoded);
                }
                out.copy_from_slice(&encoded);
            });
        HostTensor { elem, bytes }
    }

    pub fn len(&self) -> usize {
        self.bytes.len() / self.elem.size()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn get(&self, i: usize) -> f64 {
        let s = self.elem.size();
        self.elem.decode(&self.bytes[i * s..(i + 1) * s])
    }

    pub fn to_f64(&self) -> Vec<f64> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }
}

/// Shape of one tensor of a call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorSpec {
    pub name: String,
    pub elem: ElemType,
    pub len: usize,
}

/// One kernel argument, described independently of where buffers live.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum ArgSlot {
    /// Pointer to input tensor `i`.
    Input(usize),
    /// Pointer to the output tensor.
    Output,
    I32(i32),
    I64(i64),
    F32(f32),
    /// A TMA tensor map over an input or a scratch buffer (a `const __grid_constant__`
    /// 128-byte parameter), encoded by the worker once the buffer has a device address.
    TensorMap(TensorMapSlot),
    /// Pointer to scratch buffer `i` of the variant (a family's `[[scratch]]`, in order):
    /// allocated by the worker, NaN-poisoned before every checked call.
    Scratch(usize),
    /// The problem's ABI argument `i` ([`crate::Problem::call_args`]) of the call being
    /// made: a family's `@abi` list names its arguments this way, so the worker passes each
    /// trial's own strides and scalars.
    Abi(usize),
}

/// The kind of call buffer a tensor map views.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MappedBuffer {
    /// One of the call's inputs (what every map viewed before scratch could be mapped, so
    /// a job or landscape that does not say is read as this).
    #[default]
    Input,
    /// One of the variant's `[[scratch]]` buffers.
    Scratch,
}

/// A tiled tensor map over one input or scratch buffer, as a problem or family asks for
/// it. Dimensions run innermost first; `rank` entries of `dims` and `box_dims` and
/// `rank - 1` of `strides_bytes` are used (the rest are ignored). The element type is the
/// buffer's. A stride taken from the call (`stride_abi`) is bound by
/// [`crate::bind_abi`], which writes it into `strides_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorMapSlot {
    /// The buffer's index among the call's inputs or its scratch buffers (`of`).
    #[serde(alias = "input")]
    pub buffer: usize,
    #[serde(default)]
    pub of: MappedBuffer,
    pub elem: ElemType,
    pub rank: u8,
    pub dims: [u64; 5],
    pub strides_bytes: [u64; 4],
    pub box_dims: [u32; 5],
    /// Shared-memory swizzle span in bytes: 0 (none), 32, 64 or 128.
    pub swizzle_bytes: u32,
    /// Per entry of `strides_bytes`: the index of the problem's ABI argument (an integer,
    /// in elements) that gives it for each call, or `None` where `strides_bytes` holds it.
    #[serde(default)]
    pub stride_abi: [Option<u16>; 4],
}

impl TensorMapSlot {
    /// Whether every stride is known (none waits for a call's ABI arguments).
    pub fn is_bound(&self) -> bool {
        self.stride_abi.iter().all(Option::is_none)
    }

    /// A 2-D map over a row-major `rows x cols` matrix with `row_stride` elements between
    /// rows, read in `box_rows x box_cols` boxes.
    #[allow(clippy::too_many_arguments)]
    pub fn matrix(
        input: usize,
        elem: ElemType,
        rows: u64,
        cols: u64,
        row_stride: u64,
        box_rows: u32,
        box_cols: u32,
        swizzle_bytes: u32,
    ) -> TensorMapSlot {
        TensorMapSlot {
            buffer: input,
            of: MappedBuffer::Input,
            elem,
            rank: 2,
            dims: [cols, rows, 1, 1, 1],
            strides_bytes: [row_stride * elem.size() as u64, 0, 0, 0],
            box_dims: [box_cols, box_rows, 1, 1, 1],
            swizzle_bytes,
            stride_abi: [None; 4],
        }
    }
}

/// How one tensor of a call lies in its buffer: logical dimensions (outermost first), the
/// element stride of each, and the buffer's length in elements. Element `(i0, .., in)` is
/// at offset `Σ ik · strides[k]`; the elements never overlap and every one is inside the
/// buffer (checked by [`Layout::new`]). Bytes of the buffer that hold no element are
/// padding: inputs carry a poison pattern there and an output's must stay untouched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub dims: Vec<usize>,
    pub strides: Vec<usize>,
    pub len: usize,
}

impl Layout {
    /// A layout after checking that its elements fit in `len` and do not overlap (sorted
    /// by stride, each stride must step over the whole extent of the smaller ones).
    pub fn new(dims: Vec<usize>, strides: Vec<usize>, len: usize) -> Result<Layout, String> {
        if dims.len() != strides.len() {
            return Err(format!(
                "{} dimensions but {} strides",
                dims.len(),
                strides.len()
            ));
        }
        let l = Layout { dims, strides, len };
        if l.elements() == 0 {
            return Ok(l);
        }
        let mut order: Vec<usize> = (0..l.dims.len()).filter(|&i| l.dims[i] > 1).collect();
        order.sort_by_key(|&i| l.strides[i]);
        let mut extent = 1usize; // offsets 0..extent hold the dimensions seen so far
        for &i in &order {
            if l.strides[i] < extent {
                return Err(format!(
                    "stride {} of dimension {i} overlaps the {extent} elements inside it",
                    l.strides[i]
                ));
            }
            extent += l.strides[i] * (l.dims[i] - 1);
        }
        if extent > len {
            return Err(format!(
                "elements reach offset {extent}, past the {len} allocated"
            ));
        }
        Ok(l)
    }

    /// The row-major layout of `dims` with no padding.
    pub fn contiguous(dims: &[usize]) -> Layout {
        let mut strides = vec![1usize; dims.len()];
        for i in (0..dims.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * dims[i + 1];
        }
        Layout {
            dims: dims.to_vec(),
            len: dims.iter().product(),
            strides,
        }
    }

    pub fn elements(&self) -> usize {
        self.dims.iter().product()
    }

    pub fn is_contiguous(&self) -> bool {
        *self == Layout::contiguous(&self.dims)
    }

    /// Offset of every logical row (all dimensions but the last) in row-major order, and
    /// the stride along the last dimension.
    fn rows(&self) -> (Vec<usize>, usize, usize) {
        let (outer, last) = match self.dims.split_last() {
            Some((last, outer)) => (outer, *last),
            None => (&[][..], 1),
        };
        let inner_stride = self.strides.last().copied().unwrap_or(1);
        let mut rows = vec![0usize];
        for (d, &n) in outer.iter().enumerate() {
            let stride = self.strides[d];
            rows = rows
                .iter()
                .flat_map(|&base| (0..n).map(move |i| base + i * stride))
                .collect();
        }
        (rows, last, inner_stride)
    }

    /// The buffer of this layout holding `logical` (row-major), padding filled with
    /// copies of `pad` (one element's bytes).
    pub fn scatter(&self, logical: &HostTensor, pad: &[u8]) -> HostTensor {
        let size = logical.elem.size();
        assert_eq!(
            logical.len(),
            self.elements(),
            "logical tensor of another size"
        );
        assert_eq!(pad.len(), size, "pad pattern of another element size");
        let mut bytes: Vec<u8> = pad.iter().copied().cycle().take(self.len * size).collect();
        let (rows, n, inner) = self.rows();
        if self.is_contiguous() {
            bytes.copy_from_slice(&logical.bytes);
        } else {
            // Rows never share an element (checked by `Layout::new`), so they are written in
            // parallel through one base pointer.
            struct Base(*mut u8);
            // SAFETY: each task writes only its own row's elements, all inside `bytes`.
            unsafe impl Sync for Base {}
            impl Base {
                fn at(&self, offset: usize) -> *mut u8 {
                    // SAFETY: callers pass offsets inside the buffer (asserted there).
                    unsafe { self.0.add(offset) }
                }
            }
            let base_ptr = Base(bytes.as_mut_ptr());
            let total = bytes.len();
            rows.par_iter().enumerate().for_each(|(r, &base)| {
                let src = &logical.bytes[r * n * size..(r + 1) * n * size];
                for j in 0..if inner == 1 { 1 } else { n } {
                    let (from, len) = if inner == 1 {
                        (0, n * size)
                    } else {
                        (j * size, size)
                    };
                    let at = (base + j * inner) * size;
                    assert!(at + len <= total, "element past the buffer");
                    // SAFETY: `at..at + len` is inside `bytes` (asserted) and belongs to
                    // this row alone; `src` does not alias `bytes`.
                    unsafe {
                        std::ptr::copy_nonoverlapping(src[from..].as_ptr(), base_ptr.at(at), len)
                    };
                }
            });
        }
        HostTensor {
            elem: logical.elem,
            bytes,
        }
    }

    /// The logical (row-major) tensor held in a buffer of this layout.
    pub fn gather(&self, elem: ElemType, buffer: &[u8]) -> HostTensor {
        let size = elem.size();
        let (rows, n, inner) = self.rows();
        let mut bytes = Vec::with_capacity(self.elements() * size);
        for &base in &rows {
            if inner == 1 {
                bytes.extend_from_slice(&buffer[base * size..(base + n) * size]);
            } else {
                for j in 0..n {
                    let at = (base + j * inner) * size;
                    bytes.extend_from_slice(&buffer[at..at + size]);
                }
            }
        }
        HostTensor { elem, bytes }
    }

    /// The first element-sized slot of `buffer` outside the tensor's elements whose bytes
    /// are not `pad` (a write into the padding), if any.
    pub fn padding_changed(&self, buffer: &[u8], pad: &[u8]) -> Option<usize> {
        if self.len == self.elements() {
            return None;
        }
        let size = pad.len();
        let mut element = vec![false; self.len];
        let (rows, n, inner) = self.rows();
        for &base in &rows {
            for j in 0..n {
                element[base + j * inner] = true;
            }
        }
        (0..self.len).find(|&i| !element[i] && buffer[i * size..(i + 1) * size] != *pad)
    }

    /// Short text for messages: `dims [2, 3, 77, 64] strides [...]`, or `contiguous`.
    pub fn describe(&self) -> String {
        if self.is_contiguous() {
            "contiguous".into()
        } else {
            format!(
                "strides {:?} (buffer of {} elements)",
                self.strides, self.len
            )
        }
    }
}

/// The part of a call the ABI leaves to its caller beyond the shape: each tensor's layout
/// and the problem's floating-point arguments. The correctness gate varies it per trial
/// ([`crate::Problem::varied_call`]); timing and an artifact's plain call use
/// [`crate::Problem::default_call`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// The inputs in [`crate::Problem::inputs`] order, then the output.
    pub layouts: Vec<Layout>,
    /// The problem's float arguments in ABI order (sdpa: `softmax_scale`).
    pub scalars: Vec<f32>,
}

impl Call {
    /// The output's layout.
    pub fn output(&self) -> &Layout {
        self.layouts.last().expect("a call has an output layout")
    }

    /// Short text for messages: the non-contiguous tensors and the scalars.
    pub fn describe(&self, names: &[String]) -> String {
        let mut parts: Vec<String> = self
            .layouts
            .iter()
            .zip(names)
            .filter(|(l, _)| !l.is_contiguous())
            .map(|(l, n)| format!("{n} {}", l.describe()))
            .collect();
        if parts.is_empty() {
            parts.push("contiguous tensors".into());
        }
        if !self.scalars.is_empty() {
            parts.push(format!("scalars {:?}", self.scalars));
        }
        parts.join(", ")
    }
}

/// Values the worker writes on the GPU into timing inputs (fresh for every replay).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Fill {
    /// Approximately normal, mean 0 and this standard deviation (e4m3: values then
    /// encoded with saturation).
    Normal(f32),
    /// Uniform in [lo, hi).
    Uniform(f32, f32),
}

/// The kinds of inputs the correctness gate feeds a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// Fresh random values (a new seed each time).
    Random,
    /// All zeros: catches uninitialised accumulators and 0/0.
    Zeros,
    /// Large magnitudes, as large as the problem allows without overflowing the output.
    Large,
    /// One-hot rows: a single 1 per row, so every output tells which element was read.
    OneHot,
    /// Random inputs with adversarial rows and heads among normal ones (problems that have
    /// rows: an all-zero query row, a head of zero or identical keys, rows whose scores
    /// are all very negative, a head of large magnitudes, one-hot rows). Problems without
    /// such structure treat it as `Random`.
    Rows,
}

impl InputKind {
    pub const ADVERSARIAL: [InputKind; 4] = [
        InputKind::Zeros,
        InputKind::Large,
        InputKind::OneHot,
        InputKind::Rows,
    ];
}

/// Error bounds: an element is bad when `|got - ref| > atol + rtol * |ref|`, where
/// `atol = atol_floor + atol_of_max * max|ref|`; the whole output must also have a
/// relative L2 error (‖got − ref‖ / ‖ref‖) at most `rel_l2` (skipped when ‖ref‖ = 0).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol_of_max: f64,
    pub atol_floor: f64,
    pub rel_l2: f64,
}

/// The GPU reference kernel of a problem: deliberately simple, float32 accumulation,
/// float32 output with the same layout as the candidate's output.
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceKernel {
    pub source: &'static str,
    pub entry: String,
    pub args: Vec<ArgSlot>,
    pub launch: evo_core::LaunchDims,
}

/// The original inputs of a problem whose kernel gets them encoded (FP8), the reference
/// kernel that computes the exact answer from them (float32 output, its own argument
/// list over these inputs), and the bound on the end-to-end error.
#[derive(Clone, Debug, PartialEq)]
pub struct EndToEnd {
    pub inputs: Vec<HostTensor>,
    pub reference: ReferenceKernel,
    pub tolerance: Tolerance,
}

/// For a problem whose kernels encode their inputs themselves (FP8 end to end): the inputs
/// as the encoding rule makes them (codes and scales, contiguous), the reference on them
/// (the decoded answer) and the tolerance a kernel on those inputs is held to: the trial's
/// verdict (the problem's bound on the exact answer is too loose to decide, see
/// docs/gate.md).
#[derive(Clone, Debug, PartialEq)]
pub struct Encoded {
    pub inputs: Vec<HostTensor>,
    pub reference: ReferenceKernel,
    pub kernel_tolerance: Tolerance,
}

pub(crate) fn int(shape: &Vars, name: &str) -> i64 {
    shape.get(name).and_then(Value::as_int).unwrap_or(0)
}

pub fn dtype(shape: &Vars) -> ElemType {
    shape
        .get("DTYPE")
        .and_then(Value::as_str)
        .and_then(ElemType::from_dtype)
        .unwrap_or(ElemType::F16)
}

/// A seeded generator for one input tensor.
pub fn rng(seed: u64, tensor: usize) -> rand_chacha::ChaCha8Rng {
    rand_chacha::ChaCha8Rng::seed_from_u64(
        seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(tensor as u64 + 1)),
    )
}

/// Elements per independently seeded chunk of [`seeded_values`].
const CHUNK: usize = 1 << 16;

/// `n` values of input tensor `tensor` for `seed`, filled chunk by chunk on all cores:
/// `fill` gets each chunk with its own generator, seeded from (seed, tensor, chunk), so
/// the values do not depend on the number of threads. For inputs that are not
/// [`InputFill`]s (the worker then generates them on the host while it holds the GPU).
pub fn seeded_values(
    seed: u64,
    tensor: usize,
    n: usize,
    fill: impl Fn(&mut rand_chacha::ChaCha8Rng, &mut [f32]) + Sync,
) -> Vec<f32> {
    let mut out = vec![0f32; n];
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| {
            let chunk_seed = seed ^ (c as u64).wrapping_mul(0xd1b5_4a32_d192_ed03);
            fill(&mut rng(chunk_seed, tensor), chunk);
        });
    out
}

/// `n` approximately normal samples (mean 0, standard deviation `scale`) for input
/// `tensor` of `seed`, from the counter-based generator [`counter_value`] on all cores:
/// the worker's GPU fill writes the same values bit for bit.
pub fn normal_values(seed: u64, tensor: usize, n: usize, scale: f32) -> Vec<f32> {
    counter_values(tensor_seed(seed, tensor), n, Fill::Normal(scale))
}

/// `n` values of [`counter_value`] for `seed`, in parallel.
pub fn counter_values(seed: u64, n: usize, fill: Fill) -> Vec<f32> {
    InputFill::Counter { seed, fill }.values(n)
}

/// The seed of input `tensor` of a trial's `seed`.
pub fn tensor_seed(seed: u64, tensor: usize) -> u64 {
    seed ^ 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(tensor as u64 + 1)
}

/// splitmix64's finalizer: the counter-based hash behind every generated value (the
/// worker's GPU copy is `gate_kernels.cu: evo_gate::mix`).
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Element `i` of a counter-based stream: splitmix64 of the seed and the index, as an
/// approximately normal value (the sum of four 16-bit uniforms, centred and scaled to unit
/// variance: Irwin-Hall, |x| < 3.47 standard deviations) or a uniform one. Integer sums and
/// one rounding, so the worker's GPU copy (`gate_kernels.cu: evo_fill`) gives the same bits.
pub fn counter_value(seed: u64, i: u64, fill: Fill) -> f32 {
    let h = mix(seed ^ mix(i));
    match fill {
        Fill::Normal(sd) => {
            let s = (h & 0xffff) + ((h >> 16) & 0xffff) + ((h >> 32) & 0xffff) + (h >> 48);
            (s as f32 - 131070.0) * (1.0 / 37837.23) * sd
        }
        Fill::Uniform(lo, hi) => lo + (hi - lo) * ((h >> 40) as f32 * (1.0 / 16777216.0)),
    }
}

/// One input of a trial as a function of its logical element index alone, so the worker
/// writes it on the GPU (`gate_kernels.cu: evo_fill`, straight into the call's layout) and
/// the host never builds it. [`InputFill::values`] is the CPU copy, equal bit for bit once
/// encoded (a GPU test holds the two together).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InputFill {
    /// [`counter_value`] of `seed` at each index.
    Counter { seed: u64, fill: Fill },
    /// All zeros (+0.0).
    Zeros,
    /// Rows of `cols` elements, each zero but for a 1 at [`one_hot_column`] of the row.
    OneHot { seed: u64, cols: usize },
    /// Input `tensor` (0 q, 1 k, 2 v; `seq` rows per head) of attention's `Rows` kind for
    /// the trial `seed` (`problems::sdpa`'s `rows_value`).
    AttentionRows {
        seed: u64,
        tensor: usize,
        seq: usize,
        head_dim: usize,
        very_negative: f32,
    },
}

/// The column of the 1 in row `row` of an [`InputFill::OneHot`] tensor.
pub fn one_hot_column(seed: u64, row: u64, cols: usize) -> u64 {
    mix(seed ^ mix(row)) % cols.max(1) as u64
}

impl InputFill {
    /// Logical element `i`.
    pub fn value(&self, i: u64) -> f32 {
        match *self {
            InputFill::Counter { seed, fill } => counter_value(seed, i, fill),
            InputFill::Zeros => 0.0,
            InputFill::AttentionRows {
                seed,
                tensor,
                seq,
                head_dim,
                very_negative,
            } => crate::problems::rows_value(seed, tensor, seq, head_dim, very_negative, i),
            InputFill::OneHot { seed, cols } => {
                let cols = cols.max(1) as u64;
                if i % cols == one_hot_column(seed, i / cols, cols as usize) {
                    1.0
                } else {
                    0.0
                }
            }
        }
    }

    /// The first `n` elements, in parallel.
    pub fn values(&self, n: usize) -> Vec<f32> {
        let mut out = vec![0f32; n];
        out.par_chunks_mut(CHUNK)
            .enumerate()
            .for_each(|(c, chunk)| {
                for (j, x) in chunk.iter_mut().enumerate() {
                    *x = self.value((c * CHUNK + j) as u64);
                }
            });
        out
    }
}

/// Standard normal samples, scaled.
pub fn normal(rng: &mut impl Rng, n: usize, scale: f32) -> Vec<f32> {
    let mut out = vec![0f32; n];
    fill_normal(rng, &mut out, scale);
    out
}

fn fill_normal(rng: &mut impl Rng, out: &mut [f32], scale: f32) {
    // Ziggurat sampling: a few times faster than Box-Muller's logarithm and sine.
    for x in out {
        *x = rng.sample::<f32, _>(rand_distr::StandardNormal) * scale;
    }
}

/// The magnitude of [`plant_outliers`]' outliers: about ten times a normal slice's maximum.
pub const OUTLIER: f32 = 40.0;

/// In every slice of `slice_len` values that is not all zero, one element at a random
/// position becomes ±`magnitude`: an outlier like an LLM activation's, which a quantizer
/// has to find for its scale (one that takes the maximum of part of a slice clips it).
pub fn plant_outliers(rng: &mut impl Rng, values: &mut [f32], slice_len: usize, magnitude: f32) {
    for slice in values.chunks_mut(slice_len) {
        if slice.iter().all(|x| *x == 0.0) {
            continue;
        }
        let i = rng.random_range(0..slice.len());
        slice[i] = if rng.random::<bool>() {
            magnitude
        } else {
            -magnitude
        };
    }
}

/// Rows of `cols` elements, each zero but for a single 1 at a random column.
pub fn one_hot_rows(rng: &mut impl Rng, rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; rows * cols];
    for r in 0..rows {
        out[r * cols + rng.random_range(0..cols)] = 1.0;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tensor-map slot written before maps over scratch existed (`input`, no `of`) reads
    /// as a map over that input; a scratch map survives the round trip.
    #[test]
    fn tensor_map_slots_of_old_jobs_are_input_maps() {
        let old = r#"{"input":2,"elem":"f16","rank":2,"dims":[64,8,1,1,1],"strides_bytes":[128,0,0,0],"box_dims":[64,8,1,1,1],"swizzle_bytes":128}"#;
        let m: TensorMapSlot = serde_json::from_str(old).unwrap();
        assert_eq!((m.buffer, m.of), (2, MappedBuffer::Input));
        assert_eq!(
            m,
            TensorMapSlot::matrix(2, ElemType::F16, 8, 64, 64, 8, 64, 128)
        );
        let mut scratch = m;
        scratch.of = MappedBuffer::Scratch;
        let text = serde_json::to_string(&scratch).unwrap();
        assert!(text.contains(r#""of":"scratch""#), "{text}");
        assert_eq!(
            serde_json::from_str::<TensorMapSlot>(&text).unwrap(),
            scratch
        );
    }

    #[test]
    fn encode_decode_round_trip() {
        for elem in [ElemType::F16, ElemType::Bf16, ElemType::F32, ElemType::E4m3] {
            let t = HostTensor::from_f32(elem, &[1.5, -2.0, 0.0, 256.0]);
            assert_eq!(t.len(), 4);
            assert_eq!(t.to_f64(), vec![1.5, -2.0, 0.0, 256.0]);
            let nan = HostTensor {
                elem,
                bytes: elem.nan_bytes(),
            };
            assert!(nan.get(0).is_nan());
        }
        let bytes = HostTensor::from_f32(ElemType::U8, &[0.0, 7.0, 255.0]);
        assert_eq!(bytes.bytes, vec![0, 7, 255]);
        assert_eq!(bytes.to_f64(), vec![0.0, 7.0, 255.0]);
    }

    #[test]
    fn generators_are_seeded() {
        let a = normal(&mut rng(1, 0), 1001, 1.0);
        let b = normal(&mut rng(1, 0), 1001, 1.0);
        let c = normal(&mut rng(1, 1), 1001, 1.0);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mean = a.iter().sum::<f32>() / a.len() as f32;
        let var = a.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / a.len() as f32;
        assert!(mean.abs() < 0.1 && (var - 1.0).abs() < 0.15, "{mean} {var}");
        // Chunked generation: the same for a seed, different per tensor, and normal.
        let n = 3 * CHUNK + 17;
        let x = normal_values(7, 0, n, 2.0);
        assert_eq!(x, normal_values(7, 0, n, 2.0));
        assert_ne!(x, normal_values(7, 1, n, 2.0));
        assert_ne!(x[..CHUNK], x[CHUNK..2 * CHUNK], "chunks must not repeat");
        let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(
            mean.abs() < 0.02 && (var - 4.0).abs() < 0.05,
            "{mean} {var}"
        );
        let t = HostTensor::from_f32(ElemType::F16, &x);
        assert_eq!(t.len(), n);
        assert_eq!(t.get(n - 1), half::f16::from_f32(x[n - 1]).to_f64());
        let oh = one_hot_rows(&mut rng(2, 0), 7, 5);
        for r in 0..7 {
            assert_eq!(oh[r * 5..r * 5 + 5].iter().sum::<f32>(), 1.0);
        }
    }
}
