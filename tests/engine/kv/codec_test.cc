// Codec registry and per-scheme round-trip error bounds.
#include "engine/kv/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/meter/dither_hash.h"
#include "kernels/meter/float_formats.h"

namespace witcert {
namespace {

TEST(CodecRegistry, LookupAndUnknownName) {
  for (const std::string& name : RegisteredKvCodecs()) {
    auto c = FindKvCodec(name);
    ASSERT_TRUE(c.ok()) << name;
    EXPECT_EQ((*c)->name(), name);
  }
  auto bad = FindKvCodec("int3-magic");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("int8-dither"), std::string::npos);
  EXPECT_FALSE((*FindKvCodec("int4-rtn"))->Validate(48).ok());
}

// The cache reads a block with DecodeGroupRows: the very bits of DecodeInGroup row by row, for
// every codec and both sides (kivi2's keys convert their group parameters once; its values
// unpack a code byte at a time), rows strided as in the cache, dither positions included.
TEST(CodecRegistry, GroupRowsDecodeAsRowByRow) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 2.0f);
  constexpr int32_t kRows = 16, kStrideExtra = 24;
  for (const std::string& name : RegisteredKvCodecs()) {
    for (int32_t d : {64, 128}) {
      const KvCodec* key = *FindKvCodec(name);
      for (const KvCodec* codec : {key, key->ForValues()}) {
        SCOPED_TRACE(name + (codec == key ? " keys" : " values") + " d=" + std::to_string(d));
        if (!codec->Validate(d).ok()) continue;
        std::vector<float> x(static_cast<size_t>(kRows) * d);
        for (float& v : x) v = g(rng) * (rng() % 5 == 0 ? 40.0f : 1.0f);
        const int64_t stride = codec->BytesPerVector(d) + kStrideExtra;
        std::vector<uint8_t> codes(static_cast<size_t>(kRows) * stride, 0xa5);
        std::vector<uint8_t> params(std::max(codec->GroupParamBytes(d, kRows), 1), 0);
        const CodecContext ctx{.seed = 9, .layer = 2, .kv_head = 1, .pos = 1000, .is_value = codec != key};
        codec->EncodeGroup(x.data(), kRows, d, ctx, codes.data(), stride, params.data());
        const uint8_t* p = codec->GroupParamBytes(d, kRows) > 0 ? params.data() : nullptr;
        std::vector<float> rows(x.size()), each(x.size());
        codec->DecodeGroupRows(codes.data(), stride, kRows, p, d, ctx, rows.data());
        for (int32_t i = 0; i < kRows; ++i) {
          CodecContext row = ctx;
          row.pos = ctx.pos + i;
          codec->DecodeInGroup(codes.data() + i * stride, p, d, row, each.data() + static_cast<size_t>(i) * d);
        }
        EXPECT_EQ(std::memcmp(rows.data(), each.data(), rows.size() * sizeof(float)), 0);
      }
    }
  }
}

// The fp8 codecs decode by a table (engine/kv/fp8_values.h): every one of the 256 codes, raw and
// under a scale, gives the scalar rule's bits (NaN codes included).
TEST(Codecs, Fp8DecodeIsTheScalarRuleForEveryCode) {
  const KvCodec* raw = *FindKvCodec("fp8-e4m3-raw");
  const KvCodec* scaled = *FindKvCodec("fp8-e4m3");
  constexpr int32_t d = 256;
  std::vector<uint8_t> in(2 + d);
  const uint16_t scale_bits = meter::FloatToBf16(0.7f);
  std::memcpy(in.data(), &scale_bits, 2);  // the scaled layout: [bf16 scale][d codes]
  for (int32_t c = 0; c < d; ++c) in[2 + c] = static_cast<uint8_t>(c);
  std::vector<float> x(d), y(d);
  raw->Decode(in.data() + 2, d, CodecContext{}, x.data());
  scaled->Decode(in.data(), d, CodecContext{}, y.data());
  const float s = meter::Bf16ToFloat(scale_bits);
  for (int32_t c = 0; c < d; ++c) {
    const float want = meter::Fp8E4M3ToFloat(static_cast<uint8_t>(c)), want_scaled = want * s;
    EXPECT_EQ(std::memcmp(&x[c], &want, 4), 0) << "code " << c;
    EXPECT_EQ(std::memcmp(&y[c], &want_scaled, 4), 0) << "code " << c;
  }
}

