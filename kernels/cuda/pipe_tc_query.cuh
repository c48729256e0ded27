// The pipelined decode kernel's query on tensor cores (metered_decode_pipelined.cuh, kTc: fp16,
// bf16 and fp8-e4m3 at d = 128): each head's query as the B fragments of the K pass's m16n8k16
// MMAs, two digits of the key format per head (q·2^s_h = hi + lo, s_h a power of two that puts
// the head's max|q| below 2^14; DigitFormat, f16_digits.cuh), columns (head, digit) as in the
// value pass. Lane (gid, tig) of n-tile n holds head 4n + gid / 2's digit gid % 2 at the channels
// of its k-steps (TC8: Tc8KeyChannel's, where fp8 codes are converted as the A fragments are
// built; else 16·ks + 8·r + 2·tig + {0, 1}).
#pragma once

#include <cstdint>

#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/f16_digits.cuh"
#include "kernels/cuda/tc8_layout.h"

namespace witcert::cuda_kv {

// qb [n-tile, k-step, register]: the B fragments; qunscale[n]: 2^-s/√d of the head whose logits
// the lane finishes (4n + tig); DIGIT_L1 (scaled fp8 with the meter): qdigit_l1[n], that head's
// digit sum X₁ = Σ_c (|hi_c| + |lo_c|) in fp32 (TcLogitEtaFp8CodeBoundOf). Heads ≥ G get zeros.
// Every lane of the warp calls (the scales meet by shuffles).
template <int D, int NTK, bool TC8, bool BF16, bool DIGIT_L1>
__device__ __forceinline__ void TcQueryFragments(const DecodeParams& p, int seq, int h0, int G, int lane,
                                                 float inv_sqrt_d, uint32_t (&qb)[NTK][8][2], float (&qunscale)[NTK],
                                                 float (&qdigit_l1)[NTK]) {
  using Digits = DigitFormat<BF16>;
  const int gid = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int n = 0; n < NTK; ++n) {
    const int g = 4 * n + gid / 2;  // this lane's B column: head g, digit gid % 2
    const float* qg = p.q + (static_cast<int64_t>(seq) * p.num_q_heads + h0 + (g < G ? g : 0)) * D;
    float2 qv[8][2];
    float amax = 0.0f;
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int c = TC8 ? Tc8KeyChannel(ks, tig, 2 * r) : 16 * ks + 8 * r + 2 * tig;
        qv[ks][r] = g < G ? *reinterpret_cast<const float2*>(qg + c) : make_float2(0.0f, 0.0f);
        amax = fmaxf(amax, fmaxf(fabsf(qv[ks][r].x), fabsf(qv[ks][r].y)));
      }
    }
    // The head's 32 channels of each k-step lie with the 4 tig lanes and both digit lanes.
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 4));
    int e = 0;
    if (amax > 0.0f && amax <= 3.0e38f) frexpf(amax, &e);  // amax < 2^e
    e = max(e, -100);
    const float scale = ldexpf(1.0f, 14 - e);
    const bool lo_digit = (gid & 1) != 0;
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t dx = Digits::Pair(qv[ks][r].x * scale), dy = Digits::Pair(qv[ks][r].y * scale);
        qb[n][ks][r] = lo_digit ? (dx >> 16) | (dy & 0xffff0000u) : (dx & 0xffffu) | (dy << 16);
      }
    }
    qunscale[n] = __shfl_sync(0xffffffffu, 1.0f / scale, 8 * tig) * inv_sqrt_d;  // lane 8·tig: head 4n + tig
    if constexpr (DIGIT_L1) {
      // The lane's digit (gid % 2) of head 4n + gid / 2 over its 32 channels, then the 8 lanes
      // of that head (both digits, the 4 tig lanes); lane 8·tig holds head 4n + tig's X₁.
      float l1 = 0.0f;
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          l1 += fabsf(F16LowHalf(qb[n][ks][r]));
          l1 += fabsf(F16HighHalf(qb[n][ks][r]));
        }
      }
#pragma unroll
      for (int o = 1; o <= 4; o <<= 1) l1 += __shfl_xor_sync(0xffffffffu, l1, o);
      qdigit_l1[n] = __shfl_sync(0xffffffffu, l1, 8 * tig);
    }
  }
}

}  // namespace witcert::cuda_kv
