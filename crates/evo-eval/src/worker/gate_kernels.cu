// Kernels the worker runs around the candidate's timed launches (worker/gpu_checks.rs):
// fresh timing inputs for every replay (evo_fill), the comparison of a timed output with
// its float32 reference (evo_absmax, then evo_compare), and byte-for-byte checks of
// regions (evo_differ: inputs unchanged, guard regions intact). Each kernel takes an array
// of jobs, one per blockIdx.y, so a replay's checks are a few launches whatever the number
// of input sets. None of them needs to be fast, only far cheaper than the reference.

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

__device__ __forceinline__ unsigned long long global_index() {
    return static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ unsigned long long global_stride() {
    return static_cast<unsigned long long>(gridDim.x) * blockDim.x;
}

}  // namespace evo_gate

// One tensor to fill: n elements of type elem at ptr, from seed; kind 0: normal with standard
// deviation a, kind 1: uniform in [a, b). e4m3 values are encoded with saturation.
struct FillJob {
    unsigned long long ptr, n, seed;
    int elem, kind;
    float a, b;
};

extern "C" __global__ void evo_fill(const FillJob* jobs) {
    const FillJob j = jobs[blockIdx.y];
    for (unsigned long long i = evo_gate::global_index(); i < j.n; i += evo_gate::global_stride()) {
        const unsigned long long h = evo_gate::mix(j.seed ^ evo_gate::mix(i));
        const float x = j.kind == 0 ? evo_gate::normal_of(h) * j.a : j.a + (j.b - j.a) * evo_gate::uniform_of(h);
        switch (j.elem) {
        case ELEM_F16: reinterpret_cast<__half*>(j.ptr)[i] = __float2half_rn(x); break;
        case ELEM_BF16: reinterpret_cast<__nv_bfloat16*>(j.ptr)[i] = __float2bfloat16_rn(x); break;
        case ELEM_F32: reinterpret_cast<float*>(j.ptr)[i] = x; break;
        case ELEM_E4M3:
            reinterpret_cast<unsigned char*>(j.ptr)[i] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
            break;
        default: reinterpret_cast<unsigned char*>(j.ptr)[i] = static_cast<unsigned char>(h >> 56); break;
        }
    }
}

// What a comparison found (gpu_checks.rs: CompareStats, 48 bytes). The host zeroes it, with
// first_bad = ~0, before the two passes.
struct CompareStats {
    unsigned long long not_finite, bad, first_bad;
    double err2, ref2;
    unsigned int max_abs_bits, max_ref_bits;  // non-negative floats compare as integers
};

// One output of n elements of type elem against its float32 reference (same logical order).
struct CompareJob {
    unsigned long long got, ref, n, stats;
    int elem, pad;
    float rtol, atol_of_max, atol_floor, unused;
};

// Pass 1: max |ref| of every job (the tolerance's atol is relative to it).
extern "C" __global__ void evo_absmax(const CompareJob* jobs) {
    const CompareJob j = jobs[blockIdx.y];
    const float* ref = reinterpret_cast<const float*>(j.ref);
    CompareStats* st = reinterpret_cast<CompareStats*>(j.stats);
    float m = 0.0f;
    for (unsigned long long i = evo_gate::global_index(); i < j.n; i += evo_gate::global_stride())
        m = fmaxf(m, fabsf(ref[i]));
    for (int off = 16; off > 0; off /= 2)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if ((threadIdx.x & 31) == 0)
        atomicMax(&st->max_ref_bits, __float_as_uint(m));
}

// Pass 2: an element is bad when it is NaN or Inf, or |got - ref| > atol_floor +
// atol_of_max * max|ref| + rtol * |ref| (compare.rs's rule); the L2 sums give the relative
// error.
extern "C" __global__ void evo_compare(const CompareJob* jobs) {
    const CompareJob j = jobs[blockIdx.y];
    const float* ref = reinterpret_cast<const float*>(j.ref);
    CompareStats* st = reinterpret_cast<CompareStats*>(j.stats);
    const float atol = j.atol_floor + j.atol_of_max * __uint_as_float(st->max_ref_bits);
    unsigned long long not_finite = 0, bad = 0, first = ~0ull;
    double err2 = 0.0, ref2 = 0.0;
    float max_abs = 0.0f;
    for (unsigned long long i = evo_gate::global_index(); i < j.n; i += evo_gate::global_stride()) {
        const float g = evo_gate::load(reinterpret_cast<const void*>(j.got), j.elem, i);
        const float r = ref[i];
        bool is_bad;
        if (!isfinite(g)) {
            ++not_finite;
            is_bad = true;
        } else {
            const float e = fabsf(g - r);
            max_abs = fmaxf(max_abs, e);
            err2 += double(e) * double(e);
            is_bad = e > atol + j.rtol * fabsf(r);
        }
        ref2 += double(r) * double(r);
        if (is_bad) {
            ++bad;
            first = first < i ? first : i;
        }
    }
    if (not_finite) atomicAdd(&st->not_finite, not_finite);
    if (bad) {
        atomicAdd(&st->bad, bad);
        atomicMin(&st->first_bad, first);
    }
    if (err2 != 0.0) atomicAdd(&st->err2, err2);
    if (ref2 != 0.0) atomicAdd(&st->ref2, ref2);
    if (max_abs != 0.0f) atomicMax(&st->max_abs_bits, __float_as_uint(max_abs));
}

// Bytes of region a that differ from b; b of pattern_len > 0 bytes is a pattern repeated
// (guard regions), else a region as long as a. out: {count, first differing byte (~0 if
// none)}, zeroed by the host with first = ~0.
struct DifferJob {
    unsigned long long a, b, n, pattern_len, out;
};

extern "C" __global__ void evo_differ(const DifferJob* jobs) {
    const DifferJob j = jobs[blockIdx.y];
    const unsigned char* a = reinterpret_cast<const unsigned char*>(j.a);
    const unsigned char* b = reinterpret_cast<const unsigned char*>(j.b);
    unsigned long long* out = reinterpret_cast<unsigned long long*>(j.out);
    unsigned long long count = 0, first = ~0ull;
    for (unsigned long long i = evo_gate::global_index(); i < j.n; i += evo_gate::global_stride()) {
        const unsigned char want = j.pattern_len ? b[i % j.pattern_len] : b[i];
        if (a[i] != want) {
            ++count;
            first = first < i ? first : i;
        }
    }
    if (count) {
        atomicAdd(&out[0], count);
        atomicMin(&out[1], first);
    }
}
