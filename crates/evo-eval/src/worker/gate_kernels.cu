// Kernels the worker runs around the candidate's launches (worker/gpu_checks.rs): the inputs of
// correctness trials and fresh timing inputs for every replay (evo_fill, straight into a call's
// strided layout), poison and padding patterns (evo_pattern), the comparison of an output with
// its float32 reference (evo_absmax, then evo_compare), and byte-for-byte checks of regions
// (evo_differ: inputs unchanged, guard regions intact, a repeat launch identical). Each kernel
// takes an array of jobs, one per blockIdx.y, so a check is a few launches whatever the number
// of tensors. None of them needs to be fast, only far cheaper than the reference.

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

// Element types, as evo_kernels::harness::ElemType (gpu_checks.rs: elem_code).
enum : int { ELEM_F16 = 0, ELEM_BF16 = 1, ELEM_F32 = 2, ELEM_E4M3 = 3, ELEM_U8 = 4 };

namespace evo_gate {

// splitmix64's finalizer: a counter-based hash, the same on every thread count.
__device__ __forceinline__ unsigned long long mix(unsigned long long x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Approximately standard normal: the sum of four 16-bit uniforms, centred and scaled to unit
// variance (Irwin-Hall with n = 4; |x| < 3.5). Integer sums and one rounding, so a host copy
// can reproduce it bit for bit.
__device__ __forceinline__ float normal_of(unsigned long long h) {
    const int s = int(h & 0xffff) + int((h >> 16) & 0xffff) + int((h >> 32) & 0xffff) + int(h >> 48);
    return (float(s) - 131070.0f) * (1.0f / 37837.23f);
}

__device__ __forceinline__ float uniform_of(unsigned long long h) {
    return float(h >> 40) * (1.0f / 16777216.0f);
}

__device__ __forceinline__ float load(const void* p, int elem, unsigned long long i) {
    switch (elem) {
    case ELEM_F16: return __half2float(static_cast<const __half*>(p)[i]);
    case ELEM_BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case ELEM_F32: return static_cast<const float*>(p)[i];
    case ELEM_E4M3: return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<const unsigned char*>(p)[i], __NV_E4M3)));
    default: return float(static_cast<const unsigned char*>(p)[i]);
    }
}

// How a tensor's logical elements lie in its buffer (harness::Layout): element i, row-major
// over dims, is at sum_k idx_k * strides[k]; rank 0: element i at i.
enum : int { MAX_RANK = 6 };
struct Strided {
    unsigned long long dims[MAX_RANK], strides[MAX_RANK];
    int rank, unused;
};

__device__ __forceinline__ unsigned long long offset_of(const Strided& l, unsigned long long i) {
    if (l.rank == 0) return i;
    unsigned long long off = 0;
    for (int k = l.rank - 1; k >= 0; --k) {
        const unsigned long long d = l.dims[k];
        off += (i % d) * l.strides[k];
        i /= d;
    }
    return off;
}

__device__ __forceinline__ void store(void* p, int elem, unsigned long long at, float x, unsigned long long h) {
    switch (elem) {
    case ELEM_F16: static_cast<__half*>(p)[at] = __float2half_rn(x); break;
    case ELEM_BF16: static_cast<__nv_bfloat16*>(p)[at] = __float2bfloat16_rn(x); break;
    case ELEM_F32: static_cast<float*>(p)[at] = x; break;
    case ELEM_E4M3: static_cast<unsigned char*>(p)[at] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); break;
    default: static_cast<unsigned char*>(p)[at] = static_cast<unsigned char>(h >> 56); break;
    }
}

