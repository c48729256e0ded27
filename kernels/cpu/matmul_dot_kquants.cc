// Row dots for the 256-element K-quants (Q2_K … Q6_K) against Q8_Kx activations.
//
// Q2_K and Q3_K have one scale per 16 values, the bsums' granularity: Q2_K subtracts
// dmin·d_x·Σ_g m_g·bsums_g as Q4_K does; Q3_K's codes q ∈ [−4, 3] go through maddubs as q + 4 ∈
// [0, 7], and 4·Σ_g s_g·bsums_g comes back out (16·32·7·127·16 ≈ 2^21).
//
// Q4_K: <w, x> = Σ_blocks d·d_x·Σ_s sc_s·Σ q·q_x − dmin·d_x·Σ_s m_s·(Σ q_x over s); the
// second term needs only the activation's 16-element sums (bsums), never the int8 values.
// Q5_K is Q4_K with q ∈ [0, 31] (a fifth bit from qh): the same sums (8·63·31·127·32 ≈ 2^26),
// and maddubs stays unsigned × signed (31·127·2 < 2^15).
// Q6_K stores q + 32 in [0, 63], which keeps maddubs unsigned × signed (63·127·2 < 2^15);
// the +32 comes back out as 32·Σ_g sc_g·bsums_g. Per super-block integer sums stay below
// 2^31 (Q4_K: 8·63·15·127·32 ≈ 2^25; Q6_K: 16·128·63·127·16 ≈ 2^28).
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_simd.h"

