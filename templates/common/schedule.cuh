#pragma once
// Which query blocks a CTA computes, shared by the Hopper attention templates (sdpa_fwd_wgmma,
// sdpa_fwd_fp8_ws; their SCHEDULER knob).
//
// A CTA's work is a list of units w = 0, 1, ..., each a query block of BLOCK_M rows of one
// (batch, head). SCHEDULER grid (PERSISTENT 0): one unit, the CTA's (blockIdx x, y, z = query
// block, head, batch (x KV_SPLITS)); causal in reverse order, the last query blocks (most keys)
// started first. Persistent: item i of n_items to CTA i % gridDim.x, in turn. Non-causal an item
// is one query block, the block fastest (CTAs running together share a head's K/V in L2); causal
// (ITEM_BLOCKS 2) it is the pair (n_mb - 1 - p, p) of head (bat, head), the heavy block first,
// one unit each, so CTAs taking items in turn get equal work (the middle block of an odd n_mb has
// no partner: that unit is empty, m_block < 0).

namespace evo {

struct WorkUnit {
    int m_block, head, bat, split;
};

template <int BLOCK_M, int ITEM_BLOCKS, int PERSISTENT, int CAUSAL, int KV_SPLITS>
struct TileSchedule {
    static_assert(ITEM_BLOCKS == 1 || (ITEM_BLOCKS == 2 && PERSISTENT && CAUSAL), "pairs: persistent and causal");
    static_assert(KV_SPLITS == 1 || !PERSISTENT, "a persistent grid walks whole query blocks");
    int n_mb, heads, n_per_head, n_items;
    __device__ __forceinline__ TileSchedule(int seq_q, int heads_, int batch)
        : n_mb((seq_q + BLOCK_M - 1) / BLOCK_M),
          heads(heads_),
          n_per_head((n_mb + ITEM_BLOCKS - 1) / ITEM_BLOCKS),
          n_items(n_per_head * heads_ * batch) {}
    // Unit w of this CTA; false past its last.
    __device__ __forceinline__ bool unit(int w, WorkUnit& u) const {
        if constexpr (!PERSISTENT) {
            u.m_block = CAUSAL ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
            u.head = blockIdx.y;
            // Split-KV: grid z = batch * KV_SPLITS, split fastest.
            u.bat = KV_SPLITS > 1 ? int(blockIdx.z) / KV_SPLITS : int(blockIdx.z);
            u.split = KV_SPLITS > 1 ? int(blockIdx.z) % KV_SPLITS : 0;
            return w == 0;
        } else {
            const int item = int(blockIdx.x) + (w / ITEM_BLOCKS) * int(gridDim.x);
            if (item >= n_items) return false;
            const int p = item % n_per_head, bh = item / n_per_head;
            u.head = bh % heads;
            u.bat = bh / heads;
            u.split = 0;
            if (ITEM_BLOCKS == 1) {
                u.m_block = p;
            } else {
                const int heavy = n_mb - 1 - p;
                u.m_block = w % 2 == 0 ? heavy : (p == heavy ? -1 : p);
            }
            return true;
        }
    }
    // The next non-empty unit after unit w: its number (w_next) and itself; false if none.
    // (An empty unit is the second of a pair: the unit after it opens the next item.)
    __device__ __forceinline__ bool next(int w, int& w_next, WorkUnit& u) const {
        for (w_next = w + 1; w_next <= w + 2; ++w_next) {
            if (!unit(w_next, u)) return false;
            if (u.m_block >= 0) return true;
        }
        return false;
    }
};

// Of a block's `consumers` warpgroups of 64 rows from row m0, those with a row below seq_q (the
// ragged last block of a head has fewer; kernels whose warpgroups meet at no common barrier let
// the others end at once).
__device__ __forceinline__ int warpgroups_with_rows(int consumers, int seq_q, int m0) {
    return min(consumers, (seq_q - m0 + 63) / 64);
}

}  // namespace evo
