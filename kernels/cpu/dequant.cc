// Scalar dequantization of every supported GGML format to fp32.
//
// This is the readable definition of each encoding: MatmulReference and EmbeddingLookup are
// built on it and the tests check it bit-exactly against python-gguf. It is not on the
// per-token hot path (only one embedding row per token), so it stays scalar.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_blocks.h"

namespace witcert {
namespace {

void DequantQ4_0(const BlockQ4_0* b, int64_t nb, float* out) {  // out [nb * 32]
  for (int64_t i = 0; i < nb; ++i, out += kQk) {
    const float d = F16ToF32(b[i].d);
    for (int j = 0; j < kQk / 2; ++j) {
      out[j] = d * static_cast<float>((b[i].qs[j] & 0xF) - 8);
      out[j + kQk / 2] = d * static_cast<float>((b[i].qs[j] >> 4) - 8);
    }
  }
}

void DequantQ4_1(const BlockQ4_1* b, int64_t nb, float* out) {  // out [nb * 32]
  for (int64_t i = 0; i < nb; ++i, out += kQk) {
    const float d = F16ToF32(b[i].d);
    const float m = F16ToF32(b[i].m);
    for (int j = 0; j < kQk / 2; ++j) {
      out[j] = d * static_cast<float>(b[i].qs[j] & 0xF) + m;
      out[j + kQk / 2] = d * static_cast<float>(b[i].qs[j] >> 4) + m;
    }
  }
}

void DequantQ8_0(const BlockQ8_0* b, int64_t nb, float* out) {  // out [nb * 32]
  for (int64_t i = 0; i < nb; ++i, out += kQk) {
    const float d = F16ToF32(b[i].d);
    for (int j = 0; j < kQk; ++j) out[j] = d * static_cast<float>(b[i].qs[j]);
  }
}

void DequantIQ4_NL(const BlockIQ4_NL* b, int64_t nb, float* out) {  // out [nb * 32]
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    for (int l = 0; l < kQk / 2; ++l) out[l] = d * static_cast<float>(kIq4Values[b[i].qs[l] & 0xF]);
    for (int l = 0; l < kQk / 2; ++l) out[kQk / 2 + l] = d * static_cast<float>(kIq4Values[b[i].qs[l] >> 4]);
    out += kQk;
  }
}

void DequantIQ4_XS(const BlockIQ4_XS* b, int64_t nb, float* out) {  // out [nb * 256]
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    for (int j = 0; j < kQkK / 32; ++j) {
      const float dl = d * static_cast<float>(Iq4XsScale(b[i], j));
      const uint8_t* q = b[i].qs + 16 * j;
      for (int l = 0; l < 16; ++l) out[l] = dl * static_cast<float>(kIq4Values[q[l] & 0xF]);
      for (int l = 0; l < 16; ++l) out[16 + l] = dl * static_cast<float>(kIq4Values[q[l] >> 4]);
      out += 32;
    }
  }
}

void DequantQ5_0(const BlockQ5_0* b, int64_t nb, float* out) {  // out [nb * 32]
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    const uint32_t qh = Q5HighBits(b[i]);
    for (int j = 0; j < kQk; ++j) *out++ = d * static_cast<float>(Q5Code(b[i], qh, j) - 16);
  }
}

void DequantQ5_1(const BlockQ5_1* b, int64_t nb, float* out) {  // out [nb * 32]
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d), m = F16ToF32(b[i].m);
    const uint32_t qh = Q5HighBits(b[i]);
    for (int j = 0; j < kQk; ++j) *out++ = d * static_cast<float>(Q5Code(b[i], qh, j)) + m;
  }
}

void DequantQ2_K(const BlockQ2_K* b, int64_t nb, float* out) {  // out [nb * 256]
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    const float dmin = F16ToF32(b[i].dmin);
    for (int g = 0; g < kQkK / 16; ++g) {
      const float dl = d * static_cast<float>(b[i].scales[g] & 0xF);
      const float ml = dmin * static_cast<float>(b[i].scales[g] >> 4);
      for (int l = 0; l < 16; ++l) *out++ = dl * static_cast<float>(Q2KCode(b[i], 16 * g + l)) - ml;
    }
  }
}

void DequantQ3_K(const BlockQ3_K* b, int64_t nb, float* out) {  // out [nb * 256]
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    int8_t s[16];
    Q3KScales(b[i].scales, s);
    for (int g = 0; g < kQkK / 16; ++g) {
      const float dl = d * static_cast<float>(s[g]);
      for (int l = 0; l < 16; ++l) *out++ = dl * static_cast<float>(Q3KCode(b[i], 16 * g + l));
    }
  }
}

