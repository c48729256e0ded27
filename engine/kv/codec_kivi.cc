// kivi2: KIVI-style asymmetric 2-bit KV (keys per-channel over a token group, values per-token).
//
// Why keys per-channel: key outliers live in fixed channels, so a per-token scale would be
// set by one channel and crush the rest; a per-channel scale needs statistics over many
// tokens, so keys are encoded a whole block (G = block_size tokens) at a time through the
// group hook of KvCodec, and the cache keeps a not-yet-filled block exact (ε = 0) until then.
// Values have no channel structure and are quantized per token, one vector at a time.
//
// Parameters are fp16 (as in KIVI): zero z = fp16(min) (nearest, saturating) and scale
// s = fp16↑((max − z)/3) (rounded up, capped at the largest finite fp16) so codes
// m = clamp(round((x − z)/s), 0, 3) span the range. Decode is x̂ = z + s·m: s has 11
// significant bits and m ≤ 3, so s·m is exact in fp32 and a fused multiply-add gives the same
// bits as separate ops (CPU and CUDA agree whatever the compiler contracts). Soundness never
// rests on these choices: the witness is computed from the decoded x̂ itself.
//
// Layouts (2-bit codes packed four per byte, channel c at byte c/4, bits 2·(c%4)):
//   key vector   [d/4 codes]                     group params [d fp16 zeros][d fp16 scales]
//   value vector [fp16 zero][fp16 scale][d/4 codes]
#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/kv/codec.h"
#include "kernels/meter/float_formats.h"

namespace witcert {
namespace {

constexpr float kMaxHalf = 65504.0f;

struct ZeroScale {
  uint16_t zero_bits, scale_bits;
  float zero, scale;
};

// fp16 parameters for values in [lo, hi] (see the file comment).
ZeroScale MakeParams(float lo, float hi) {
  ZeroScale p;
  p.zero_bits = meter::FloatToHalfSat(std::isnan(lo) ? 0.0f : lo);
  p.zero = meter::HalfToFloat(p.zero_bits);
  const float range = hi - p.zero;
  if (!(range > 0.0f)) {  // constant group, or NaN input
    p.scale_bits = 0;
  } else {
    float step = range / 3.0f;
    p.scale_bits = step < kMaxHalf ? meter::FloatToHalfUp(step) : meter::FloatToHalfSat(kMaxHalf);
  }
  p.scale = meter::HalfToFloat(p.scale_bits);
  return p;
}

uint8_t Code(float x, const ZeroScale& p) {
  if (!(p.scale > 0.0f)) return 0;
  float r = std::nearbyint((x - p.zero) / p.scale);
  if (!(r >= 0.0f)) r = 0.0f;  // also NaN
  if (r > 3.0f) r = 3.0f;
  return static_cast<uint8_t>(r);
}

float Reconstruct(float zero, float scale, uint8_t m) {
  return zero + scale * static_cast<float>(m);  // s·m exact: fused or not, same bits
}

void PutCode(uint8_t* codes, int32_t c, uint8_t m) {
  codes[c / 4] = static_cast<uint8_t>(codes[c / 4] | (m << (2 * (c % 4))));
}
uint8_t GetCode(const uint8_t* codes, int32_t c) { return (codes[c / 4] >> (2 * (c % 4))) & 3u; }

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void Store16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

absl::Status ValidateKivi(int32_t d) {
  if (d <= 0 || d % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("kivi2 needs head_dim % 4 == 0, got ", d));
  }
  return absl::OkStatus();
}

// Values: per-token asymmetric 2-bit.
class Kivi2ValueCodec final : public KvCodec {
 public:
  std::string_view name() const override { return "kivi2"; }
  int32_t BytesPerVector(int32_t d) const override { return 4 + d / 4; }
  absl::Status Validate(int32_t d) const override { return ValidateKivi(d); }
  void Encode(const float* x, int32_t d, const CodecContext&, uint8_t* out) const override {
    float lo = INFINITY, hi = -INFINITY;
    for (int32_t c = 0; c < d; ++c) {
      lo = std::fmin(lo, x[c]);
      hi = std::fmax(hi, x[c]);
    }
    const ZeroScale p = MakeParams(lo, hi);
    Store16(out, p.zero_bits);
    Store16(out + 2, p.scale_bits);
    uint8_t* codes = out + 4;
    std::memset(codes, 0, d / 4);
    for (int32_t c = 0; c < d; ++c) PutCode(codes, c, Code(x[c], p));
  }
  void Decode(const uint8_t* in, int32_t d, const CodecContext&, float* x) const override {
    const float zero = meter::HalfToFloat(Load16(in));
    const float scale = meter::HalfToFloat(Load16(in + 2));
    const uint8_t* codes = in + 4;
    for (int32_t b = 0; b < d / 4; ++b) {  // four channels a code byte, as GetCode reads them
      const uint32_t byte = codes[b];
      for (int32_t k = 0; k < 4; ++k) {
        x[4 * b + k] = Reconstruct(zero, scale, static_cast<uint8_t>((byte >> (2 * k)) & 3u));
      }
    }
  }
};

// Keys: per-channel asymmetric 2-bit over a group of tokens.
class Kivi2KeyCodec final : public KvCodec {
 public:
  std::string_view name() const override { return "kivi2"; }
  int32_t BytesPerVector(int32_t d) const override { return d / 4; }
  absl::Status Validate(int32_t d) const override { return ValidateKivi(d); }
  const KvCodec* ForValues() const override { return &values_; }
  bool group_encoded() const override { return true; }
  int32_t GroupParamBytes(int32_t d, int32_t) const override { return 4 * d; }

