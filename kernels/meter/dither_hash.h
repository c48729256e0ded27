// Counter-based dither for the Tier B int8 codec.
//
// The dither ξ is never stored: writer and reader regenerate it from
// (seed, layer, kv head, position, channel, K|V). A stateless hash gives CPU and CUDA the same
// bits with no RNG state to carry:
//  * per cached vector, splitmix64's finalizer (Mix64) applied per field: seed, then
//    (layer, kv head), then position → a 64-bit token hash;
//  * per channel, a 32-bit step: the channel's key 2c + (K|V) on a Weyl sequence offset by the
//    token hash's low half, xored with its high half, through murmur3's 32-bit finalizer.
//    Distinct channels of one vector give distinct finalizer inputs (the Weyl step is odd and
//    the key is < 2^32), and the finalizer is a bijection with full avalanche. This step runs
//    for every channel of every token the decode kernel reads: two 32-bit multiplies and three
//    xor-shifts instead of Mix64's 64-bit ones (the decode's speed-up: bench/RESULTS.md, 2026-12-02).
// ξ has a 2^-24 grid on [−½, ½): every value is exact in fp32; the deviation from a continuous
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

// murmur3's 32-bit finalizer: a bijection on uint32 with full avalanche.
WITCERT_HD inline uint32_t Fmix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  return x ^ (x >> 16);
}

// The part of the hash shared by every channel of one cached vector.
WITCERT_HD inline uint64_t DitherTokenHash(uint64_t seed, uint32_t layer, uint32_t kv_head,
                                           uint64_t pos) {
  uint64_t h = Mix64(seed);
  h = Mix64(h ^ ((static_cast<uint64_t>(layer) << 32) | kv_head));
  return Mix64(h ^ pos);
}

// ξ ∈ [−½, ½) of one channel, from its vector's DitherTokenHash.
WITCERT_HD inline float DitherFromTokenHash(uint64_t token_hash, uint32_t channel, bool is_value) {
  const uint32_t key = (channel << 1) | (is_value ? 1u : 0u);
  const uint32_t x = (static_cast<uint32_t>(token_hash) + key * 0x9e3779b9u) ^
                     static_cast<uint32_t>(token_hash >> 32);
  return static_cast<float>(Fmix32(x) >> 8) * 5.9604644775390625e-8f - 0.5f;
}

// ξ ∈ [−½, ½) for one channel of one cached vector.
WITCERT_HD inline float DitherValue(uint64_t seed, uint32_t layer, uint32_t kv_head,
                                    uint64_t pos, uint32_t channel, bool is_value) {
  return DitherFromTokenHash(DitherTokenHash(seed, layer, kv_head, pos), channel, is_value);
}

}  // namespace witcert::meter
