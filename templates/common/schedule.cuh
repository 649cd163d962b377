#pragma once
// Which query blocks a CTA computes, shared by the Hopper attention templates (sdpa_fwd_wgmma,
// sdpa_fwd_fp8_ws; their SCHEDULER knob).
//
// A CTA's work is a list of units w = 0, 1, ..., each a query block of BLOCK_M rows of one
// (batch, head). SCHEDULER grid (PERSISTENT 0): one unit, the CTA's (blockIdx x, y, z = query
// block (x KEY_CTAS: a cluster's CTAs share the block, its rank the unit's split), head, batch
// (x KV_SPLITS)). Causal, the blocks' costs differ (block m sees m + 1 blocks
// of keys): a grid of more than one wave (SMS CTAs, the family's PERSISTENT_CTAS) numbers its CTAs
// in the order the hardware starts them (x, then y, then z) with the heaviest first: over a group
// of slices (batch, head, split) at a time, every slice's last query block, then every slice's one
// before it, and so on (longest first, so the blocks started last are light; a group spans enough
// slices that its work outlasts its heaviest block on every SM, and few enough that their K/V stay
// in L2); a grid of one wave runs each slice's blocks heaviest first. Persistent: item i of
// n_items to CTA i % gridDim.x, in turn. Non-causal an item is one query block, the block fastest
// (CTAs running together share a head's K/V in L2); causal (ITEM_BLOCKS 2) it is the pair
// (n_mb - 1 - p, p) of head (bat, head), the heavy block first, one unit each, so CTAs taking
// items in turn get equal work (the middle block of an odd n_mb has no partner: that unit is
// empty, m_block < 0).

namespace evo {

struct WorkUnit {
    int m_block, head, bat, split;
};

// Causal grid: the fewest slices a group of the longest-first order spans (the slices are then
// dealt into equal groups of at least that many). A group's work, spread over `sms` SMs, is
// group * blocks * (blocks + 1) / 2 / sms block-key units; 2.5 * sms / (blocks + 1) slices make
// that 1.25 times the heaviest block's `blocks`, so the last group's heavy blocks, started first,
// end before its light ones. Blocks of 192 rows on 132 SMs: (4,16,4096,x) 4 groups of 16 heads,
// (1,16,16384,x) 4 of 4.
__device__ __forceinline__ int causal_group_slices(int blocks, int slices, int sms) {
    const int work = sms * 5 / 2;
    return max(1, min(slices, (work + blocks) / (blocks + 1)));
}

// Causal grid of more than one wave: this CTA's slice (returned) and query block (m_block) in the
// longest-first order.
// (x: the CTA's query-block coordinate, blockIdx.x or its cluster's.)
__device__ __forceinline__ unsigned causal_longest_first(unsigned x, unsigned blocks, unsigned slices, int sms,
                                                         unsigned& m_block) {
    const unsigned started = x + blocks * (blockIdx.y + gridDim.y * blockIdx.z);
    // Groups of q + 1 slices (the first `wide` of them), then of q.
    const unsigned groups = max(1u, slices / unsigned(causal_group_slices(int(blocks), int(slices), sms)));
    const unsigned q = slices / groups, wide = slices - q * groups;
    const unsigned wide_ctas = wide * (q + 1) * blocks;
    const bool in_wide = started < wide_ctas;
    const unsigned size = in_wide ? q + 1 : q;
    const unsigned first =
        in_wide ? started / (size * blocks) * size : wide * (q + 1) + (started - wide_ctas) / (size * blocks) * size;
    const unsigned r = started - first * blocks;
    const unsigned level = r / size;
    m_block = blocks - 1 - level;
    return first + (r - level * size);
}

template <int BLOCK_M, int ITEM_BLOCKS, int PERSISTENT, int CAUSAL, int KV_SPLITS, int SMS, int KEY_CTAS = 1>
struct TileSchedule {
    static_assert(ITEM_BLOCKS == 1 || (ITEM_BLOCKS == 2 && PERSISTENT && CAUSAL), "pairs: persistent and causal");
    static_assert(KV_SPLITS == 1 || !PERSISTENT, "a persistent grid walks whole query blocks");
    static_assert(KEY_CTAS == 1 || (!PERSISTENT && KV_SPLITS == 1), "a cluster's CTAs share one grid block");
    int n_mb, heads, n_per_head, n_items;
    __device__ __forceinline__ TileSchedule(int seq_q, int heads_, int batch)
        : n_mb((seq_q + BLOCK_M - 1) / BLOCK_M),
          heads(heads_),
          n_per_head((n_mb + ITEM_BLOCKS - 1) / ITEM_BLOCKS),
          n_items(n_per_head * heads_ * batch) {}
    // Unit w of this CTA; false past its last.
    __device__ __forceinline__ bool unit(int w, WorkUnit& u) const {
        if constexpr (!PERSISTENT) {
            int slice_head = blockIdx.y, slice_z = blockIdx.z;
            // KEY_CTAS: the cluster (x / KEY_CTAS) takes the place of the CTA; a grid of more than
            // SMS CTAs counts its clusters' CTAs (each is started on an SM of its own).
            const unsigned blocks = gridDim.x / KEY_CTAS, slices = gridDim.y * gridDim.z;
            if (CAUSAL && blocks * slices * KEY_CTAS > unsigned(SMS)) {
                unsigned m_block;
                const unsigned slice = causal_longest_first(blockIdx.x / KEY_CTAS, blocks, slices, SMS / KEY_CTAS, m_block);
                // The divisions ran on the vector pipes: the broadcasts tell the compiler the unit
                // is warp-uniform, so what derives from it stays in uniform registers (as blockIdx).
                u.m_block = __shfl_sync(0xffffffffu, int(m_block), 0);
                slice_head = __shfl_sync(0xffffffffu, int(slice % gridDim.y), 0);
                slice_z = __shfl_sync(0xffffffffu, int(slice / gridDim.y), 0);
            } else {
                // (One wave, causal: every CTA starts at once and the order only places them on
                // SMs; each slice's blocks heaviest first, as before the longest-first order.)
                u.m_block = CAUSAL ? int(blocks) - 1 - int(blockIdx.x / KEY_CTAS) : int(blockIdx.x / KEY_CTAS);
            }
            u.head = slice_head;
            // Split-KV: grid z = batch * KV_SPLITS, split fastest. KEY_CTAS: the cluster rank.
            u.bat = KV_SPLITS > 1 ? slice_z / KV_SPLITS : slice_z;
            u.split = KV_SPLITS > 1 ? slice_z % KV_SPLITS : int(blockIdx.x % KEY_CTAS);
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