namespace witcert::matmul_internal {
namespace {

// Σ_s m_s · (bsums[2s] + bsums[2s+1]).
inline int Q4KMinSum(const Q4KScalesMins& s, const BlockQ8_Kx& x) {
  int sum = 0;
  for (int j = 0; j < 8; ++j) sum += s.m[j] * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
  return sum;
}

// Σ_g scales[g] · bsums[g]: the contribution of Q6_K's +32 offset.
inline int Q6KOffsetSum(const BlockQ6_K& b, const BlockQ8_Kx& x) {
  int sum = 0;
  for (int g = 0; g < kQkK / 16; ++g) sum += b.scales[g] * x.bsums[g];
  return sum;
}

// Q4_K's and Q5_K's scalar dot (code: Q4KCode or Q5KCode, quant_blocks.h).
template <class Block, class Code>
void DotQ45KScalar(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols,
                   float* out, Code code) {
  const Block* w = reinterpret_cast<const Block*>(w_row);  // [cols / 256]
  for (int j = 0; j < nx; ++j) {
    const BlockQ8_Kx* xb = reinterpret_cast<const BlockQ8_Kx*>(x + j * stride);
    float sum = 0.0f;
    for (int64_t b = 0; b < cols / kQkK; ++b) {
      const Q4KScalesMins s = UnpackQ4KScales(w[b].scales);
      int isum = 0;
      for (int c = 0; c < 4; ++c) {
        int lo = 0, hi = 0;
        for (int l = 0; l < 32; ++l) {
          lo += code(w[b], c, 0, l) * xb[b].qs[64 * c + l];
          hi += code(w[b], c, 1, l) * xb[b].qs[64 * c + 32 + l];
        }
        isum += s.sc[2 * c] * lo + s.sc[2 * c + 1] * hi;
      }
      sum = std::fma(F16ToF32(w[b].d) * xb[b].d, static_cast<float>(isum), sum);
      sum = std::fma(-F16ToF32(w[b].dmin) * xb[b].d, static_cast<float>(Q4KMinSum(s, xb[b])), sum);
    }
    out[j] = sum;
  }
}

// Q2_K's and Q3_K's scalar dot: 16 groups of 16 with one scale each (Q2_K: the low nibble of
// scales[g], its high nibble the min against the group's bsums; Q3_K: Q3KScales, no min).
template <class Block, bool Q3>
void DotQ23KScalar(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols, float* out) {
  const Block* w = reinterpret_cast<const Block*>(w_row);  // [cols / 256]
  for (int j = 0; j < nx; ++j) {
    const BlockQ8_Kx* xb = reinterpret_cast<const BlockQ8_Kx*>(x + j * stride);
    float sum = 0.0f;
    for (int64_t b = 0; b < cols / kQkK; ++b) {
      int8_t s[16];  // group scales
      if constexpr (Q3) {
        Q3KScales(w[b].scales, s);
      } else {
        for (int g = 0; g < 16; ++g) s[g] = static_cast<int8_t>(w[b].scales[g] & 0xF);
      }
      int isum = 0, msum = 0;
      for (int g = 0; g < kQkK / 16; ++g) {
        int gs = 0;
        for (int l = 0; l < 16; ++l) {
          int code;
          if constexpr (Q3) {
            code = Q3KCode(w[b], 16 * g + l);
          } else {
            code = Q2KCode(w[b], 16 * g + l);
          }
          gs += code * xb[b].qs[16 * g + l];
        }
        isum += s[g] * gs;
        if constexpr (!Q3) msum += (w[b].scales[g] >> 4) * xb[b].bsums[g];
      }
      sum = std::fma(F16ToF32(w[b].d) * xb[b].d, static_cast<float>(isum), sum);
      if constexpr (!Q3) sum = std::fma(-F16ToF32(w[b].dmin) * xb[b].d, static_cast<float>(msum), sum);
    }
    out[j] = sum;
  }
}

}  // namespace

void DotQ2_KScalar(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols,
                   float* out) {
  DotQ23KScalar<BlockQ2_K, false>(w_row, x, stride, nx, cols, out);
}

void DotQ3_KScalar(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols,
                   float* out) {
  DotQ23KScalar<BlockQ3_K, true>(w_row, x, stride, nx, cols, out);
}

void DotQ4_KScalar(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols,
                   float* out) {
  DotQ45KScalar<BlockQ4_K>(w_row, x, stride, nx, cols, out, Q4KCode);
}

void DotQ5_KScalar(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols,
                   float* out) {
  DotQ45KScalar<BlockQ5_K>(w_row, x, stride, nx, cols, out, Q5KCode);
}

void DotQ6_KScalar(const uint8_t* w_row, const uint8_t* x, size_t stride, int nx, int64_t cols,
                   float* out) {
  const BlockQ6_K* w = reinterpret_cast<const BlockQ6_K*>(w_row);  // [cols / 256]
  for (int j = 0; j < nx; ++j) {
    const BlockQ8_Kx* xb = reinterpret_cast<const BlockQ8_Kx*>(x + j * stride);
    float sum = 0.0f;
    for (int64_t b = 0; b < cols / kQkK; ++b) {
      int isum = 0;
      for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = w[b].ql + 64 * half;
        const uint8_t* qh = w[b].qh + 32 * half;
        const int8_t* sc = w[b].scales + 8 * half;
        const int8_t* xq = xb[b].qs + 128 * half;
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          const int q1 = (ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4);
          const int q2 = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
          const int q3 = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
          const int q4 = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
          isum += sc[is] * q1 * xq[l] + sc[is + 2] * q2 * xq[l + 32] +
                  sc[is + 4] * q3 * xq[l + 64] + sc[is + 6] * q4 * xq[l + 96];
        }
      }
      isum -= 32 * Q6KOffsetSum(w[b], xb[b]);
      sum = std::fma(F16ToF32(w[b].d) * xb[b].d, static_cast<float>(isum), sum);
    }
    out[j] = sum;
  }
}