// int8-dither decodes x̂_c = s·(m_c − ξ_c) with ξ from the dither hash for keys (a word per four
// channels) and 0 for values: against meter::DitherValue channel by channel, every bit, at
// several positions, plus the zero scale.
TEST(Codecs, DitherDecodeIsTheChannelFormula) {
  const KvCodec* codec = *FindKvCodec("int8-dither");
  std::mt19937 rng(3);
  constexpr int32_t d = 128;
  for (int64_t pos : {0, 7, 123456}) {
    for (bool is_value : {false, true}) {
      std::vector<uint8_t> in(2 + d);
      const uint16_t scale_bits = meter::FloatToBf16(0.031f);
      std::memcpy(in.data(), &scale_bits, 2);
      for (int32_t c = 0; c < d; ++c) in[2 + c] = static_cast<uint8_t>(rng());
      const CodecContext ctx{.seed = 5, .layer = 3, .kv_head = 1, .pos = pos, .is_value = is_value};
      std::vector<float> x(d);
      codec->Decode(in.data(), d, ctx, x.data());
      const float s = meter::Bf16ToFloat(scale_bits);
      for (int32_t c = 0; c < d; ++c) {
        const float xi = meter::DitherValue(5, 3, 1, static_cast<uint64_t>(pos), static_cast<uint32_t>(c), is_value);
        const float want = s * (static_cast<float>(static_cast<int8_t>(in[2 + c])) - xi);
        EXPECT_EQ(std::memcmp(&x[c], &want, 4), 0) << "pos " << pos << " channel " << c << " value " << is_value;
      }
      in[0] = in[1] = 0;  // scale 0: zeros
      codec->Decode(in.data(), d, ctx, x.data());
      for (float v : x) EXPECT_EQ(v, 0.0f);
    }
  }
}

// int4-rtn decodes channel c as ((byte c/2 >> 4·(c % 2)) & 15) − 8 times its group's bf16 scale,
// a byte at a time: every byte value in every position of a group, against that formula.
TEST(Codecs, Int4DecodeIsTheNibbleFormula) {
  const KvCodec* codec = *FindKvCodec("int4-rtn");
  constexpr int32_t d = 512, groups = d / 32;
  std::vector<uint8_t> in(codec->BytesPerVector(d));
  for (int32_t g = 0; g < groups; ++g) {
    const uint16_t bits = meter::FloatToBf16(0.01f * static_cast<float>(g + 1));
    std::memcpy(in.data() + 2 * g, &bits, 2);
  }
  uint8_t* codes = in.data() + 2 * groups;
  for (int32_t b = 0; b < d / 2; ++b) codes[b] = static_cast<uint8_t>(b);  // every byte value once
  std::vector<float> x(d);
  codec->Decode(in.data(), d, CodecContext{}, x.data());
  for (int32_t c = 0; c < d; ++c) {
    uint16_t bits;
    std::memcpy(&bits, in.data() + 2 * (c / 32), 2);
    const float want = static_cast<float>(((codes[c / 2] >> ((c & 1) * 4)) & 0xf) - 8) * meter::Bf16ToFloat(bits);
    EXPECT_EQ(std::memcmp(&x[c], &want, 4), 0) << "channel " << c;
  }
}

TEST(CodecRegistry, BytesAndTiers) {
  const int d = 128;
  EXPECT_EQ((*FindKvCodec("fp32"))->BytesPerVector(d), 512);
  EXPECT_TRUE((*FindKvCodec("fp32"))->is_exact());
  EXPECT_FALSE((*FindKvCodec("fp16"))->is_exact());
  EXPECT_EQ((*FindKvCodec("fp16"))->BytesPerVector(d), 256);
  EXPECT_EQ((*FindKvCodec("fp8-e4m3-raw"))->BytesPerVector(d), 128);
  EXPECT_EQ((*FindKvCodec("int8-rtn"))->BytesPerVector(d), 130);
  EXPECT_EQ((*FindKvCodec("int4-rtn"))->BytesPerVector(d), 64 + 8);
  EXPECT_EQ((*FindKvCodec("int8-dither"))->tier(), Tier::kB);
  EXPECT_EQ((*FindKvCodec("int8-rtn"))->tier(), Tier::kA);
}

// Max |x − x̂| relative to absmax (per-token schemes): half a step, step = absmax/levels,
// plus the bf16 scale's upward rounding (≤ 2^-8).
TEST(Codecs, RoundTripErrorWithinHalfStep) {
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 3.0f);
  struct Expect { const char* name; float rel; };
  const Expect expects[] = {{"int8-rtn", 0.5f / 127 * 1.01f}, {"int8-dither", 0.5f / 126 * 1.01f},
                            {"fp8-e4m3", 0.0625f}, {"fp16", 1.0f / 1024}, {"bf16", 1.0f / 128},
                            {"int4-rtn", 0.5f / 7 * 1.01f}, {"fp32", 0.0f}};
  const int d = 64;
  std::vector<float> x(d), y(d);
  for (const auto& e : expects) {
    const KvCodec& c = **FindKvCodec(e.name);
    std::vector<uint8_t> buf(c.BytesPerVector(d));
    for (int it = 0; it < 200; ++it) {
      float amax = 0;
      for (auto& v : x) amax = std::fmax(amax, std::fabs(v = g(rng)));
      CodecContext ctx{9, 1, 2, it, false};
      c.Encode(x.data(), d, ctx, buf.data());
      c.Decode(buf.data(), d, ctx, y.data());
      for (int j = 0; j < d; ++j) {
        // fp8/fp16/bf16 are relative to |x| (floating), integer schemes to the absmax.
        float ref = std::string(e.name).rfind("int", 0) == 0 ? amax : std::fabs(x[j]) + 1e-6f;
        if (std::string(e.name) == "int4-rtn") ref = amax;  // group absmax ≤ token absmax
        ASSERT_LE(std::fabs(x[j] - y[j]), e.rel * ref + 1e-7f) << e.name;
      }
    }
  }
}

