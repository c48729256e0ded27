// Counter-based dither for the Tier B int8 codec.
//
// The dither ξ is never stored: writer and reader regenerate it from
// (seed, layer, kv head, position, channel, K|V). A stateless hash (splitmix64's finalizer
// applied per field) gives CPU and CUDA the same bits with no RNG state to carry. ξ has a
// 2^-24 grid on [−½, ½): every value is exact in fp32; the deviation from a continuous
// uniform is ≤ 2^-24 of a quantization step and is covered by the fp slack of u_t.
#pragma once

#include <cstdint>

#include "kernels/meter/hd.h"

namespace witcert::meter {

WITCERT_HD inline uint64_t Mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// ξ ∈ [−½, ½) for one channel of one cached vector.
WITCERT_HD inline float DitherValue(uint64_t seed, uint32_t layer, uint32_t kv_head,
                                    uint64_t pos, uint32_t channel, bool is_value) {
  uint64_t h = Mix64(seed);
  h = Mix64(h ^ ((static_cast<uint64_t>(layer) << 32) | kv_head));
  h = Mix64(h ^ pos);
  h = Mix64(h ^ ((static_cast<uint64_t>(channel) << 1) | (is_value ? 1u : 0u)));
  return static_cast<float>(h >> 40) * 5.9604644775390625e-8f - 0.5f;
}

}  // namespace witcert::meter
