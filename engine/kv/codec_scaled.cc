// Scaled schemes: fp8-e4m3 (per-token scale), int8-rtn, int8-dither (Tier B), int4-rtn.
//
// Scales are stored as bf16 rounded UP: 2 bytes, fp32's exponent range (huge-norm vectors
// cannot overflow a scale), and rounding up guarantees |x/s| never exceeds the code range,
// which subtractive dither requires (no saturation, certificates.md §2).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/kv/codec.h"
#include "engine/kv/fp8_values.h"
#include "kernels/meter/dither_hash.h"
#include "kernels/meter/float_formats.h"

namespace witcert {
namespace {

float AbsMax(const float* x, int32_t n) {
  float m = 0.0f;
  for (int32_t c = 0; c < n; ++c) m = std::fmax(m, std::fabs(x[c]));
  return m;
}

// Stores bf16-rounded-up absmax/range at `out`; returns the scale decode will use.
float WriteScale(float absmax, float range, uint8_t* out) {
  uint16_t b = meter::FloatToBf16Up(absmax / range);
  std::memcpy(out, &b, 2);
  return meter::Bf16ToFloat(b);
}
float ReadScale(const uint8_t* in) {
  uint16_t b;
  std::memcpy(&b, in, 2);
  return meter::Bf16ToFloat(b);
}

int32_t RoundClamp(float y, int32_t lim) {
  float r = std::nearbyint(y);
  if (!(r >= -lim)) r = static_cast<float>(-lim);  // also NaN
  if (r > lim) r = static_cast<float>(lim);
  return static_cast<int32_t>(r);
}

// Layout: [bf16 scale][d fp8 codes]; s = absmax/448.
class Fp8ScaledCodec final : public KvCodec {
 public:
  std::string_view name() const override { return "fp8-e4m3"; }
  int32_t BytesPerVector(int32_t d) const override { return d + 2; }
  void Encode(const float* x, int32_t d, const CodecContext&, uint8_t* out) const override {
    float s = WriteScale(AbsMax(x, d), 448.0f, out);
    float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int32_t c = 0; c < d; ++c) out[2 + c] = meter::FloatToFp8E4M3Sat(x[c] * inv);
  }
  void Decode(const uint8_t* in, int32_t d, const CodecContext&, float* x) const override {
    float s = ReadScale(in);
    const float* values = Fp8E4M3Values();
    for (int32_t c = 0; c < d; ++c) x[c] = values[in[2 + c]] * s;
  }
};

// Layout: [bf16 scale][d int8 codes]; symmetric, s = absmax/127.
class Int8RtnCodec final : public KvCodec {
 public:
  std::string_view name() const override { return "int8-rtn"; }
  int32_t BytesPerVector(int32_t d) const override { return d + 2; }
  void Encode(const float* x, int32_t d, const CodecContext&, uint8_t* out) const override {
    float s = WriteScale(AbsMax(x, d), 127.0f, out);
    for (int32_t c = 0; c < d; ++c) {
      int8_t m = s > 0.0f ? static_cast<int8_t>(RoundClamp(x[c] / s, 127)) : 0;
      std::memcpy(out + 2 + c, &m, 1);
    }
  }
  void Decode(const uint8_t* in, int32_t d, const CodecContext&, float* x) const override {
    float s = ReadScale(in);
    for (int32_t c = 0; c < d; ++c) x[c] = static_cast<float>(static_cast<int8_t>(in[2 + c])) * s;
  }
};

// Layout: [bf16 scale][d int8 codes]; s = absmax/126 so |x/s + ξ| ≤ 126.5 never saturates;
// m = round(x/s + ξ), x̂ = s·(m − ξ), ξ regenerated from the dither hash for keys and 0 for
// values (meter/dither_hash.h says why).
class Int8DitherCodec final : public KvCodec {
 public:
  std::string_view name() const override { return "int8-dither"; }
  int32_t BytesPerVector(int32_t d) const override { return d + 2; }
  Tier tier() const override { return Tier::kB; }
  void Encode(const float* x, int32_t d, const CodecContext& ctx, uint8_t* out) const override {
    float s = WriteScale(AbsMax(x, d), 126.0f, out);
    const uint64_t th = TokenHash(ctx);
    for (int32_t c = 0; c < d; ++c) {
      int8_t m = 0;
      if (s > 0.0f) m = static_cast<int8_t>(RoundClamp(x[c] / s + Xi(th, ctx, c), 127));
      std::memcpy(out + 2 + c, &m, 1);
    }
  }
  // x̂_c = s·(m_c − ξ_c): the key's ξ of four channels come from one dither word (hashed once
  // per four channels, not per channel), a value's ξ is 0. The same bits as Xi per channel.
  void Decode(const uint8_t* in, int32_t d, const CodecContext& ctx, float* x) const override {
    const float s = ReadScale(in);
    if (!(s > 0.0f)) {
      std::fill(x, x + d, 0.0f);
      return;
    }
    const int8_t* codes = reinterpret_cast<const int8_t*>(in + 2);
    if (ctx.is_value) {  // m − 0 is m exactly: s·m
      for (int32_t c = 0; c < d; ++c) x[c] = s * static_cast<float>(codes[c]);
      return;
    }
    const uint64_t th = TokenHash(ctx);
    int32_t c = 0;
    for (; c + 4 <= d; c += 4) {
      const uint32_t word = meter::DitherWord(th, static_cast<uint32_t>(c) >> 2);
      for (int32_t j = 0; j < 4; ++j) {
        const float xi = meter::DitherFromByte((word >> (8 * j)) & 0xffu);
        x[c + j] = s * (static_cast<float>(codes[c + j]) - xi);
      }
    }
    for (; c < d; ++c) x[c] = s * (static_cast<float>(codes[c]) - Xi(th, ctx, c));
  }
  float DitherScale(const uint8_t* in, int32_t d) const override { return ReadScale(in); }

