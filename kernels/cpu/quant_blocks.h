// GGML block layouts for the supported weight formats, plus fp16/bf16 <-> fp32.
//
// The structs mirror the on-disk GGUF encodings byte for byte (checked by static_asserts
// against kernels/ggml_type.h), so a QuantMatrix row can be reinterpreted as an array of
// blocks without copying. Half-precision conversion uses F16C when the build enables it;
// the portable fallback gives identical results (round-to-nearest-even, subnormals, inf/NaN).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/ggml_type.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace witcert {

inline constexpr int kQk = 32;    // elements per Q4_0/Q4_1/Q8_0 block
inline constexpr int kQkK = 256;  // elements per K-quant super-block

// x = d * (q - 8); qs[j] low nibble is element j, high nibble element j + 16.
struct BlockQ4_0 {
  uint16_t d;  // fp16
  uint8_t qs[kQk / 2];
};
// x = d * q + m; same nibble order as Q4_0.
struct BlockQ4_1 {
  uint16_t d;  // fp16
  uint16_t m;  // fp16
  uint8_t qs[kQk / 2];
};
// Q4_0 / Q4_1 with a fifth bit: element j's bit 4 is bit j of qh (little-endian 32 bits).
// Q5_0: x = d * (q - 16); Q5_1: x = d * q + m; q ∈ [0, 31].
struct BlockQ5_0 {
  uint16_t d;  // fp16
  uint8_t qh[4];
  uint8_t qs[kQk / 2];
};
struct BlockQ5_1 {
  uint16_t d;  // fp16
  uint16_t m;  // fp16
  uint8_t qh[4];
  uint8_t qs[kQk / 2];
};
// IQ4_NL: x = d * kIq4Values[q] with 4-bit q in Q4_0's nibble order (the non-linear grid of
// llama.cpp's IQ4 formats).
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};
struct BlockIQ4_NL {
  uint16_t d;  // fp16
  uint8_t qs[kQk / 2];
};
// x = d * q.
struct BlockQ8_0 {
  uint16_t d;  // fp16
  int8_t qs[kQk];
};
// 8 sub-blocks of 32: x = d * sc_j * q - dmin * m_j with 6-bit sc_j, m_j packed in scales.
// qs[32 * c + l]: low nibble is element 64c + l, high nibble element 64c + 32 + l.
struct BlockQ4_K {
  uint16_t d;     // fp16
  uint16_t dmin;  // fp16
  uint8_t scales[12];
  uint8_t qs[kQkK / 2];
};
// IQ4_XS: 8 sub-blocks of 32, x = d * (ls_j − 32) * kIq4Values[q], q in IQ4_NL's nibble order
// within each sub-block (qs[16j + l]: low nibble element 32j + l, high nibble 32j + 16 + l); the
// 6-bit ls_j is nibble j % 2 of scales_l[j / 2] and bits 2j, 2j + 1 of scales_h.
struct BlockIQ4_XS {
  uint16_t d;  // fp16
  uint16_t scales_h;
  uint8_t scales_l[kQkK / 64];
  uint8_t qs[kQkK / 2];
};
inline int Iq4XsScale(const BlockIQ4_XS& b, int j) {  // ls_j − 32
  const int ls = ((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b.scales_h >> (2 * j)) & 3) << 4);
  return ls - 32;
}

