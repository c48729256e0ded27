// The query side of the chunked-prefill kernels whose logits are exact integer digit dots
// (kernels/meter/int_digit_dot.h): int8-rtn and int8-dither (metered_prefill_int8.cu) and int4-rtn
// (metered_prefill_int4.cu). Each warp splits its 16 query vectors into four signed base-128
// digits (the tensor-core decode kernel's SplitQueryDigits) in shared memory, from which each
// kernel loads the A fragments in its own channel order; a thread keeps its two rows' context,
// band norms and digit scale.
#pragma once

#include <cstdint>

#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/int8_mma_ops.cuh"
#include "kernels/cuda/metered_prefill_launch.h"

namespace witcert::prefill {

struct IntDigitQuerySmem {
  int8_t qdig[4][kVecs][kD];  // query digits [digit, vector, channel]
  double q1[kVecs];           // ‖q‖₁
  float qscale[kVecs];        // 2^{k−6}·fl(1/√d), 0 for a zero or bad query
  int32_t qexp[kVecs], qbad[kVecs];
};

// The thread's rows r = 0, 1: vectors vloc[r] = warp·16 + gid + 8r of the CTA.
template <bool METER>
struct IntDigitRows {
  int64_t ctx[2];        // tokens the row's vector sees (0: not a vector of the chunk)
  float qbn[2][kBands];  // ‖q_b‖ (meter)
  float qscale[2];
  int vloc[2];
  bool bad[2];  // a query the digits cannot take (non-finite, or its exponent out of range)

  // Every thread of the CTA calls; the digits are ready for the warp that wrote them after the
  // __syncwarp inside (each warp reads only its own vectors' digits).
  __device__ __forceinline__ void Load(const Params& P, IntDigitQuerySmem& sq, int64_t v0, int warp, int lane,
                                       float inv_sqrt_d) {
    const MeteredPrefillCudaArgs& a = P.a;
    const int G = P.group, kvh = blockIdx.y, gid = lane >> 2;
    const int64_t nvec = a.num_rows * G;
    for (int i = 0; i < 16; ++i) {
      const int v = warp * 16 + i;
      const int64_t gv = v0 + v;
      const bool live = gv < nvec;
      const int64_t row = live ? gv / G : 0;
      const int head = static_cast<int>(kvh * G + (live ? gv % G : 0));
      const cuda_kv::QueryDigitScalars r = cuda_kv::SplitQueryDigits(
          a.q + row * a.q_stride + static_cast<int64_t>(head) * kD, live, lane, inv_sqrt_d, &sq.qdig[0][v][0],
          kVecs * kD);
      if (lane == 0) {
        sq.q1[v] = r.q1;
        sq.qexp[v] = r.exp;
        sq.qbad[v] = r.bad;
        sq.qscale[v] = r.qscale;
      }
    }
    __syncwarp();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      vloc[r] = warp * 16 + gid + 8 * r;
      const int64_t gv = v0 + vloc[r];
      ctx[r] = gv < nvec ? a.start_pos + gv / G + 1 : 0;
      qscale[r] = sq.qscale[vloc[r]];
      bad[r] = sq.qbad[vloc[r]] != 0;
      if constexpr (METER) {
        if (gv < nvec) {
          const int head = static_cast<int>(kvh * G + gv % G);
          const float* qg = a.q + (gv / G) * a.q_stride + static_cast<int64_t>(head) * kD;
#pragma unroll
          for (int b = 0; b < kBands; ++b) {
            double unused = 0.0;
            qbn[r][b] = cuda_kv::QueryBandNorm<kD>(qg, b, kBands, P.layout.interleaved, &unused);
          }
        } else {
#pragma unroll
          for (int b = 0; b < kBands; ++b) qbn[r][b] = 0.0f;
        }
      }
    }
  }
};

}  // namespace witcert::prefill
