#pragma once
// Asynchronous global->shared copies (sm_80+ cp.async): 16-byte chunks with zero-fill, commit/wait groups.

namespace evo {

// Copies 16 bytes from global `gmem_src` to shared `smem_dst` (both 16-byte aligned), bypassing L1.
// When `pred` is false nothing is read (src-size 0) and the 16 destination bytes are zero-filled;
// `gmem_src` should then still be some valid global address (e.g. the tensor's base pointer).
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, bool pred) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    const int src_size = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :
                 : "r"(dst), "l"(gmem_src), "r"(src_size)
                 : "memory");
}

// Closes the group of cp.async issued by this thread since the previous commit (may be empty).
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most N of this thread's committed groups are still pending.
// Only this thread's copies are covered: follow with __syncthreads() before reading others' data.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    static_assert(N >= 0 && N <= 7, "cp.async.wait_group takes 0..7");
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Waits for every cp.async this thread issued, committed or not.
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

}  // namespace evo