TEST(Codecs, DitherResidualIsUniformOverHalfStep) {
  // Subtractive dither: r/s is U[−½, ½) whatever x is. 64·2000 samples of a constant-ish
  // input: the mean of r/s has σ = sqrt(1/12/128000) ≈ 8e-4, allow 5σ; |r/s| ≤ ½ + fp slack.
  const KvCodec& c = **FindKvCodec("int8-dither");
  const int d = 64;
  std::vector<float> x(d, 0.3f), y(d);
  x[0] = 1.0f;  // fixes the scale at 1/126
  std::vector<uint8_t> buf(c.BytesPerVector(d));
  double sum = 0, sum2 = 0;
  int n = 0;
  for (int pos = 0; pos < 2000; ++pos) {
    CodecContext ctx{5, 0, 0, pos, false};
    c.Encode(x.data(), d, ctx, buf.data());
    c.Decode(buf.data(), d, ctx, y.data());
    float s = c.DitherScale(buf.data(), d);
    for (int j = 1; j < d; ++j) {
      double r = (x[j] - y[j]) / s;
      ASSERT_LE(std::fabs(r), 0.5 + 1e-4);
      sum += r;
      sum2 += r * r;
      ++n;
    }
  }
  EXPECT_NEAR(sum / n, 0.0, 5 * 8.1e-4);
  EXPECT_NEAR(sum2 / n, 1.0 / 12, 0.002);
}

// The fp16 codec's vectorized decode (F16C) must return exactly the bits of the shared
// software conversion that the CUDA kernels use, for every one of the 65536 codes.
TEST(Codecs, Fp16DecodeIsBitExactForEveryCode) {
  const KvCodec& codec = **FindKvCodec("fp16");
  std::vector<uint8_t> codes(2 * 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    codes[2 * h] = static_cast<uint8_t>(h & 0xff);
    codes[2 * h + 1] = static_cast<uint8_t>(h >> 8);
  }
  std::vector<float> out(65536);
  CodecContext ctx{0, 0, 0, 0, false};
  codec.Decode(codes.data(), 65536, ctx, out.data());
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = meter::HalfToFloat(static_cast<uint16_t>(h));
    uint32_t a, b;
    std::memcpy(&a, &out[h], 4);
    std::memcpy(&b, &want, 4);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(out[h])) << h;
    } else {
      ASSERT_EQ(a, b) << "code " << h;
    }
  }
}

// The fp16 codec's vectorized encode (F16C where all eight lanes are finite and in range)
// must give FloatToHalfSat's bits for every input: all halfway cases, subnormals, the
// saturation edge, inf and NaN, in every lane position.
TEST(Codecs, Fp16EncodeIsBitExactWithTheScalarRule) {
  const KvCodec& codec = **FindKvCodec("fp16");
  std::vector<float> x;
  for (uint32_t h = 0; h < 0x7c00u; ++h) {  // every finite half, its neighbours and halfway points
    const float f = meter::HalfToFloat(static_cast<uint16_t>(h));
    const float g = meter::HalfToFloat(static_cast<uint16_t>(h + 1));
    for (float v : {f, std::nextafter(f, g), 0.5f * (f + g), std::nextafter(0.5f * (f + g), f)}) {
      x.push_back(v);
      x.push_back(-v);
    }
  }
  for (float v : {65504.0f, 65519.0f, 65520.0f, 65536.0f, 1e30f, INFINITY, NAN, 1e-30f, 0.0f}) {
    for (float s : {v, -v}) x.push_back(s);
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    const uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, 4);
    x.push_back(f);
  }
  // Odd lengths and offsets put each special value in every lane and the scalar tail.
  for (int shift = 0; shift < 8; ++shift) {
    const int64_t n = static_cast<int64_t>(x.size()) - shift;
    std::vector<uint8_t> out(2 * n);
    CodecContext ctx{0, 0, 0, 0, false};
    codec.Encode(x.data() + shift, static_cast<int32_t>(n), ctx, out.data());
    for (int64_t i = 0; i < n; ++i) {
      uint16_t got;
      std::memcpy(&got, &out[2 * i], 2);
      ASSERT_EQ(got, meter::FloatToHalfSat(x[shift + i]))
          << "value " << x[shift + i] << " lane " << i % 8;
    }
  }
}

TEST(Codecs, Fp8RawSaturatesInsteadOfOverflowing) {
  const KvCodec& c = **FindKvCodec("fp8-e4m3-raw");
  std::vector<float> x(16, 1000.0f), y(16);
  std::vector<uint8_t> buf(16);
  c.Encode(x.data(), 16, {}, buf.data());
  c.Decode(buf.data(), 16, {}, y.data());
  for (float v : y) EXPECT_EQ(v, 448.0f);
}

}  // namespace
}  // namespace witcert