 private:
  // DitherValue, its per-vector part hashed once per vector (the same bits).
  static uint64_t TokenHash(const CodecContext& ctx) {
    return meter::DitherTokenHash(ctx.seed, static_cast<uint32_t>(ctx.layer),
                                  static_cast<uint32_t>(ctx.kv_head), static_cast<uint64_t>(ctx.pos));
  }
  static float Xi(uint64_t token_hash, const CodecContext& ctx, int32_t c) {
    return meter::DitherFromTokenHash(token_hash, static_cast<uint32_t>(c), ctx.is_value);
  }
};

// Layout: [d/32 bf16 scales][d/2 bytes, two 4-bit codes (m+8) per byte]; group 32,
// symmetric per group, s_g = absmax_g/7.
class Int4RtnCodec final : public KvCodec {
 public:
  static constexpr int32_t kGroup = 32;
  std::string_view name() const override { return "int4-rtn"; }
  int32_t BytesPerVector(int32_t d) const override { return d / 2 + 2 * (d / kGroup); }
  absl::Status Validate(int32_t d) const override {
    if (d <= 0 || d % kGroup != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("int4-rtn needs head_dim % ", kGroup, " == 0, got ", d));
    }
    return absl::OkStatus();
  }
  void Encode(const float* x, int32_t d, const CodecContext&, uint8_t* out) const override {
    const int32_t groups = d / kGroup;
    uint8_t* codes = out + 2 * groups;
    std::memset(codes, 0, d / 2);
    for (int32_t g = 0; g < groups; ++g) {
      float s = WriteScale(AbsMax(x + g * kGroup, kGroup), 7.0f, out + 2 * g);
      for (int32_t c = g * kGroup; c < (g + 1) * kGroup; ++c) {
        int32_t m = s > 0.0f ? RoundClamp(x[c] / s, 7) : 0;
        codes[c / 2] |= static_cast<uint8_t>((m + 8) << ((c & 1) * 4));
      }
    }
  }
  void Decode(const uint8_t* in, int32_t d, const CodecContext&, float* x) const override {
    const int32_t groups = d / kGroup;
    const uint8_t* codes = in + 2 * groups;
    for (int32_t g = 0; g < groups; ++g) {
      const float s = ReadScale(in + 2 * g);
      for (int32_t b = g * kGroup / 2; b < (g + 1) * kGroup / 2; ++b) {  // a byte: channels 2b, 2b + 1
        const int32_t byte = codes[b];
        x[2 * b] = static_cast<float>((byte & 0xf) - 8) * s;
        x[2 * b + 1] = static_cast<float>((byte >> 4) - 8) * s;
      }
    }
  }
};

}  // namespace

std::unique_ptr<KvCodec> MakeFp8ScaledCodec() { return std::make_unique<Fp8ScaledCodec>(); }
std::unique_ptr<KvCodec> MakeInt8RtnCodec() { return std::make_unique<Int8RtnCodec>(); }
std::unique_ptr<KvCodec> MakeInt8DitherCodec() { return std::make_unique<Int8DitherCodec>(); }
std::unique_ptr<KvCodec> MakeInt4RtnCodec() { return std::make_unique<Int4RtnCodec>(); }

}  // namespace witcert
