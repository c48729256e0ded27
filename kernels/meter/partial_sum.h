// Helpers a parallel kernel needs on top of cert_math.h, kept beside it so CPU tests can
// check them against the serial forms.
//
// SumPartialsSameMax: a split reduced by many threads gives each thread a CertPartial over a
// subset of the split's tokens, all relative to the SAME split max m (set before the first
// PartialAddToken). Adding their sums is a re-association of the split's sums: recursive
// summation of n non-negative terms in any order/tree has relative error ≤ γ_{n−1}, so the
// combined chain = Σ chains (= the token count) keeps SumInflation's γ_chain sound and the
// result is the same leaf the serial two-pass split produces (merges unchanged, no rescale).
//
// ResidualNormFromWitness: ‖ρ‖ from B band norms, rounded up (the CPU reference's RhoNorm).
//
// DitherTokenHash / DitherFromTokenHash: DitherValue (dither_hash.h) split into its
// per-vector prefix and per-channel suffix, so a kernel hashes a token once and each
// channel once; the composition is the very same arithmetic (tested bit for bit).
#pragma once

#include <math.h>
#include <stdint.h>

#include "kernels/meter/cert_math.h"
#include "kernels/meter/dither_hash.h"
#include "kernels/meter/hd.h"

namespace witcert::meter {

// x and y must share m (or be empty).
WITCERT_HD inline CertPartial SumPartialsSameMax(const CertPartial& x, const CertPartial& y) {
  if (x.count == 0) return y;
  if (y.count == 0) return x;
  CertPartial r = x;
  r.z = x.z + y.z;
  r.b = x.b + y.b;
  r.c = x.c + y.c;
  r.eps_max = fmaxf(x.eps_max, y.eps_max);
  r.vmax = fmaxf(x.vmax, y.vmax);
  r.eta_max = fmaxf(x.eta_max, y.eta_max);
  r.count = x.count + y.count;
  r.chain = x.chain + y.chain;
  r.merges = x.merges > y.merges ? x.merges : y.merges;
  r.bad = x.bad || y.bad;
  return r;
}

// ‖ρ‖₂ ≤ sqrt(Σ_b w_b²)·(1 + 2(B+4)u): the band witnesses already bound each band's norm.
WITCERT_HD inline float ResidualNormFromWitness(const float* w, int32_t num_bands) {
  float s = 0.0f;
  for (int32_t b = 0; b < num_bands; ++b) s += w[b] * w[b];
  return sqrtf(s) * (1.0f + 2.0f * static_cast<float>(num_bands + 4) * kUnitRoundoff);
}

// The part of DitherValue's hash shared by every channel of one cached vector.
WITCERT_HD inline uint64_t DitherTokenHash(uint64_t seed, uint32_t layer, uint32_t kv_head,
                                           uint64_t pos) {
  uint64_t h = Mix64(seed);
  h = Mix64(h ^ ((static_cast<uint64_t>(layer) << 32) | kv_head));
  return Mix64(h ^ pos);
}

WITCERT_HD inline float DitherFromTokenHash(uint64_t token_hash, uint32_t channel, bool is_value) {
  uint64_t h = Mix64(token_hash ^ ((static_cast<uint64_t>(channel) << 1) | (is_value ? 1u : 0u)));
  return static_cast<float>(h >> 40) * 5.9604644775390625e-8f - 0.5f;
}

}  // namespace witcert::meter
