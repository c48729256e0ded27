// KvCodec: how one cached K or V vector (one token, one KV head, head_dim values) is stored.
//
// A scheme is one codec plus one line in the registry table (codec_registry.cc). The
// witness, meter and gate are generic over codecs: they only see decode(encode(x)), the
// byte size, whether the scheme is exact, and (Tier B) the per-token dither scale.
//
// The CPU exact reference is fp32 (the forward pass computes K/V in fp32): the `fp32` codec
// is exact and carries no witness; `fp16` and `bf16` are lossy relative to it and carry a
// witness like any other scheme. (On a GPU whose engine holds bf16/fp16, that codec is the
// reference instead.)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace witcert {

// Tier A: deterministic band-norm witness. Tier B: subtractive-dither probabilistic bound
// (certificates.md §2); Tier B codecs carry the Tier A witness too (ε̂ = min(ε, u)).
enum class Tier { kA, kB };

// Identifies one cached vector: the dither hash input of Tier B codecs.
struct CodecContext {
  uint64_t seed = 0;
  int32_t layer = 0;
  int32_t kv_head = 0;
  int64_t pos = 0;
  bool is_value = false;
};

class KvCodec {
 public:
  virtual ~KvCodec() = default;
  virtual std::string_view name() const = 0;
  // Bytes one vector occupies (codes + scales), for head_dim `d`.
  virtual int32_t BytesPerVector(int32_t d) const = 0;
  virtual bool is_exact() const { return false; }
  virtual Tier tier() const { return Tier::kA; }
  // InvalidArgument when the scheme cannot hold vectors of this head_dim.
  virtual absl::Status Validate(int32_t d) const;
  // x [d] → out [BytesPerVector(d)].
  virtual void Encode(const float* x, int32_t d, const CodecContext& ctx, uint8_t* out) const = 0;
  // in [BytesPerVector(d)] → x [d] (= decode(encode(x)), what attention reads).
  virtual void Decode(const uint8_t* in, int32_t d, const CodecContext& ctx, float* x) const = 0;
  // Tier B: the dither step s of this stored vector (0 for Tier A codecs).
  virtual float DitherScale(const uint8_t* in, int32_t d) const { return 0.0f; }

  // ---- Side-specific schemes -------------------------------------------------------------
  // A scheme that stores values differently from keys (kivi2: keys per-channel over a token
  // group, values per-token) returns its value-side codec here; the cache stores V with
  // ForValues() of the V scheme. Default: one codec for both sides.
  virtual const KvCodec* ForValues() const { return this; }

  // ---- Group-encoded schemes (kivi2 keys) ------------------------------------------------
  // A group-encoded codec needs statistics over a whole block of G = block_size tokens (per-
  // channel scales). The cache keeps a block's rows exact until every token of it is written,
  // then calls EncodeGroup once and (re)computes the witnesses; rows are read back with
  // DecodeInGroup. Its per-vector Encode/Decode are never used by the cache.
  virtual bool group_encoded() const { return false; }
  // Bytes of the per-(block, KV head) parameters of a group of `group` tokens (0: none).
  virtual int32_t GroupParamBytes(int32_t d, int32_t group) const { return 0; }
  // x [n, d] (row stride d) → row i's codes at codes + i·code_stride (BytesPerVector(d) bytes
  // each) and the group parameters at params [GroupParamBytes(d, n)]. Row i's context is
  // `ctx` with pos = ctx.pos + i. Default: per-row Encode (params untouched).
  virtual void EncodeGroup(const float* x, int32_t n, int32_t d, const CodecContext& ctx,
                           uint8_t* codes, int64_t code_stride, uint8_t* params) const;
  // in [BytesPerVector(d)], params [GroupParamBytes] (null when 0) → x [d]. Default: Decode.
  virtual void DecodeInGroup(const uint8_t* in, const uint8_t* params, int32_t d,
                             const CodecContext& ctx, float* x) const {
    Decode(in, d, ctx, x);
  }
  // n rows of one group: row i's codes at in + i·code_stride → x + i·d, each the bits
  // DecodeInGroup gives it (context pos = ctx.pos + i). How the cache reads a block; a codec
  // whose parameters are per group converts them once here instead of once per row.
  // Default: DecodeInGroup row by row.
  virtual void DecodeGroupRows(const uint8_t* in, int64_t code_stride, int32_t n, const uint8_t* params,
                               int32_t d, const CodecContext& ctx, float* x) const;
};

// Name → codec (a process-wide static table). Unknown names → InvalidArgument listing the
// registered ones.
absl::StatusOr<const KvCodec*> FindKvCodec(std::string_view name);
std::vector<std::string> RegisteredKvCodecs();

// Factories, one per scheme family (each in its own codec_*.cc).
std::unique_ptr<KvCodec> MakeFp32Codec();
std::unique_ptr<KvCodec> MakeFp16Codec();
std::unique_ptr<KvCodec> MakeBf16Codec();
std::unique_ptr<KvCodec> MakeFp8RawCodec();
std::unique_ptr<KvCodec> MakeFp8ScaledCodec();
std::unique_ptr<KvCodec> MakeInt8RtnCodec();
std::unique_ptr<KvCodec> MakeInt8DitherCodec();
std::unique_ptr<KvCodec> MakeInt4RtnCodec();
std::unique_ptr<KvCodec> MakeKivi2Codec();  // keys per-channel (group), values per-token

}  // namespace witcert