__device__ __forceinline__ unsigned long long global_index() {
    return static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ unsigned long long global_stride() {
    return static_cast<unsigned long long>(gridDim.x) * blockDim.x;
}

struct Sum {
    template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
    template <typename T> __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};
struct Min {
    template <typename T> __device__ T operator()(T a, T b) const { return a < b ? a : b; }
};

// `op` over the block's values, valid in thread 0; every thread of the block must call it.
// One atomic per block instead of one per thread: the per-thread atomics on a single result
// serialised in the L2 and cost more than the comparison itself.
template <typename T, typename Op>
__device__ T block_reduce(T v, T identity, Op op) {
    __shared__ T partial[32];
    for (int off = 16; off > 0; off /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
    __syncthreads();  // partial[] may still be read by a previous call's warp 0
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? partial[lane] : identity;
        for (int off = 16; off > 0; off /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
    }
    return v;
}

}  // namespace evo_gate

// One tensor to fill: n logical elements of type elem at ptr (laid out by `layout`), as
// harness::InputFill::value: kind 0 normal with standard deviation a, 1 uniform in [a, b) (both
// from seed, the tensor's own), 2 zeros, 3 rows of `cols` elements each zero but for a 1 at
// mix(seed ^ mix(row)) % cols, 4 input `tensor` of attention's Rows kind for the trial `seed`
// (cols = head_dim, seq rows per head, a = the very-negative query value). e4m3 values are
// encoded with saturation; u8 takes the hash's top byte.
struct FillJob {
    unsigned long long ptr, n, seed, cols, seq;
    int elem, kind, tensor, unused;
    float a, b;
    evo_gate::Strided layout;
};

namespace evo_gate {

// harness::tensor_seed: the seed of input t of a trial.
__device__ __forceinline__ unsigned long long tensor_seed(unsigned long long seed, unsigned long long t) {
    return seed ^ (0x9e3779b97f4a7c15ull * (t + 1));
}

// problems/sdpa.rs: rows_value, element i of the job's tensor (the CPU copy's keys and cases:
// 0 Normal, 1 ZeroKeys, 2 IdenticalKeys, 3 Large, 4 OneHot, 5 VeryNegative).
__device__ float attention_rows(const FillJob& j, unsigned long long i) {
    const unsigned long long hd = j.cols, row = i / hd, col = i % hd, bh = row / j.seq;
    const unsigned long long t = j.tensor, base_seed = tensor_seed(j.seed, t);
    const int c = static_cast<int>(bh < 6 ? (bh + j.seed) % 6 : mix(tensor_seed(j.seed, 0x0a0d) ^ mix(bh)) % 6);
    float x = normal_of(mix(base_seed ^ mix(i)));
    if (c == 1 && t == 1) x = 0.0f;
    else if (c == 2 && t == 1) x = normal_of(mix(base_seed ^ mix(bh * j.seq * hd + col)));
    else if (c == 3 && t == 2) x *= 16.0f;
    else if (c == 4) x = col == mix(tensor_seed(j.seed ^ 0x0e0eull, t) ^ mix(row)) % hd ? 1.0f : 0.0f;
    else if (c == 5 && t == 1 && col == 0) x = 4.0f;
    else if (c == 5 && t == 0) x = col == 0 ? -j.a : 0.0f;
    if (t == 0 && c != 4 && mix(tensor_seed(j.seed, 0x0a0e) ^ mix(row)) % 8 == 0) x = 0.0f;
    return x;
}

}  // namespace evo_gate

extern "C" __global__ void evo_fill(const FillJob* jobs) {
    const FillJob& j = jobs[blockIdx.y];
    for (unsigned long long i = evo_gate::global_index(); i < j.n; i += evo_gate::global_stride()) {
        const unsigned long long h = evo_gate::mix(j.seed ^ evo_gate::mix(i));
        float x;
        switch (j.kind) {
        case 0: x = evo_gate::normal_of(h) * j.a; break;
        case 1: x = j.a + (j.b - j.a) * evo_gate::uniform_of(h); break;
        case 2: x = 0.0f; break;
        case 3: x = i % j.cols == evo_gate::mix(j.seed ^ evo_gate::mix(i / j.cols)) % j.cols ? 1.0f : 0.0f; break;
        default: x = evo_gate::attention_rows(j, i); break;
        }
        evo_gate::store(reinterpret_cast<void*>(j.ptr), j.elem, evo_gate::offset_of(j.layout, i), x, h);
    }
}

// The `size`-byte pattern (the low bytes of `pattern`) written at each of the n logical elements
// of a layout (rank 0: every element slot of a buffer): NaN poison, or NaN over an output's
// elements so only its padding is left to compare.
struct PatternJob {
    unsigned long long ptr, n;
    unsigned int pattern;
    int size;
    evo_gate::Strided layout;
};

extern "C" __global__ void evo_pattern(const PatternJob* jobs) {
    const PatternJob& j = jobs[blockIdx.y];
    unsigned char* p = reinterpret_cast<unsigned char*>(j.ptr);
    for (unsigned long long i = evo_gate::global_index(); i < j.n; i += evo_gate::global_stride()) {
        const unsigned long long at = evo_gate::offset_of(j.layout, i) * j.size;
        for (int b = 0; b < j.size; ++b) p[at + b] = static_cast<unsigned char>(j.pattern >> (8 * b));
    }
}

// What a comparison found (gpu_checks.rs: STATS, 64 bytes). The host zeroes it, with first_bad
// = ~0, before the two passes.
struct CompareStats {
    unsigned long long not_finite, bad, first_bad, ref_not_finite;
    double err2, ref2;
    unsigned long long max_abs_bits;  // a non-negative double: compares as an integer
    unsigned int max_ref_bits;        // a non-negative float, likewise
    unsigned int unused;
};

// One output of n logical elements of type elem at got (laid out by `layout`) against its
// float32 reference (contiguous, logical order). Arithmetic in double, as compare.rs's.
struct CompareJob {
    unsigned long long got, ref, n, stats;
    int elem, unused;
    double rtol, atol_of_max, atol_floor;
    evo_gate::Strided layout;
};

// Pass 1: max |ref| of every job (the tolerance's atol is relative to it) and the reference's
// non-finite elements (a reference that is not finite checks nothing).
extern "C" __global__ void evo_absmax(const CompareJob* jobs) {
    const CompareJob& j = jobs[blockIdx.y];
    const float* ref = reinterpret_cast<const float*>(j.ref);
    CompareStats* st = reinterpret_cast<CompareStats*>(j.stats);
    float m = 0.0f;
    unsigned long long not_finite = 0;
    for (unsigned long long i = evo_gate::global_index(); i < j.n; i += evo_gate::global_stride()) {
        const float r = ref[i];
        if (isfinite(r)) m = fmaxf(m, fabsf(r));
        else ++not_finite;
    }
    m = evo_gate::block_reduce(m, 0.0f, evo_gate::Max());
    not_finite = evo_gate::block_reduce(not_finite, 0ull, evo_gate::Sum());
    if (threadIdx.x == 0) {
        if (m != 0.0f) atomicMax(&st->max_ref_bits, __float_as_uint(m));
        if (not_finite) atomicAdd(&st->ref_not_finite, not_finite);
    }
}

// Pass 2: an element is bad when it is NaN or Inf, or |got - ref| > atol_floor + atol_of_max *
// max|ref| + rtol * |ref| (compare.rs's rule, in double as there); the L2 sums give the relative
// error.
extern "C" __global__ void evo_compare(const CompareJob* jobs) {
    const CompareJob& j = jobs[blockIdx.y];
    const float* ref = reinterpret_cast<const float*>(j.ref);
    CompareStats* st = reinterpret_cast<CompareStats*>(j.stats);
    const double atol = j.atol_floor + j.atol_of_max * double(__uint_as_float(st->max_ref_bits));
    unsigned long long not_finite = 0, bad = 0, first = ~0ull;
    double err2 = 0.0, ref2 = 0.0, max_abs = 0.0;
    for (unsigned long long i = evo_gate::global_index(); i < j.n; i += evo_gate::global_stride()) {
        const float g = evo_gate::load(reinterpret_cast<const void*>(j.got), j.elem, evo_gate::offset_of(j.layout, i));
        const double r = ref[i];
        bool is_bad;
        if (!isfinite(g)) {
            ++not_finite;
            is_bad = true;
        } else {
            const double e = fabs(double(g) - r);
            max_abs = fmax(max_abs, e);
            err2 += e * e;
            is_bad = e > atol + j.rtol * fabs(r);
        }
        ref2 += r * r;
        if (is_bad) {
            ++bad;
            first = first < i ? first : i;
        }
    }
    not_finite = evo_gate::block_reduce(not_finite, 0ull, evo_gate::Sum());
    bad = evo_gate::block_reduce(bad, 0ull, evo_gate::Sum());
    first = evo_gate::block_reduce(first, ~0ull, evo_gate::Min());
    err2 = evo_gate::block_reduce(err2, 0.0, evo_gate::Sum());
    ref2 = evo_gate::block_reduce(ref2, 0.0, evo_gate::Sum());
    max_abs = evo_gate::block_reduce(max_abs, 0.0, evo_gate::Max());
    if (threadIdx.x != 0) return;
    if (not_finite) atomicAdd(&st->not_finite, not_finite);
    if (bad) {
        atomicAdd(&st->bad, bad);
        atomicMin(&st->first_bad, first);
    }
    if (err2 != 0.0) atomicAdd(&st->err2, err2);
    if (ref2 != 0.0) atomicAdd(&st->ref2, ref2);
    if (max_abs != 0.0) atomicMax(&st->max_abs_bits, static_cast<unsigned long long>(__double_as_longlong(max_abs)));
}

// Units of `unit` bytes of region a (n bytes) that differ from b; b of pattern_len > 0 bytes
// is a pattern repeated (guard regions, padding), else a region as long as a. out: {count,
// first differing unit (~0 if none)}, zeroed by the host with first = ~0.
struct DifferJob {
    unsigned long long a, b, n, pattern_len, out, unit;
};

extern "C" __global__ void evo_differ(const DifferJob* jobs) {
    const DifferJob& j = jobs[blockIdx.y];
    const unsigned char* a = reinterpret_cast<const unsigned char*>(j.a);
    const unsigned char* b = reinterpret_cast<const unsigned char*>(j.b);
    unsigned long long* out = reinterpret_cast<unsigned long long*>(j.out);
    const unsigned long long unit = j.unit ? j.unit : 1, units = j.n / unit;
    unsigned long long count = 0, first = ~0ull;
    const bool whole_pattern = j.pattern_len > 0 && 16 % j.pattern_len == 0;
    if (unit == 1 && (j.pattern_len == 0 || whole_pattern) && (j.a | j.n) % 16 == 0 &&
        (j.pattern_len > 0 || j.b % 16 == 0)) {
        // Byte for byte, 16 bytes a load (a guard region's pattern, or a region as long as a):
        // a byte of x = a ^ b is nonzero where they differ; ((x & 0x7f..) + 0x7f.. | x) & 0x80..
        // keeps one bit per such byte.
        const uint4* a16 = reinterpret_cast<const uint4*>(a);
        const uint4* b16 = reinterpret_cast<const uint4*>(b);
        uint4 pattern = make_uint4(0, 0, 0, 0);
        if (j.pattern_len) {
            unsigned char bytes[16];
            for (int k = 0; k < 16; ++k) bytes[k] = b[k % j.pattern_len];
            pattern = make_uint4(
                bytes[0] | bytes[1] << 8 | bytes[2] << 16 | unsigned(bytes[3]) << 24,
                bytes[4] | bytes[5] << 8 | bytes[6] << 16 | unsigned(bytes[7]) << 24,
                bytes[8] | bytes[9] << 8 | bytes[10] << 16 | unsigned(bytes[11]) << 24,
                bytes[12] | bytes[13] << 8 | bytes[14] << 16 | unsigned(bytes[15]) << 24);
        }
        for (unsigned long long w = evo_gate::global_index(); w < j.n / 16; w += evo_gate::global_stride()) {
            const uint4 x = a16[w], y = j.pattern_len ? pattern : b16[w];
            const unsigned int words[4] = {x.x ^ y.x, x.y ^ y.y, x.z ^ y.z, x.w ^ y.w};
            for (int k = 0; k < 4; ++k) {
                const unsigned int d = words[k];
                const unsigned int bytes = (((d & 0x7f7f7f7fu) + 0x7f7f7f7fu) | d) & 0x80808080u;
                if (bytes) {
                    count += __popc(bytes);
                    const unsigned long long at = w * 16 + 4 * k + (__ffs(bytes) - 1) / 8;
                    first = first < at ? first : at;
                }
            }
        }
    } else {
        for (unsigned long long u = evo_gate::global_index(); u < units; u += evo_gate::global_stride()) {
            bool differs = false;
            for (unsigned long long i = u * unit; i < (u + 1) * unit; ++i)
                differs |= a[i] != (j.pattern_len ? b[i % j.pattern_len] : b[i]);
            if (differs) {
                ++count;
                first = first < u ? first : u;
            }
        }
    }
    count = evo_gate::block_reduce(count, 0ull, evo_gate::Sum());
    first = evo_gate::block_reduce(first, ~0ull, evo_gate::Min());
    if (threadIdx.x == 0 && count) {
        atomicAdd(&out[0], count);
        atomicMin(&out[1], first);
    }
}

// A checksum of n bytes at ptr, added to *out (zeroed by the host): the wrapping sum over its
// 8-byte words (the last zero-padded) of mix(word ^ mix(index)). A sum, so the order the blocks
// add in does not matter; any change of the bytes changes it but with probability 2^-64. Kept
// references are checked with it before each use (a kernel's stray write cannot change another
// variant's verdict).
struct ChecksumJob {
    unsigned long long ptr, n, out;
};

extern "C" __global__ void evo_checksum(const ChecksumJob* jobs) {
    const ChecksumJob& j = jobs[blockIdx.y];
    const unsigned char* p = reinterpret_cast<const unsigned char*>(j.ptr);
    const unsigned long long words = (j.n + 7) / 8;
    const bool aligned = j.ptr % 8 == 0;
    unsigned long long sum = 0;
    for (unsigned long long i = evo_gate::global_index(); i < words; i += evo_gate::global_stride()) {
        unsigned long long w = 0;
        if (aligned && 8 * i + 8 <= j.n) {
            w = reinterpret_cast<const unsigned long long*>(p)[i];
        } else {
            for (unsigned long long b = 0; b < 8 && 8 * i + b < j.n; ++b)
                w |= static_cast<unsigned long long>(p[8 * i + b]) << (8 * b);
        }
        sum += evo_gate::mix(w ^ evo_gate::mix(i));
    }
    sum = evo_gate::block_reduce(sum, 0ull, evo_gate::Sum());
    if (threadIdx.x == 0 && sum) atomicAdd(reinterpret_cast<unsigned long long*>(j.out), sum);
}