  // Never used by the cache (group_encoded): without group parameters there is nothing to
  // reconstruct, so a stray caller gets zeros (residual = x, still covered by a witness).
  void Encode(const float*, int32_t d, const CodecContext&, uint8_t* out) const override {
    std::memset(out, 0, d / 4);
  }
  void Decode(const uint8_t*, int32_t d, const CodecContext&, float* x) const override {
    std::fill(x, x + d, 0.0f);
  }

  void EncodeGroup(const float* x, int32_t n, int32_t d, const CodecContext&, uint8_t* codes,
                   int64_t code_stride, uint8_t* params) const override {
    for (int32_t i = 0; i < n; ++i) std::memset(codes + i * code_stride, 0, d / 4);
    for (int32_t c = 0; c < d; ++c) {
      float lo = INFINITY, hi = -INFINITY;
      for (int32_t i = 0; i < n; ++i) {
        lo = std::fmin(lo, x[static_cast<int64_t>(i) * d + c]);
        hi = std::fmax(hi, x[static_cast<int64_t>(i) * d + c]);
      }
      const ZeroScale p = MakeParams(lo, hi);
      Store16(params + 2 * c, p.zero_bits);
      Store16(params + 2 * (d + c), p.scale_bits);
      for (int32_t i = 0; i < n; ++i) {
        PutCode(codes + i * code_stride, c, Code(x[static_cast<int64_t>(i) * d + c], p));
      }
    }
  }
  void DecodeInGroup(const uint8_t* in, const uint8_t* params, int32_t d, const CodecContext&,
                     float* x) const override {
    for (int32_t c = 0; c < d; ++c) {
      x[c] = Reconstruct(meter::HalfToFloat(Load16(params + 2 * c)),
                         meter::HalfToFloat(Load16(params + 2 * (d + c))), GetCode(in, c));
    }
  }
  // The block's fp16 parameters converted once (2·d conversions, not 2·d per row), then each
  // row four channels a code byte: the same Reconstruct, so the same bits as DecodeInGroup.
  void DecodeGroupRows(const uint8_t* in, int64_t code_stride, int32_t n, const uint8_t* params, int32_t d,
                       const CodecContext& ctx, float* x) const override {
    constexpr int32_t kMaxD = 512;
    if (d > kMaxD) return KvCodec::DecodeGroupRows(in, code_stride, n, params, d, ctx, x);
    float zero[kMaxD], scale[kMaxD];
    for (int32_t c = 0; c < d; ++c) {
      zero[c] = meter::HalfToFloat(Load16(params + 2 * c));
      scale[c] = meter::HalfToFloat(Load16(params + 2 * (d + c)));
    }
    for (int32_t i = 0; i < n; ++i, in += code_stride, x += d) {
      for (int32_t b = 0; b < d / 4; ++b) {
        const uint32_t byte = in[b];
        for (int32_t k = 0; k < 4; ++k) {
          const int32_t c = 4 * b + k;
          x[c] = Reconstruct(zero[c], scale[c], static_cast<uint8_t>((byte >> (2 * k)) & 3u));
        }
      }
    }
  }

 private:
  Kivi2ValueCodec values_;
};

}  // namespace

std::unique_ptr<KvCodec> MakeKivi2Codec() { return std::make_unique<Kivi2KeyCodec>(); }

}  // namespace witcert