#ifdef WITCERT_MATMUL_AVX2
namespace {

// Σ_g coef[g]·bsums[g] over the 16 groups, as the scalar loops compute it: one madd (int16 ×
// int16 → int32 pair sums, exact for |coef| ≤ 2^7 and |bsums| ≤ 16·127) and a lane sum.
inline int WeightedBsums(__m256i coef16, const BlockQ8_Kx& x) {
  const __m256i p = _mm256_madd_epi16(coef16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums)));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
  return _mm_cvtsi128_si32(t);
}
// Q3KScales' 16 values (s_g − 32) in a register, from Q3KScaleWords' two words: 16 byte stores
// read back as one vector would stall on store forwarding (measured: Q3_K's GEMV 68 → 112 µs
// that way).
inline __m128i Q3KScalesVec(const uint8_t* scales) {
  uint64_t lo, hi;
  Q3KScaleWords(scales, &lo, &hi);
  return _mm_sub_epi8(_mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)), _mm_set1_epi8(32));
}

// Q4_K's / Q5_K's mins as WeightedBsums coefficients: m_j for groups 2j and 2j + 1.
inline __m256i MinPairs(const Q4KScalesMins& s) {
  uint64_t m8;
  std::memcpy(&m8, s.m, 8);
  const __m128i m = _mm_cvtsi64_si128(static_cast<long long>(m8));
  return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
}

// An NX-row tile's activation rows and accumulators: the integer sums scaled into acc, and a
// scalar correction (Q4_K / Q5_K / Q2_K mins, Q3_K / Q6_K offsets) subtracted at the end.
template <int NX>
struct KQuantTile {
  const BlockQ8_Kx* xb[NX];  // NX × [cols / 256]
  __m256 acc[NX];
  float off[NX];
  KQuantTile(const uint8_t* x, size_t stride) {
    for (int j = 0; j < NX; ++j) {
      xb[j] = reinterpret_cast<const BlockQ8_Kx*>(x + j * stride);
      acc[j] = _mm256_setzero_ps();
      off[j] = 0.0f;
    }
  }
  void Finish(float* out) const {
    for (int j = 0; j < NX; ++j) out[j] = HSum(acc[j]) - off[j];
  }
};

// Q4_K and Q5_K (FIFTH: the block's qh bits give each value its bit 4).
template <class Block, bool FIFTH, int NX>
struct Q45KAvx2 {
  static void Run(const uint8_t* w_row, const uint8_t* x, size_t stride, int64_t cols, float* out) {
    const Block* w = reinterpret_cast<const Block*>(w_row);  // [cols / 256]
    KQuantTile<NX> t(x, stride);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    for (int64_t b = 0; b < cols / kQkK; ++b) {
      const Q4KScalesMins s = UnpackQ4KScales(w[b].scales);
      const __m256i mins = MinPairs(s);
      __m256i qh = _mm256_setzero_si256();
      if constexpr (FIFTH) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh));
      __m256i sumi[NX];
      for (int j = 0; j < NX; ++j) sumi[j] = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * c));
        __m256i lo = _mm256_and_si256(q, low4);                        // sub-block 2c
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);  // sub-block 2c+1
        if constexpr (FIFTH) {  // qh[l] bit 2c (low) and 2c + 1 (high), moved to bit 4
          const __m256i m_lo = _mm256_set1_epi8(static_cast<char>(1 << (2 * c)));
          const __m256i m_hi = _mm256_set1_epi8(static_cast<char>(2 << (2 * c)));
          lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m_lo), m_lo), bit4));
          hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m_hi), m_hi), bit4));
        }
        const __m256i sc_lo = _mm256_set1_epi16(s.sc[2 * c]);
        const __m256i sc_hi = _mm256_set1_epi16(s.sc[2 * c + 1]);
        for (int j = 0; j < NX; ++j) {
          const int8_t* xq = t.xb[j][b].qs + 64 * c;
          const __m256i x_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
          const __m256i x_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32));
          const __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x_lo), sc_lo);
          const __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x_hi), sc_hi);
          sumi[j] = _mm256_add_epi32(sumi[j], _mm256_add_epi32(p_lo, p_hi));
        }
      }
      const float d = F16ToF32(w[b].d);
      const float dmin = F16ToF32(w[b].dmin);
      for (int j = 0; j < NX; ++j) {
        t.acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * t.xb[j][b].d), _mm256_cvtepi32_ps(sumi[j]), t.acc[j]);
        t.off[j] = std::fma(dmin * t.xb[j][b].d, static_cast<float>(WeightedBsums(mins, t.xb[j][b])), t.off[j]);
      }
    }
    t.Finish(out);
  }
};
template <int NX>
using Q4KAvx2 = Q45KAvx2<BlockQ4_K, false, NX>;
template <int NX>
using Q5KAvx2 = Q45KAvx2<BlockQ5_K, true, NX>;