// Q2_K and Q3_K share an element order in 16 groups of 16 (one scale each): element
// e = 128n + 32j + 16h + l (n, h < 2, j < 4, l < 16) has its 2 low bits at bits 2j..2j+1 of
// qs[32n + 16h + l], and belongs to group e / 16 = 8n + 2j + h.
// Q2_K: x = d * (scales[g] & 15) * q - dmin * (scales[g] >> 4), q ∈ [0, 3].
struct BlockQ2_K {
  uint8_t scales[kQkK / 16];
  uint8_t qs[kQkK / 4];
  uint16_t d;     // fp16
  uint16_t dmin;  // fp16
};
// Q3_K: x = d * (s_g − 32) * q with q = low bits − (bit 4n + j of hmask[16h + l] ? 0 : 4) ∈ [−4, 3]
// and 16 6-bit s_g packed in scales (Q3KScales).
struct BlockQ3_K {
  uint8_t hmask[kQkK / 8];
  uint8_t qs[kQkK / 4];
  uint8_t scales[12];
  uint16_t d;  // fp16
};
// Q4_K's sub-blocks, scales and nibble order with a fifth bit per value: element 64c + l takes
// bit 2c of qh[l] as its bit 4, element 64c + 32 + l bit 2c + 1 (l < 32), so q ∈ [0, 31].
struct BlockQ5_K {
  uint16_t d;     // fp16
  uint16_t dmin;  // fp16
  uint8_t scales[12];
  uint8_t qh[kQkK / 8];
  uint8_t qs[kQkK / 2];
};
// 16 sub-blocks of 16: x = d * scales[j] * (q - 32), q 6-bit (4 low bits in ql, 2 in qh).
struct BlockQ6_K {
  uint8_t ql[kQkK / 2];
  uint8_t qh[kQkK / 4];
  int8_t scales[kQkK / 16];
  uint16_t d;  // fp16
};

static_assert(sizeof(BlockQ4_0) == kGgmlQ4_0.block_bytes);
static_assert(sizeof(BlockQ4_1) == kGgmlQ4_1.block_bytes);
static_assert(sizeof(BlockQ8_0) == kGgmlQ8_0.block_bytes);
static_assert(sizeof(BlockIQ4_NL) == kGgmlIQ4_NL.block_bytes);
static_assert(sizeof(BlockIQ4_XS) == kGgmlIQ4_XS.block_bytes);
static_assert(sizeof(BlockQ5_0) == kGgmlQ5_0.block_bytes);
static_assert(sizeof(BlockQ5_1) == kGgmlQ5_1.block_bytes);
static_assert(sizeof(BlockQ2_K) == kGgmlQ2_K.block_bytes);
static_assert(sizeof(BlockQ3_K) == kGgmlQ3_K.block_bytes);
static_assert(sizeof(BlockQ4_K) == kGgmlQ4_K.block_bytes);
static_assert(sizeof(BlockQ5_K) == kGgmlQ5_K.block_bytes);
static_assert(sizeof(BlockQ6_K) == kGgmlQ6_K.block_bytes);

// The 6-bit scales sc_j and mins m_j of a Q4_K / Q5_K block's 8 sub-blocks. In bytes: for j < 4,
// the low 6 bits of scales[j] and scales[j + 4]; for j ≥ 4, the low (sc) / high (m) nibble of
// scales[j + 4] with the top 2 bits of scales[j − 4] (sc) / scales[j] (m) above it. Unpacked
// four at a time from the 12 bytes as words w0..w2: sc_0..3 and m_0..3 are the low 6 bits of w0
// and w1; sc_4..7 take w2's low nibbles with w0's top 2 bits, m_4..7 w2's high nibbles with w1's
// (the masks drop what a shift carries across bytes). The dequantization and the dot kernels
// unpack each block once.
struct Q4KScalesMins {
  uint8_t sc[8];
  uint8_t m[8];
};
inline Q4KScalesMins UnpackQ4KScales(const uint8_t* scales) {  // Q4_K's or Q5_K's 12 scale bytes
  uint32_t w[3];
  std::memcpy(w, scales, 12);
  const uint32_t sc_lo = w[0] & 0x3f3f3f3fu, m_lo = w[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4);
  Q4KScalesMins s;
  std::memcpy(s.sc, &sc_lo, 4);
  std::memcpy(s.sc + 4, &sc_hi, 4);
  std::memcpy(s.m, &m_lo, 4);
  std::memcpy(s.m + 4, &m_hi, 4);
  return s;
}

// A Q5_0 / Q5_1 block's fifth bits as one word (bit j: element j), and the 5-bit code of
// element j < 32 given that word (read it once per block).
template <class Block>
inline uint32_t Q5HighBits(const Block& b) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  return qh;
}
template <class Block>
inline int Q5Code(const Block& b, uint32_t qh, int j) {
  const int low = j < kQk / 2 ? b.qs[j] & 0xF : b.qs[j - kQk / 2] >> 4;
  return low | static_cast<int>(((qh >> j) & 1u) << 4);
}

