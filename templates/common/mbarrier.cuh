#pragma once
// Shared-memory barriers (sm_80+) for producer/consumer pipelines inside one CTA:
// mbarrier objects (init, arrive, cp.async-tracked arrive, parity wait) and named barriers.
//
// An mbarrier (8 bytes of shared memory, 8-byte aligned) counts arrivals; when `count` of them
// have happened the current phase completes and the next begins (phases alternate parity 0, 1,
// 0, ... starting at 0). Waiting on parity P returns once the most recent phase of parity P has
// completed. A pipeline slot used for the u-th time therefore waits on parity (u & 1).
// Arrive has release and the waits have acquire semantics (CTA scope), so data written before
// an arrive is visible to a thread after its wait succeeds.

namespace evo {

__device__ __forceinline__ unsigned mbar_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// One thread initializes; make it visible with __syncthreads() before any other thread uses it.
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(mbar_u32(bar)), "r"(count) : "memory");
}

// One arrival of the executing thread on the current phase.
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
    asm volatile(
        "{ .reg .b64 evo_mbar_state;\n"
        "mbarrier.arrive.shared.b64 evo_mbar_state, [%0];\n"
        "}\n" ::"r"(mbar_u32(bar))
        : "memory");
}

// One arrival that fires once every cp.async this thread issued so far has landed in shared
// memory. `.noinc`: the arrival counts against the count given to mbar_init (so count the
// producing threads there); the executing thread does not wait.
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(unsigned long long* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(mbar_u32(bar)) : "memory");
}

// Non-blocking probe: has the phase of parity `parity` completed?
// (try_wait, which may suspend the thread for a while, needs sm_90; test_wait is sm_80.)
__device__ __forceinline__ bool mbar_test_parity(unsigned long long* bar, unsigned parity) {
    unsigned done;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "{ .reg .pred evo_mbar_p;\n"
        "mbarrier.try_wait.parity.shared.b64 evo_mbar_p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, evo_mbar_p;\n"
        "}\n"
        : "=r"(done)
        : "r"(mbar_u32(bar)), "r"(parity)
        : "memory");
#else
    asm volatile(
        "{ .reg .pred evo_mbar_p;\n"
        "mbarrier.test_wait.parity.shared.b64 evo_mbar_p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, evo_mbar_p;\n"
        "}\n"
        : "=r"(done)
        : "r"(mbar_u32(bar)), "r"(parity)
        : "memory");
#endif
    return done != 0;
}

// Blocks until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait_parity(unsigned long long* bar, unsigned parity) {
    while (!mbar_test_parity(bar, parity)) {
    }
}

// Named barrier `id` (1..15; 0 is __syncthreads) over `count` threads (a multiple of 32):
// sync waits for all `count`, arrive only signals.
__device__ __forceinline__ void named_bar_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

__device__ __forceinline__ void named_bar_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Named barrier `id` over `count` threads that also takes a vote: true iff every one of them
// passed true (bar.red.and).
__device__ __forceinline__ bool named_bar_and(int id, int count, bool pred) {
    int all;
    asm volatile(
        "{\n .reg .pred p, q;\n setp.ne.s32 p, %1, 0;\n bar.red.and.pred q, %2, %3, p;\n selp.s32 %0, 1, 0, q;\n}\n"
        : "=r"(all)
        : "r"(int(pred)), "r"(id), "r"(count)
        : "memory");
    return all != 0;
}

}  // namespace evo