// A madd operand whose low 8 int16 lanes hold scale s[8h + 2k] and high 8 lanes s[8h + 2k + 1],
// from the 16 scales as int16 in a register (s16: lane 0 holds 0-7, lane 1 holds 8-15): lane h
// copied to both lanes (own = OwnLane(s16, h)), then one pshufb picks int16 2k for the low lane
// and 2k + 1 for the high one. Five shuffles per half, where broadcasting each scale from memory
// took about four operations a pair (Q6_K's GEMV: 45 → 33 µs).
inline __m256i OwnLane(__m256i s16, int h) {
  return h == 0 ? _mm256_permute2x128_si256(s16, s16, 0x00) : _mm256_permute2x128_si256(s16, s16, 0x11);
}
inline __m256i PairFromLane(__m256i own, int k) {
  const short lo = static_cast<short>(((4 * k + 1) << 8) | (4 * k)), hi = static_cast<short>(((4 * k + 3) << 8) | (4 * k + 2));
  return _mm256_shuffle_epi8(own, _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo)));
}

// Q2_K and Q3_K (Q3: codes + 4 by the hmask bit, signed scales; see the top of the file).
template <class Block, bool Q3, int NX>
struct Q23KAvx2 {
  static void Run(const uint8_t* w_row, const uint8_t* x, size_t stride, int64_t cols, float* out) {
    const Block* w = reinterpret_cast<const Block*>(w_row);  // [cols / 256]
    KQuantTile<NX> t(x, stride);
    const __m256i low2 = _mm256_set1_epi8(0x03);
    const __m256i four = _mm256_set1_epi8(0x04);
    for (int64_t b = 0; b < cols / kQkK; ++b) {
      // s16: the group scales as int16 (Q2_K's low nibbles, Q3_K's s_g − 32); off_coef: the
      // WeightedBsums coefficients (Q2_K m_g, Q3_K 4·s_g).
      __m256i hm = _mm256_setzero_si256(), off_coef, s16;
      if constexpr (Q3) {
        s16 = _mm256_cvtepi8_epi16(Q3KScalesVec(w[b].scales));
        off_coef = _mm256_slli_epi16(s16, 2);
        hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].hmask));
      } else {
        const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales));
        const __m128i low4 = _mm_set1_epi8(0x0F);
        off_coef = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), low4));
        s16 = _mm256_cvtepu8_epi16(_mm_and_si128(sc, low4));
      }
      __m256i sumi[NX];
      for (int j = 0; j < NX; ++j) sumi[j] = _mm256_setzero_si256();
      for (int n = 0; n < 2; ++n) {
        const __m256i own = OwnLane(s16, n);
        const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * n));
        for (int sh = 0; sh < 4; ++sh) {  // elements 128n + 32sh + [0, 32): groups 8n + 2sh, + 1
          __m256i u = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * sh), low2);
          if constexpr (Q3) {
            const __m256i m = _mm256_set1_epi8(static_cast<char>(1 << (4 * n + sh)));
            u = _mm256_or_si256(u, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, m), m), four));
          }
          const __m256i scales = PairFromLane(own, sh);
          for (int j = 0; j < NX; ++j) {
            const __m256i xv =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.xb[j][b].qs + 128 * n + 32 * sh));
            sumi[j] = _mm256_add_epi32(sumi[j], _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), scales));
          }
        }
      }
      const float d = F16ToF32(w[b].d);
      float off_scale = d;  // Q2_K: Σ_g m_g·bsums_g times dmin; Q3_K: 4·Σ_g s_g·bsums_g times d
      if constexpr (!Q3) off_scale = F16ToF32(w[b].dmin);
      for (int j = 0; j < NX; ++j) {
        t.acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * t.xb[j][b].d), _mm256_cvtepi32_ps(sumi[j]), t.acc[j]);
        const int off = WeightedBsums(off_coef, t.xb[j][b]);
        t.off[j] = std::fma(off_scale * t.xb[j][b].d, static_cast<float>(off), t.off[j]);
      }
    }
    t.Finish(out);
  }
};
template <int NX>
using Q2KAvx2 = Q23KAvx2<BlockQ2_K, false, NX>;
template <int NX>
using Q3KAvx2 = Q23KAvx2<BlockQ3_K, true, NX>;