// Q4_K and Q5_K: code(block, c, hi, l) is the code of element 64c + 32·hi + l (hi = 0: the low
// nibbles, sub-block 2c; hi = 1: the high ones, sub-block 2c + 1).
template <class Block, class Code>
void DequantQ45K(const Block* b, int64_t nb, float* out, Code code) {  // out [nb * 256]
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    const float dmin = F16ToF32(b[i].dmin);
    const Q4KScalesMins s = UnpackQ4KScales(b[i].scales);
    for (int c = 0; c < 4; ++c) {  // 64-element chunk: sub-blocks 2c (low) and 2c+1 (high)
      const float d_lo = d * s.sc[2 * c], min_lo = dmin * s.m[2 * c];
      const float d_hi = d * s.sc[2 * c + 1], min_hi = dmin * s.m[2 * c + 1];
      for (int l = 0; l < 32; ++l) *out++ = d_lo * static_cast<float>(code(b[i], c, 0, l)) - min_lo;
      for (int l = 0; l < 32; ++l) *out++ = d_hi * static_cast<float>(code(b[i], c, 1, l)) - min_hi;
    }
  }
}

void DequantQ4_K(const BlockQ4_K* b, int64_t nb, float* out) { DequantQ45K(b, nb, out, Q4KCode); }
void DequantQ5_K(const BlockQ5_K* b, int64_t nb, float* out) { DequantQ45K(b, nb, out, Q5KCode); }

void DequantQ6_K(const BlockQ6_K* b, int64_t nb, float* out) {  // out [nb * 256]
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    for (int half = 0; half < 2; ++half) {  // 128 elements each
      const uint8_t* ql = b[i].ql + 64 * half;
      const uint8_t* qh = b[i].qh + 32 * half;
      const int8_t* sc = b[i].scales + 8 * half;
      float* y = out + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
    out += kQkK;
  }
}

}  // namespace

void DequantizeValues(GgmlType type, const uint8_t* src, int64_t count, float* out) {
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(out, src, static_cast<size_t>(count) * sizeof(float));
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = F16ToF32(h);
      }
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = Bf16ToF32(h);
      }
      return;
    case GgmlType::kQ4_0:
      DequantQ4_0(reinterpret_cast<const BlockQ4_0*>(src), count / kQk, out);
      return;
    case GgmlType::kQ4_1:
      DequantQ4_1(reinterpret_cast<const BlockQ4_1*>(src), count / kQk, out);
      return;
    case GgmlType::kIQ4_NL:
      DequantIQ4_NL(reinterpret_cast<const BlockIQ4_NL*>(src), count / kQk, out);
      return;
    case GgmlType::kIQ4_XS:
      DequantIQ4_XS(reinterpret_cast<const BlockIQ4_XS*>(src), count / kQkK, out);
      return;
    case GgmlType::kQ5_0:
      DequantQ5_0(reinterpret_cast<const BlockQ5_0*>(src), count / kQk, out);
      return;
    case GgmlType::kQ5_1:
      DequantQ5_1(reinterpret_cast<const BlockQ5_1*>(src), count / kQk, out);
      return;
    case GgmlType::kQ8_0:
      DequantQ8_0(reinterpret_cast<const BlockQ8_0*>(src), count / kQk, out);
      return;
    case GgmlType::kQ2_K:
      DequantQ2_K(reinterpret_cast<const BlockQ2_K*>(src), count / kQkK, out);
      return;
    case GgmlType::kQ3_K:
      DequantQ3_K(reinterpret_cast<const BlockQ3_K*>(src), count / kQkK, out);
      return;
    case GgmlType::kQ4_K:
      DequantQ4_K(reinterpret_cast<const BlockQ4_K*>(src), count / kQkK, out);
      return;
    case GgmlType::kQ5_K:
      DequantQ5_K(reinterpret_cast<const BlockQ5_K*>(src), count / kQkK, out);
      return;
    case GgmlType::kQ6_K:
      DequantQ6_K(reinterpret_cast<const BlockQ6_K*>(src), count / kQkK, out);
      return;
    default:  // unsupported: make the misuse loud rather than silently plausible
      for (int64_t i = 0; i < count; ++i) out[i] = std::numeric_limits<float>::quiet_NaN();
      return;
  }
}

void DequantizeRow(const QuantMatrix& w, int64_t r, float* out) {
  DequantizeValues(w.type, w.row(r), w.cols, out);
}

}  // namespace witcert
