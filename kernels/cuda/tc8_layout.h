// Where fp8-e4m3 codes sit for the pipelined decode kernel's tensor-core passes
// (metered_decode_pipelined.cuh, kTc8: fp8 converted to fp16 as the m16n8k16 fragments are built;
// fragment layouts in ops/mma_f16.cuh). Host-callable, so tests/kernels/cuda/tc8_layout_test.cc
// checks on the CPU that every mapping below is a bijection, that the K pass's channels match the
// query's B fragments, and that the shared-memory loads are free of bank conflicts.
//
// A stage row is one token's 128 code bytes, eight 16-byte chunks.
//  * K pass (A = keys, rows = tokens): lane (gid, tig) of k-step ks reads, of rows gid and gid + 8,
//    the four bytes Tc8KeyChannel(ks, tig, 0..3): bytes j = 0, 1 are the A columns 2tig, 2tig + 1,
//    j = 2, 3 the columns 2tig + 8, 2tig + 9. One 16-byte load covers k-steps 0-3 (chunk tig) or 4-7
//    (chunk tig + 4).
//  * V pass (A = values transposed, rows = channels): rows gid and gid + 8 of warp w are channels
//    16w + 2gid and 16w + 2gid + 1; column 2tig + {0, 1, 8, 9} of k-step ks is token
//    16ks + tig + 4·{0, 1, 2, 3}, so a token's weight digits are stored at Tc8WeightColumn.
#pragma once

#include "kernels/meter/hd.h"

namespace witcert::cuda_kv {

// Chunk c of token t is stored at chunk c ^ Tc8Swizzle(t % 8). Rows 2i and 2i + 1 differ in bit 2
// (each quarter-warp of the K pass's 16-byte loads covers all 8 chunks), and the even rows
// {0, 2, 4, 6}, like the odd ones, land on four distinct chunks (the V pass's 2-byte loads of four
// tokens).
WITCERT_HD constexpr int Tc8Swizzle(int t) { return t ^ ((t & 1) << 2); }

// The channel behind byte j (0..3) of lane tig's word in k-step ks of the K pass.
WITCERT_HD constexpr int Tc8KeyChannel(int ks, int tig, int j) { return 16 * (tig + 4 * (ks / 4)) + 4 * (ks % 4) + j; }

// The k-step column of stage token jj (0..63) in the value MMAs' B operand.
WITCERT_HD constexpr int Tc8WeightColumn(int jj) {
  return (jj & ~15) | (2 * (jj & 3) + ((jj >> 2) & 1) + 8 * ((jj >> 3) & 1));
}

}  // namespace witcert::cuda_kv
