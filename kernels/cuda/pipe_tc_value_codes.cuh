// The pipelined decode kernel's value codes on tensor cores (metered_decode_pipelined.cuh, kTcV):
// the A fragments of the V pass's m16n8k16 MMAs (ops/mma_f16.cuh) for one warp, from one ring
// stage's code rows. Warp w owns channels 16·w + [0, 16); a k-step is 16 tokens of the stage.
//   fp16 / bf16 (kTc): ldmatrix.trans of the code rows, whose 16-byte chunks are XOR-swizzled by
//     token % 8 (the stage layout), so rows are the warp's channels and columns the tokens.
//   fp8-e4m3 (TC8): lane (gid, tig) loads channel pair 16·w + 2·gid + {0, 1} of tokens tig + 4j
//     (j < 4) with 2-byte loads (rows of j even / odd swizzled by Tc8Swizzle(tig) / (tig + 4):
//     distinct chunks across tig, no bank conflicts) and converts them to fp16 exactly. Rows gid
//     and gid + 8 are channels 2·gid and 2·gid + 1 (the kernel's kPairRows mapping).
//   kivi2 (V2): word w of a token's 32 code bytes holds the warp's 16 channels, 2 bits each, so
//     the lane's channels are its bits 4·gid + [0, 4); tokens as TC8 (one j's loads are four words
//     32 bytes apart, one per tig: no bank conflicts). The codes become exact fp16 subnormals:
//     m·2^-24 in rows gid, m·2^-22 in rows gid + 8, which the caller takes off its sums.
#pragma once

#include <cstdint>

#include "kernels/cuda/ops/mma_f16.cuh"
#include "kernels/cuda/tc8_layout.h"

namespace witcert::cuda_kv {

// CB: code bytes per vector (a stage row). Built per stage from the lane's (gid, tig) =
// (lane / 4, lane % 4); Load(ks, a) gives k-step ks's A.
template <int CB, bool TC8, bool V2>
struct TcValueCodes {
  __device__ __forceinline__ TcValueCodes(const uint8_t* codes, int lane, int gid, int tig, int warp) {
    // ldmatrix rows: matrix i = lane / 8 covers tokens 8·(i / 2) + [0, 8) of the k-step and
    // channels 16·warp + 8·(i % 2) + [0, 8): chunk 2·warp + i % 2 of row lane % 8, swizzled.
    const int row_tok = ((lane >> 4) & 1) * 8 + (lane & 7), row_chunk = (2 * warp + ((lane >> 3) & 1)) ^ (lane & 7);
    row_ = static_cast<uint32_t>(__cvta_generic_to_shared(codes)) + row_tok * CB + (row_chunk << 4);
    v8_ = codes + tig * CB + 2 * gid;
    v8_even_ = (warp ^ Tc8Swizzle(tig)) << 4;
    v8_odd_ = (warp ^ Tc8Swizzle(tig + 4)) << 4;
    v2_ = reinterpret_cast<const uint32_t*>(codes + tig * CB) + warp;
    // Tokens (j, j + 1) in the (low, high) halves: the halves holding the lane's bits.
    v2_sel_ = gid < 4 ? 0x5410u : 0x7632u;
    v2_shift_ = 4u * (gid & 3);
  }

  __device__ __forceinline__ void Load(int ks, uint32_t (&a)[4]) const {
    if constexpr (TC8) {
      uint32_t r[4];  // token tig + 4j: [code of channel 2gid, of 2gid + 1]
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        r[j] = *reinterpret_cast<const uint16_t*>(v8_ + (ks * 16 + 4 * j) * CB + ((j & 1) ? v8_odd_ : v8_even_));
      }
      // [ch 2gid: tokens j, j+1 | ch 2gid+1: tokens j, j+1] for j = 0 and 2.
      const uint32_t p01 = __byte_perm(r[0], r[1], 0x5140), p23 = __byte_perm(r[2], r[3], 0x5140);
      a[0] = mma::E4m3PairLoToF16x2(p01);
      a[1] = mma::E4m3PairHiToF16x2(p01);
      a[2] = mma::E4m3PairLoToF16x2(p23);
      a[3] = mma::E4m3PairHiToF16x2(p23);
    } else if constexpr (V2) {
      uint32_t r[4];  // token tig + 4j: channel 2gid's code in bits 4gid + [0, 2), 2gid + 1's above
#pragma unroll
      for (int j = 0; j < 4; ++j) r[j] = v2_[(ks * 16 + 4 * j) * (CB / 4)];
      // Shifted to bits [0, 4), j = 0 and 2.
      const uint32_t p01 = __byte_perm(r[0], r[1], v2_sel_) >> v2_shift_;
      const uint32_t p23 = __byte_perm(r[2], r[3], v2_sel_) >> v2_shift_;
      a[0] = mma::TwoBitPairAsF16Subnormals<0>(p01);
      a[1] = mma::TwoBitPairAsF16Subnormals<2>(p01);
      a[2] = mma::TwoBitPairAsF16Subnormals<0>(p23);
      a[3] = mma::TwoBitPairAsF16Subnormals<2>(p23);
    } else {
      mma::LdMatrixX4Trans(a, row_ + ks * 16 * CB);
    }
  }

 private:
  // Each variant reads its own (the others' are dead code).
  uint32_t row_;             // fp16 / bf16: the lane's ldmatrix row (shared address)
  const uint8_t* v8_;        // TC8
  int v8_even_, v8_odd_;
  const uint32_t* v2_;       // V2
  uint32_t v2_sel_, v2_shift_;
};

}  // namespace witcert::cuda_kv
