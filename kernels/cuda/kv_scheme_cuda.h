// The KV schemes the CUDA kernels store, by name, with their storage sizes.
//
// The names and byte formats are those of the CPU codecs (engine/kv/codec_*.cc); the GPU
// pool splits each vector's CPU slot into separate arrays (codes, scales, witness) so the
// decode kernel reads codes with wide coalesced loads (paged_kv_cuda.h has the layout).
// Adding a scheme = one enumerator + one row here + one device codec in kv_codec_device.cuh
// (WithDevCodec) and its instantiation lines; no kernel changes.
// kivi2 is the one side-specific scheme: keys are encoded per channel over a whole block
// (group parameters per (block, KV head), written once the block is full), values per token
// with a (zero, scale) pair stored in the value scale array.
#pragma once

#include <cstdint>
#include <string_view>

#include "kernels/meter/hd.h"

namespace witcert {

enum class KvScheme : int32_t {
  kFp32 = 0,      // exact reference: no witness
  kFp16,
  kBf16,
  kFp8Raw,        // fp8-e4m3-raw
  kFp8Scaled,     // fp8-e4m3, bf16 per-token scale
  kInt8Rtn,
  kInt8Dither,    // Tier B
  kInt4Rtn,       // group 32, bf16 scale per group
  kKivi2,         // 2-bit asymmetric: keys per channel over a block, values per token
  kCount,
};

struct KvSchemeInfo {
  const char* name;
  int32_t bits_per_channel;   // code bits per channel
  int32_t scale_group;        // channels per bf16 scale; 0: no scale
  bool exact;                 // no witness (the reference precision)
  bool tier_b;                // dither scale gives the Tier B bound
  bool group_keys;            // keys encoded per (block, KV head) group: kivi2
};

inline constexpr KvSchemeInfo kKvSchemeInfo[] = {
    {"fp32", 32, 0, true, false, false},
    {"fp16", 16, 0, false, false, false},
    {"bf16", 16, 0, false, false, false},
    {"fp8-e4m3-raw", 8, 0, false, false, false},
    {"fp8-e4m3", 8, -1, false, false, false},   // -1: one scale per vector
    {"int8-rtn", 8, -1, false, false, false},
    {"int8-dither", 8, -1, false, true, false},
    {"int4-rtn", 4, 32, false, false, false},
    {"kivi2", 2, 0, false, false, true},         // scales: see ScalesPerVector
};
static_assert(sizeof(kKvSchemeInfo) / sizeof(kKvSchemeInfo[0]) == static_cast<int>(KvScheme::kCount),
              "one row per scheme");

inline const KvSchemeInfo& SchemeInfo(KvScheme s) { return kKvSchemeInfo[static_cast<int32_t>(s)]; }

inline bool KvSchemeFromName(std::string_view name, KvScheme* out) {
  for (int32_t i = 0; i < static_cast<int32_t>(KvScheme::kCount); ++i) {
    if (name == kKvSchemeInfo[i].name) {
      *out = static_cast<KvScheme>(i);
      return true;
    }
  }
  return false;
}

// Bytes of codes of one vector of `head_dim` channels.
inline int32_t CodeBytes(KvScheme s, int32_t head_dim) {
  return SchemeInfo(s).bits_per_channel * head_dim / 8;
}
// 16-bit scale words per vector of one side: bf16 scales (per vector or per group of
// channels), or kivi2's fp16 (zero, scale) pair of a value vector (its keys have none).
inline int32_t ScalesPerVector(KvScheme s, int32_t head_dim, bool is_value) {
  if (SchemeInfo(s).group_keys) return is_value ? 2 : 0;
  int32_t g = SchemeInfo(s).scale_group;
  return g == 0 ? 0 : (g < 0 ? 1 : head_dim / g);
}
// 16-bit words of group parameters per (block, KV head), keys only: kivi2's fp16 (zero,
// scale) per channel, [d / 2][zeros, scales][2] (KeyGroupWord); 0 for every other scheme.
inline int32_t GroupParamsPerBlock(KvScheme s, int32_t head_dim) {
  return SchemeInfo(s).group_keys ? 2 * head_dim : 0;
}
// The word of channel c's zero (or scale) among a (block, KV head)'s group parameters: channel
// pairs (2p, 2p + 1) as [z_2p, z_2p+1, s_2p, s_2p+1], so one 32-bit load is a pair's zeros (or
// scales), as the tensor-core K pass takes them (pipe_tc_kivi2_keys.cuh), and 8 channels from a
// multiple of 8 are 16 words from word 2·c.
WITCERT_HD constexpr int32_t KeyGroupWord(int32_t c, bool scale) { return 4 * (c / 2) + (c % 2) + (scale ? 2 : 0); }

}  // namespace witcert
