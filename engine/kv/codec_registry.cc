// The one table of KV schemes. Adding a scheme = one codec file + one line here.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/kv/codec.h"

namespace witcert {
namespace {

struct Entry {
  const char* name;
  std::unique_ptr<KvCodec> (*make)();
};

constexpr Entry kCodecTable[] = {
    {"fp32", MakeFp32Codec},            // exact CPU reference
    {"fp16", MakeFp16Codec},
    {"bf16", MakeBf16Codec},
    {"fp8-e4m3-raw", MakeFp8RawCodec},
    {"fp8-e4m3", MakeFp8ScaledCodec},
    {"int8-rtn", MakeInt8RtnCodec},
    {"int8-dither", MakeInt8DitherCodec},  // Tier B
    {"int4-rtn", MakeInt4RtnCodec},
    {"kivi2", MakeKivi2Codec},  // K group-encoded; V per-token (ForValues)
};

const std::vector<std::unique_ptr<KvCodec>>& Instances() {
  static const auto* instances = [] {
    auto* v = new std::vector<std::unique_ptr<KvCodec>>();
    for (const Entry& e : kCodecTable) v->push_back(e.make());
    return v;
  }();
  return *instances;
}

}  // namespace

absl::Status KvCodec::Validate(int32_t d) const {
  if (d <= 0 || d % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("head_dim must be positive and even, got ", d));
  }
  return absl::OkStatus();
}

void KvCodec::EncodeGroup(const float* x, int32_t n, int32_t d, const CodecContext& ctx,
                          uint8_t* codes, int64_t code_stride, uint8_t* /*params*/) const {
  for (int32_t i = 0; i < n; ++i) {
    CodecContext row = ctx;
    row.pos = ctx.pos + i;
    Encode(x + static_cast<int64_t>(i) * d, d, row, codes + i * code_stride);
  }
}

void KvCodec::DecodeGroupRows(const uint8_t* in, int64_t code_stride, int32_t n, const uint8_t* params,
                              int32_t d, const CodecContext& ctx, float* x) const {
  for (int32_t i = 0; i < n; ++i) {
    CodecContext row = ctx;
    row.pos = ctx.pos + i;
    DecodeInGroup(in + i * code_stride, params, d, row, x + static_cast<int64_t>(i) * d);
  }
}

absl::StatusOr<const KvCodec*> FindKvCodec(std::string_view name) {
  for (const auto& c : Instances()) {
    if (c->name() == name) return c.get();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown KV scheme '", std::string(name), "'; registered: ",
                                                 absl::StrJoin(RegisteredKvCodecs(), ", ")));
}

std::vector<std::string> RegisteredKvCodecs() {
  std::vector<std::string> names;
  for (const Entry& e : kCodecTable) names.emplace_back(e.name);
  return names;
}

}  // namespace witcert
