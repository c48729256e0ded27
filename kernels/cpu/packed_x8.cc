// Packing of Q4_0 / Q4_1 / Q8_0 rows into 8-row groups and the grouped dot kernels (see
// packed_x8.h).
#include "kernels/cpu/packed_x8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"
#include "kernels/cpu/packed_x8_group.h"
#include "kernels/cpu/quant_blocks.h"

namespace witcert {
namespace {

// A 4-bit block's 32 values in element order: low nibbles are elements 0..15, high 16..31.
void UnpackNibbles(const uint8_t* qs, uint8_t q[kQk]) {
  for (int e = 0; e < kQk / 2; ++e) {
    q[e] = qs[e] & 0x0F;
    q[e + kQk / 2] = qs[e] >> 4;
  }
}

// Block b of row `row` as 32 values in element order (Q4: 0..15 as uint8; Q8_0: the int8
// codes' bytes), with its fp16 scale and (Q4_1) min.
void UnpackBlock(const QuantMatrix& w, int64_t row, int64_t b, uint8_t q[kQk], uint16_t* d,
                 uint16_t* m) {
  *m = 0;
  switch (w.type) {
    case GgmlType::kQ8_0: {
      const BlockQ8_0& blk = reinterpret_cast<const BlockQ8_0*>(w.row(row))[b];
      std::memcpy(q, blk.qs, kQk);
      *d = blk.d;
      return;
    }
    case GgmlType::kQ4_1: {
      const BlockQ4_1& blk = reinterpret_cast<const BlockQ4_1*>(w.row(row))[b];
      UnpackNibbles(blk.qs, q);
      *d = blk.d;
      *m = blk.m;
      return;
    }
    default: {  // Q4_0
      const BlockQ4_0& blk = reinterpret_cast<const BlockQ4_0*>(w.row(row))[b];
      UnpackNibbles(blk.qs, q);
      *d = blk.d;
      return;
    }
  }
}

}  // namespace

bool PackableX8(const QuantMatrix& w) {
  const bool format =
      w.type == GgmlType::kQ4_0 || w.type == GgmlType::kQ4_1 || w.type == GgmlType::kQ8_0;
  return format && w.cols % kQk == 0 && w.cols > 0 && w.rows > 0 && !w.empty();
}

size_t PackedX8Bytes(GgmlType type, int64_t rows, int64_t cols) {
  return static_cast<size_t>(PackedX8Groups(rows) * (cols / kQk)) * PackedX8BlockBytes(type);
}

void PackX8(const QuantMatrix& w, uint8_t* out) {
  const int64_t nb = w.cols / kQk;
  const int64_t groups = PackedX8Groups(w.rows);
  const bool q8 = w.type == GgmlType::kQ8_0;
  const size_t block_bytes = PackedX8BlockBytes(w.type);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* dst = out + static_cast<size_t>(g * nb + b) * block_bytes;  // [block_bytes]
      std::memset(dst, 0, block_bytes);
      uint16_t d[kPackRows] = {}, m[kPackRows] = {};
      for (int r = 0; r < kPackRows; ++r) {
        const int64_t row = g * kPackRows + r;
        if (row >= w.rows) continue;  // padding rows: zero weights, zero scales
        uint8_t q[kQk];
        UnpackBlock(w, row, b, q, &d[r], &m[r]);
        if (q8) {
          uint8_t* qs = dst + kPackedQ8QsOffset;  // [8][32]
          for (int v = 0; v < 8; ++v) std::memcpy(qs + 32 * v + 4 * r, q + 4 * v, 4);
        } else {
          uint8_t* qs = dst + kPackedQ4QsOffset;  // [4][32]
          for (int v = 0; v < 4; ++v) {
            for (int e = 0; e < 4; ++e) {
              qs[32 * v + 4 * r + e] = static_cast<uint8_t>(q[4 * v + e] | (q[4 * (v + 4) + e] << 4));
            }
          }
        }
      }
      std::memcpy(dst, d, kPackedScaleBytes);
      if (!q8) std::memcpy(dst + kPackedScaleBytes, m, kPackedScaleBytes);
    }
  }
}

