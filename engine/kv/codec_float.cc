// Plain float-cast schemes: fp32 (exact reference), fp16, bf16, fp8-e4m3-raw.
// fp16 and fp8-raw saturate (±65504, ±448) instead of overflowing, so the residual — and
// hence the witness — stays finite.
#include <cstring>

#include "engine/kv/codec.h"
#include "engine/kv/fp8_values.h"
#include "engine/kv/half_array.h"
#include "kernels/meter/float_formats.h"

namespace witcert {
namespace {

class Fp32Codec final : public KvCodec {
 public:
  std::string_view name() const override { return "fp32"; }
  int32_t BytesPerVector(int32_t d) const override { return 4 * d; }
  bool is_exact() const override { return true; }
  void Encode(const float* x, int32_t d, const CodecContext&, uint8_t* out) const override {
    std::memcpy(out, x, sizeof(float) * d);
  }
  void Decode(const uint8_t* in, int32_t d, const CodecContext&, float* x) const override {
    std::memcpy(x, in, sizeof(float) * d);
  }
};

// 16-bit formats: `ToBits`/`FromBits` pick fp16 or bf16.
template <uint16_t (*ToBits)(float), float (*FromBits)(uint16_t)>
class Half16Codec final : public KvCodec {
 public:
  explicit Half16Codec(const char* name) : name_(name) {}
  std::string_view name() const override { return name_; }
  int32_t BytesPerVector(int32_t d) const override { return 2 * d; }
  void Encode(const float* x, int32_t d, const CodecContext&, uint8_t* out) const override {
    if constexpr (ToBits == meter::FloatToHalfSat) {  // F16C where built; same bits
      FloatArrayToHalfSat(x, d, out);
    } else {
      for (int32_t c = 0; c < d; ++c) {
        uint16_t h = ToBits(x[c]);
        std::memcpy(out + 2 * c, &h, 2);
      }
    }
  }
  void Decode(const uint8_t* in, int32_t d, const CodecContext&, float* x) const override {
    if constexpr (FromBits == meter::HalfToFloat) {  // F16C where built; same bits
      HalfArrayToFloat(in, d, x);
    } else {
      for (int32_t c = 0; c < d; ++c) {
        uint16_t h;
        std::memcpy(&h, in + 2 * c, 2);
        x[c] = FromBits(h);
      }
    }
  }

 private:
  const char* name_;
};

class Fp8RawCodec final : public KvCodec {
 public:
  std::string_view name() const override { return "fp8-e4m3-raw"; }
  int32_t BytesPerVector(int32_t d) const override { return d; }
  void Encode(const float* x, int32_t d, const CodecContext&, uint8_t* out) const override {
    for (int32_t c = 0; c < d; ++c) out[c] = meter::FloatToFp8E4M3Sat(x[c]);
  }
  void Decode(const uint8_t* in, int32_t d, const CodecContext&, float* x) const override {
    const float* values = Fp8E4M3Values();
    for (int32_t c = 0; c < d; ++c) x[c] = values[in[c]];
  }
};

}  // namespace

std::unique_ptr<KvCodec> MakeFp32Codec() { return std::make_unique<Fp32Codec>(); }
std::unique_ptr<KvCodec> MakeFp16Codec() {
  return std::make_unique<Half16Codec<meter::FloatToHalfSat, meter::HalfToFloat>>("fp16");
}
std::unique_ptr<KvCodec> MakeBf16Codec() {
  return std::make_unique<Half16Codec<meter::FloatToBf16, meter::Bf16ToFloat>>("bf16");
}
std::unique_ptr<KvCodec> MakeFp8RawCodec() { return std::make_unique<Fp8RawCodec>(); }

}  // namespace witcert
