#pragma once
// Thread-block clusters (sm_90): a CTA's rank in its cluster, the cluster barrier, and stores
// into another CTA's shared memory that complete on that CTA's mbarrier (st.async), with the
// cluster-scope wait that makes them visible. Needs mbarrier.cuh first.

namespace evo {

__device__ __forceinline__ unsigned cluster_ctarank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

// Split-phase cluster barrier: arrive (release: this thread's earlier memory accesses, shared
// memory of other CTAs included, are done before any thread passes the matching wait) and wait
// (acquire). Every thread of every CTA of the cluster takes part, whole warps at a time.
__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The shared::cluster address of `p` (this CTA's shared memory) in the cluster's CTA `rank`.
__device__ __forceinline__ unsigned cluster_map(const void* p, unsigned rank) {
    const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p));
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
    return remote;
}

// Stores `v` at `dst` (a shared::cluster address, cluster_map) and completes its 16 bytes on the
// mbarrier at `bar` (shared::cluster, in the same CTA as dst): the owner waits for the bytes with
// mbar_arrive_expect_tx and mbar_wait_parity_cluster.
__device__ __forceinline__ void st_async_v4(unsigned dst, const float4& v, unsigned bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(dst),
                 "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(bar)
                 : "memory");
}

// mbar_wait_parity with acquire at cluster scope: what other CTAs of the cluster wrote before
// completing the phase (st_async_v4's release) is visible after it.
__device__ __forceinline__ void mbar_wait_parity_cluster(unsigned long long* bar, unsigned parity) {
    unsigned done = 0;
    while (!done) {
        asm volatile(
            "{ .reg .pred evo_mbar_p;\n"
            "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 evo_mbar_p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, evo_mbar_p;\n"
            "}\n"
            : "=r"(done)
            : "r"(mbar_u32(bar)), "r"(parity)
            : "memory");
    }
}

}  // namespace evo