namespace matmul_internal {

void DotPackedX8Scalar(const uint8_t* group, const uint8_t* x, size_t stride, int nx,
                       int64_t cols, GgmlType type, float* out) {
  const int64_t nb = cols / kQk;
  const size_t block_bytes = PackedX8BlockBytes(type);
  for (int j = 0; j < nx; ++j) {
    const Q8_1Row xr = ViewQ8_1Row(x + j * stride, cols);
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = group + static_cast<size_t>(b) * block_bytes;
        uint16_t d16, m16;
        std::memcpy(&d16, blk + 2 * r, 2);
        const int8_t* xq = xr.qs + b * kQk;
        int isum = 0;
        const float dw = F16ToF32(d16);
        if (type == GgmlType::kQ8_0) {
          const int8_t* qs = reinterpret_cast<const int8_t*>(blk + kPackedQ8QsOffset);
          for (int v = 0; v < 8; ++v) {
            for (int e = 0; e < 4; ++e) isum += qs[32 * v + 4 * r + e] * xq[4 * v + e];
          }
          acc = std::fma(dw * xr.d[b], static_cast<float>(isum), acc);
          continue;
        }
        std::memcpy(&m16, blk + kPackedScaleBytes + 2 * r, 2);
        const uint8_t* qs = blk + kPackedQ4QsOffset;
        for (int v = 0; v < 4; ++v) {
          for (int e = 0; e < 4; ++e) {
            const uint8_t byte = qs[32 * v + 4 * r + e];
            isum += (byte & 0x0F) * xq[4 * v + e] + (byte >> 4) * xq[4 * (v + 4) + e];
          }
        }
        acc = std::fma(dw * xr.d[b], static_cast<float>(isum), acc);
        acc = std::fma(type == GgmlType::kQ4_0 ? -8.0f * dw : F16ToF32(m16), xr.s[b], acc);
      }
      out[kPackRows * j + r] = acc;
    }
  }
}

#ifdef WITCERT_MATMUL_AVX2
namespace {

// AVX2: a Q8_0 chunk's maddubs is widened at once (2·128·127 < 2^15, but two of them would
// not fit int16); a Q4 block's 8 maddubs sum in int16 (≤ 8·15·127·2 < 2^15), widened once.
struct Avx2PackedOps {
  static __m256i Q8Chunk(__m256i isum, bool first, __m256i aw, __m256i sx) {
    const __m256i part = DotU8I8(aw, sx);
    return first ? part : _mm256_add_epi32(isum, part);
  }
  template <int NX>
  static void Q4Rows(const __m256i (&lo)[4], const __m256i (&hi)[4], const Q8_1Row (&xr)[NX],
                     int64_t b, __m256i (&isum)[NX]) {
    Unrolled<NX>([&](auto jc) WITCERT_INLINE_LAMBDA {
      constexpr int j = decltype(jc)::value;
      const int8_t* xq = xr[j].qs + b * kQk;
      __m256i sum16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo[0], Broadcast4(xq)),
                                       _mm256_maddubs_epi16(hi[0], Broadcast4(xq + 16)));
      Unrolled<3>([&](auto vc) WITCERT_INLINE_LAMBDA {
        constexpr int v = decltype(vc)::value + 1;
        sum16 = _mm256_add_epi16(sum16, _mm256_maddubs_epi16(lo[v], Broadcast4(xq + 4 * v)));
        sum16 =
            _mm256_add_epi16(sum16, _mm256_maddubs_epi16(hi[v], Broadcast4(xq + 4 * (v + 4))));
      });
      isum[j] = _mm256_madd_epi16(sum16, _mm256_set1_epi16(1));
    });
  }
};

}  // namespace

PackedDotFn DotPackedX8Avx2() { return DotPackedX8With<Avx2PackedOps>; }
#else
PackedDotFn DotPackedX8Avx2() { return nullptr; }
#endif

}  // namespace matmul_internal
}  // namespace witcert
