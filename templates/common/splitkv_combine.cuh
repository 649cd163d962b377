// sdpa_splitkv_combine: the second kernel of the split-KV attention families (see
// common/splitkv.cuh). Takes the sdpa_fwd ABI (it writes o through o's strides; q, k, v and
// seq_kv are unused), then the partial buffers kernel 1 wrote. One warp per output row: launch
// ceil(batch * heads * seq_q / (blockDim.x / 32)) blocks of a multiple of 32 threads.
// Included after the attention kernel, which defines elem_t and genome::HEAD_DIM, KV_SPLITS.
extern "C" __global__ void __launch_bounds__(128)
sdpa_splitkv_combine(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
                     elem_t* __restrict__ o, int batch, int heads, int seq_q, int seq_kv,
                     long long q_batch_stride, long long q_head_stride, long long q_seq_stride,
                     long long k_batch_stride, long long k_head_stride, long long k_seq_stride,
                     long long v_batch_stride, long long v_head_stride, long long v_seq_stride,
                     long long o_batch_stride, long long o_head_stride, long long o_seq_stride,
                     float softmax_scale, const float* __restrict__ o_part, const float* __restrict__ lse_part) {
    evo::splitkv_combine<elem_t, genome::HEAD_DIM, genome::KV_SPLITS>(
        o_part, lse_part, o, batch, heads, seq_q, o_batch_stride, o_head_stride, o_seq_stride);
}
