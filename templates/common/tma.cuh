#pragma once
// Hopper tensor memory accelerator (sm_90): bulk tensor copies global -> shared described by a
// tensor map, completing on an mbarrier through its transaction count. Facts from the PTX ISA
// (cp.async.bulk.tensor, mbarrier expect-tx) and CUTLASS's cute/arch/copy_sm90_tma.hpp; the
// code is evo's own. Use with common/mbarrier.cuh (init, parity wait).
//
// Protocol of one stage: one thread calls mbar_arrive_expect_tx(bar, bytes of every box that
// lands on this barrier) and issues the copies; consumers wait on the barrier's phase parity.
// The barrier completes its phase when its arrival count is reached AND every expected byte
// has landed. The tensor map is the host's cuTensorMapEncodeTiled result passed as a
// `const __grid_constant__ TmaDescriptor` kernel parameter (taking its address gives the
// generic address of the parameter, which is what the instructions want). NVRTC has no
// <cuda.h>: TmaDescriptor stands in for CUtensorMap (same size and alignment).
// Coordinates are in elements, innermost dimension first, and may lie outside the tensor:
// out-of-bounds elements are written as zero (CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) and still
// count towards the transaction bytes.

namespace evo {

struct alignas(64) TmaDescriptor {
    unsigned long long opaque[16];
};

// Arrives on `bar` once and raises its expected transaction count by `bytes`.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
    const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(bar));
    asm volatile(
        "{ .reg .b64 evo_tma_state;\n"
        "mbarrier.arrive.expect_tx.shared::cta.b64 evo_tma_state, [%0], %1;\n"
        "}\n" ::"r"(b),
        "r"(bytes)
        : "memory");
}

// Fetches the tensor map into the constant cache ahead of its first use.
__device__ __forceinline__ void tma_prefetch_descriptor(const TmaDescriptor* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

// Copies the box at (c0, c1) of a 2-D tensor map into shared memory at `dst` (128-byte aligned;
// 1024-byte aligned for the 128-byte swizzle), completing `bytes` on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaDescriptor* map,
                                            unsigned long long* bar, int c0, int c1) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(bar));
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(d),
        "l"(map), "r"(b), "r"(c0), "r"(c1)
        : "memory");
}

// The same for a 3-D tensor map, box at (c0, c1, c2).
__device__ __forceinline__ void tma_load_3d(void* dst, const TmaDescriptor* map,
                                            unsigned long long* bar, int c0, int c1, int c2) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(bar));
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(d),
        "l"(map), "r"(b), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}

// The same for a 4-D tensor map, box at (c0, c1, c2, c3).
__device__ __forceinline__ void tma_load_4d(void* dst, const TmaDescriptor* map,
                                            unsigned long long* bar, int c0, int c1, int c2, int c3) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(bar));
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(d),
        "l"(map), "r"(b), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}

// Makes this thread's generic-proxy shared-memory writes visible to the async proxy (TMA,
// wgmma operand reads): call after writing shared memory by threads and before a barrier
// that hands it to wgmma or a TMA store.
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Fence after mbarrier.init so the async proxy (TMA completions) sees initialised barriers.
__device__ __forceinline__ void fence_mbarrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

}  // namespace evo
