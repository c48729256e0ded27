// Counter-based dither for the Tier B int8 codec.
//
// The dither ξ is never stored: writer and reader regenerate it from
// (seed, layer, kv head, position, channel). A stateless hash gives CPU and CUDA the same bits
// with no RNG state to carry:
//  * per cached vector, splitmix64's finalizer (Mix64) applied per field: seed, then
//    (layer, kv head), then position → a 64-bit token hash;
//  * per group of 4 channels [4g, 4g+4), one 32-bit word: g on a Weyl sequence offset by the
//    token hash's low half, xored with its high half, through murmur3's 32-bit finalizer
//    (a bijection with full avalanche; distinct groups give distinct inputs, the Weyl step
//    being odd). Byte j of the word is channel 4g+j's dither byte b, and
//        ξ = (b − 127.5)/256 ∈ [−255/512, 255/512],
//    256 levels on a 1/256 grid, every one exact in fp32 (as is m − ξ for an int8 code m).
//    One finalizer serves 4 channels: the decode kernels regenerate ξ for every key they
//    read, and a word per group is 4× fewer multiplies than a word per channel.
// What the 256-level grid costs the Tier B bound (docs/certificates.md): for any x the 256
// equally likely residuals r/s = x/s + ξ − m are 256 consecutive points of a 1/256 lattice
// inside [−½ − 2^-16, ½ + 2^-16] (m rounds fl(fl(x/s) + ξ)), so their mean is within
// 1/512 + 2^-16 of 0 and, centred, they are a symmetric discrete uniform: strictly
// sub-Gaussian with proxy (1 − 2^-16)/12 < 1/12. The bias adds ‖q‖₁·s·kDitherBias/√d to u_t
// (TierBCoefficient).
//
// Keys only: the int8-dither codec stores values by round-to-nearest on the same scale
// (ξ = 0). The value side of the certificate comes from the witness (ρ), never from the
// dither's statistics, so dithering values bought nothing and cost a hash per value read.
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

// The part of the hash shared by every vector of one (layer, KV head): a decode kernel hashes it
// once and each token with DitherTokenHashAt.
WITCERT_HD inline uint64_t DitherHeadHash(uint64_t seed, uint32_t layer, uint32_t kv_head) {
  return Mix64(Mix64(seed) ^ ((static_cast<uint64_t>(layer) << 32) | kv_head));
}
WITCERT_HD inline uint64_t DitherTokenHashAt(uint64_t head_hash, uint64_t pos) {
  return Mix64(head_hash ^ pos);
}

// The part of the hash shared by every channel of one cached vector.
WITCERT_HD inline uint64_t DitherTokenHash(uint64_t seed, uint32_t layer, uint32_t kv_head,
                                           uint64_t pos) {
  return DitherTokenHashAt(DitherHeadHash(seed, layer, kv_head), pos);
}

// The dither bytes of key channels [4·group, 4·group + 4) (byte j: channel 4·group + j).
WITCERT_HD inline uint32_t DitherWord(uint64_t token_hash, uint32_t group) {
  const uint32_t x = (static_cast<uint32_t>(token_hash) + group * 0x9e3779b9u) ^
                     static_cast<uint32_t>(token_hash >> 32);
  return Fmix32(x);
}

// ξ = (b − 127.5)/256 of a dither byte b (exact).
WITCERT_HD inline float DitherFromByte(uint32_t b) {
  return static_cast<float>(b) * 0.00390625f - 0.498046875f;
}

// Bound on the mean of a channel's dithered residual, in units of its scale (header comment).
constexpr double kDitherBias = 1.0 / 512.0 + 1.0 / 65536.0;

// ξ of one channel of a cached vector from its DitherTokenHash: the key's dither, 0 for a value.
WITCERT_HD inline float DitherFromTokenHash(uint64_t token_hash, uint32_t channel, bool is_value) {
  if (is_value) return 0.0f;
  return DitherFromByte((DitherWord(token_hash, channel >> 2) >> (8 * (channel & 3))) & 0xffu);
}

// ξ for one channel of one cached vector.
WITCERT_HD inline float DitherValue(uint64_t seed, uint32_t layer, uint32_t kv_head,
                                    uint64_t pos, uint32_t channel, bool is_value) {
  return DitherFromTokenHash(DitherTokenHash(seed, layer, kv_head, pos), channel, is_value);
}

}  // namespace witcert::meter