// Q3_K's 16 6-bit group scales s_g (before the −32) as bytes: g < 8 in *lo, g ≥ 8 in *hi. The
// low 4 bits of s_g are nibbles of scales[0..7] (g < 8: low nibble of byte g; g ≥ 8: high nibble
// of byte g − 8), the high 2 bits come from scales[8..11] (byte 8 + g % 4, bits 2·(g / 4)):
// eight at a time from the bytes read as words.
inline void Q3KScaleWords(const uint8_t* scales, uint64_t* lo, uint64_t* hi) {
  uint64_t nibbles;
  uint32_t top;
  std::memcpy(&nibbles, scales, 8);
  std::memcpy(&top, scales + 8, 4);
  const uint64_t nib = 0x0F0F0F0F0F0F0F0Full, two = 0x03030303u;
  const uint64_t top_lo = (top & two) | (static_cast<uint64_t>((top >> 2) & two) << 32);
  const uint64_t top_hi = ((top >> 4) & two) | (static_cast<uint64_t>((top >> 6) & two) << 32);
  *lo = (nibbles & nib) | (top_lo << 4);
  *hi = ((nibbles >> 4) & nib) | (top_hi << 4);
}
// Q3_K's group scales s_g − 32 ∈ [−32, 31].
inline void Q3KScales(const uint8_t* scales, int8_t* s) {  // s [16]
  uint64_t w[2];
  Q3KScaleWords(scales, &w[0], &w[1]);
  uint8_t raw[16];
  std::memcpy(raw, w, 16);
  for (int g = 0; g < 16; ++g) s[g] = static_cast<int8_t>(raw[g] - 32);
}

// Q2_K's and Q3_K's code of element e (see BlockQ2_K).
inline int Q2KCode(const BlockQ2_K& b, int e) {
  const int n = e >> 7, j = (e >> 5) & 3, hl = e & 31;
  return (b.qs[32 * n + hl] >> (2 * j)) & 3;
}
inline int Q3KCode(const BlockQ3_K& b, int e) {
  const int n = e >> 7, j = (e >> 5) & 3, hl = e & 31;
  const int low = (b.qs[32 * n + hl] >> (2 * j)) & 3;
  return ((b.hmask[hl] >> (4 * n + j)) & 1) ? low : low - 4;
}

// The 4-bit code of element 64c + 32·hi + l (l < 32) of a Q4_K block, and Q5_K's 5-bit one.
inline int Q4KCode(const BlockQ4_K& b, int c, int hi, int l) {
  return hi ? b.qs[32 * c + l] >> 4 : b.qs[32 * c + l] & 0xF;
}
inline int Q5KCode(const BlockQ5_K& b, int c, int hi, int l) {
  const int nibble = hi ? b.qs[32 * c + l] >> 4 : b.qs[32 * c + l] & 0xF;
  return nibble | (((b.qh[l] >> (2 * c + hi)) & 1) << 4);
}

inline float F16ToF32Portable(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: renormalize
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t F32ToF16Portable(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFF;
  if (abs >= 0x7F800000u) {  // inf / NaN
    return sign | 0x7C00 | (abs > 0x7F800000u ? 0x200 | ((abs >> 13) & 0x3FF) : 0);
  }
  if (abs >= 0x477FF000u) return sign | 0x7C00;  // rounds to >= 65520: overflow to inf
  if (abs < 0x38800000u) {                       // result is subnormal or zero
    if (abs < 0x33000000u) return sign;          // < 2^-25 rounds to zero
    const uint32_t e = abs >> 23;
    const uint32_t mant = (abs & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return sign | static_cast<uint16_t>(q);
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  const uint32_t rem = r & 0x1FFF;
  r >>= 13;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return sign | static_cast<uint16_t>(r);
}

inline float F16ToF32(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return F16ToF32Portable(h);
#endif
}

inline uint16_t F32ToF16(float f) {
#if defined(__F16C__)
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
  return F32ToF16Portable(f);
#endif
}

inline float Bf16ToF32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace witcert