template <int NX>
struct Q6KAvx2 {
  static void Run(const uint8_t* w_row, const uint8_t* x, size_t stride, int64_t cols, float* out) {
    const BlockQ6_K* w = reinterpret_cast<const BlockQ6_K*>(w_row);  // [cols / 256]
    KQuantTile<NX> t(x, stride);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i bits45 = _mm256_set1_epi8(0x30);
    for (int64_t b = 0; b < cols / kQkK; ++b) {
      // The 16 scales as int16 (lane 0: 0-7, lane 1: 8-15): the offset's coefficients, and the
      // source of each pair's madd vector (lane h copied to both lanes, then one pshufb).
      const __m256i q6_scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales)));
      __m256i sumi[NX];
      for (int j = 0; j < NX; ++j) sumi[j] = _mm256_setzero_si256();
      for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = w[b].ql + 64 * half;
        const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
        const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
        const __m256i qh =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh + 32 * half));
        // q_k holds elements 32k .. 32k+31 of this half, each in [0, 63].
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(qa, low4),
                            _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
            _mm256_or_si256(_mm256_and_si256(qb, low4),
                            _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qa, 4), low4),
                            _mm256_and_si256(qh, bits45)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4), low4),
                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45)),
        };
        const __m256i own = OwnLane(q6_scales, half);
        const __m256i scales[4] = {PairFromLane(own, 0), PairFromLane(own, 1), PairFromLane(own, 2),
                                   PairFromLane(own, 3)};
        for (int j = 0; j < NX; ++j) {
          const int8_t* xq = t.xb[j][b].qs + 128 * half;
          for (int k = 0; k < 4; ++k) {
            const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * k));
            sumi[j] = _mm256_add_epi32(
                sumi[j], _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], xv), scales[k]));
          }
        }
      }
      const float d = F16ToF32(w[b].d);
      for (int j = 0; j < NX; ++j) {
        const float dd = d * t.xb[j][b].d;
        t.acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi[j]), t.acc[j]);
        t.off[j] = std::fma(dd, static_cast<float>(32 * WeightedBsums(q6_scales, t.xb[j][b])), t.off[j]);
      }
    }
    t.Finish(out);
  }
};

}  // namespace

void DotQ2_K(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Q2KAvx2>(w, x, s, nx, c, o);
}
void DotQ3_K(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Q3KAvx2>(w, x, s, nx, c, o);
}
void DotQ4_K(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Q4KAvx2>(w, x, s, nx, c, o);
}
void DotQ5_K(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Q5KAvx2>(w, x, s, nx, c, o);
}
void DotQ6_K(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DispatchTile<Q6KAvx2>(w, x, s, nx, c, o);
}
#else
void DotQ2_K(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ2_KScalar(w, x, s, nx, c, o);
}
void DotQ3_K(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ3_KScalar(w, x, s, nx, c, o);
}
void DotQ4_K(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ4_KScalar(w, x, s, nx, c, o);
}
void DotQ5_K(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ5_KScalar(w, x, s, nx, c, o);
}
void DotQ6_K(const uint8_t* w, const uint8_t* x, size_t s, int nx, int64_t c, float* o) {
  DotQ6_KScalar(w, x, s, nx, c, o);
}
#endif

}  // namespace witcert::matmul_internal
