#pragma once
// Shared-memory tile addressing for ROWS x COLS 16-bit elements stored as 16-byte (8-element) chunks.
//
// Modes: SWIZZLE_NONE  row stride COLS, chunk c of row r at chunk c;
//        SWIZZLE_PAD   row stride COLS + 8 (one extra chunk per row shifts banks row to row);
//        SWIZZLE_XOR   row stride COLS, chunk c of row r at chunk c ^ (r % CHUNKS_PER_ROW)
//                      (CHUNKS_PER_ROW = COLS / 8 must be a power of two).
// Writers (cp.async) and readers (ldmatrix) must both go through offset() so they agree.

namespace evo {

enum : int { SWIZZLE_NONE = 0, SWIZZLE_PAD = 1, SWIZZLE_XOR = 2 };

template <int MODE, int ROWS, int COLS>
struct SmemTile {
    static_assert(MODE == SWIZZLE_NONE || MODE == SWIZZLE_PAD || MODE == SWIZZLE_XOR,
                  "unknown swizzle mode");
    static_assert(ROWS > 0 && COLS > 0 && COLS % 8 == 0, "COLS must be a multiple of 8 elements");
    // (enums rather than static constexpr members: NVRTC would emit those as .global variables)
    enum : int {
        CHUNKS_PER_ROW = COLS / 8,
        // Elements between the starts of consecutive rows.
        ROW_STRIDE = MODE == SWIZZLE_PAD ? COLS + 8 : COLS,
        // Elements the tile occupies (a multiple of 8, so consecutive tiles stay 16-byte aligned).
        SIZE = ROWS * ROW_STRIDE,
        BYTES = SIZE * 2,
    };
    static_assert(MODE != SWIZZLE_XOR || (CHUNKS_PER_ROW & (CHUNKS_PER_ROW - 1)) == 0,
                  "xor swizzle needs a power-of-two number of chunks per row");

    // Element offset of (row, col); col is normally a chunk start (multiple of 8), any bits
    // below 8 are kept within the chunk.
    __device__ __forceinline__ static constexpr int offset(int row, int col) {
        if constexpr (MODE == SWIZZLE_XOR) {
            return row * ROW_STRIDE + ((((col >> 3) ^ (row & (CHUNKS_PER_ROW - 1))) << 3) | (col & 7));
        } else {
            return row * ROW_STRIDE + col;
        }
    }
};

}  // namespace evo
