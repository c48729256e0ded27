// The stored witness formats, shared by the CPU cache, the GPU write path and every reader.
//
// Key band witness (Tier A, certificates.md §1): B one-byte codes c_b and one bf16 unit U per
// vector, with w_b ≤ c_b·U for every band (w_b = ‖(x − x̂)_b‖₂, the residual's band norm):
//  * U is the smallest bf16 with 255·U ≥ max_b w_b, and c_b the smallest code with c_b·U ≥ w_b
//    (≤ 255; both checked exactly in double, so no rounding of an estimate can change them);
//  * c_b·U is exact in fp32 (≤ 8 significant bits times a bf16's 8), so a reader's decoded
//    bound is never below the code's value. A band norm that is not finite stores U = +inf and
//    every c_b = 255: the bound is +inf, the cell vacuous (never NaN from 0·inf: no code is 0).
//  * B + 2 bytes per vector instead of 2·B for fp16 band norms. A band is loosened by at most
//    U (≈ max_b w_b / 255): ≤ 0.4% of the largest band, U itself up to 2^-7 above max/255
//    (bf16's 8 significant bits).
// Value summary: ρ = ‖x − x̂‖₂ and ν = ‖x̂‖₂ + ρ, each a bf16 rounded up (4 bytes; at most 2^-7
// above the norms). The value bound needs nothing else (‖o − õ‖ ≤ 2·TV·max_t ν_t + Σ_t p̂_t ρ_t),
// and both are query-independent, so they are computed once at write time instead of per token
// and step.
//
// Both are computed in double in one fixed order of fma steps (a key's band sums: each band's
// channels in ascending order; a value's sums: ValueSummaryOf), so the CPU cache and the GPU
// write path store the same bits.
#pragma once

#include <math.h>
#include <stdint.h>

#include "kernels/meter/cert_math.h"
#include "kernels/meter/float_formats.h"
#include "kernels/meter/hd.h"

namespace witcert::meter {

constexpr int32_t kValueSummaryWords = 2;  // bf16 ρ, ν
constexpr uint16_t kBf16PosInf = 0x7f80u;

// Smallest bf16 ≥ x for x ≥ 0; NaN and +inf give +inf.
WITCERT_HD inline uint16_t DoubleToBf16Up(double x) {
  if (!(x <= 3.4028234663852886e38)) return kBf16PosInf;
  if (x <= 0.0) return 0;
  return FloatToBf16Up(RoundUpToFloat(x));
}

// Σ_{c ∈ band b} r_c² in double, the band's channels in ascending order (bands.h's map:
// pairs [b·P, (b+1)·P), P = d/(2B); interleaved pairs are dims (2p, 2p+1), half-split pairs
// p and p + d/2). Each step is one fused multiply-add, written as fma: a correctly rounded
// operation on every host and device, so no compiler's choice to contract (or not) can make
// the CPU and GPU sums differ.
WITCERT_HD inline double BandSquareSum(const double* r, int32_t head_dim, int32_t num_bands, bool interleaved,
                                       int32_t b) {
  const int32_t half = head_dim / 2, ppb = half / num_bands;
  double sum = 0.0;
  const int32_t first = interleaved ? 2 * b * ppb : b * ppb;
  const int32_t len = interleaved ? 2 * ppb : ppb;
  for (int32_t c = first; c < first + len; ++c) sum = fma(r[c], r[c], sum);
  if (!interleaved) {
    for (int32_t c = half + b * ppb; c < half + (b + 1) * ppb; ++c) sum = fma(r[c], r[c], sum);
  }
  return sum;
}

// A norm from its sum of squares, inflated past the double sum's and sqrt's rounding
// ((d + 1)·2^-53 ≪ 10^-12).
WITCERT_HD inline double InflatedNorm(double sum_of_squares) { return sqrt(sum_of_squares) * (1.0 + 1e-12); }

// U for band norms whose largest is `wmax` (`finite`: every band norm finite): the smallest
// bf16 with 255·U ≥ wmax, +inf when a norm is not finite. Defined by minimality, so any
// estimate followed by the two exact corrections gives the same bits (the products are exact:
// 8 × 8 significant bits).
WITCERT_HD inline uint16_t BandWitnessUnit(double wmax, bool finite) {
  if (!finite) return kBf16PosInf;
  uint16_t unit = DoubleToBf16Up(wmax * (1.0 / 255.0));
  while (unit > 0 && 255.0 * static_cast<double>(Bf16ToFloat(static_cast<uint16_t>(unit - 1))) >= wmax) --unit;
  while (unit != kBf16PosInf && 255.0 * static_cast<double>(Bf16ToFloat(unit)) < wmax) ++unit;
  return unit;
}

// The smallest code c ≤ 255 with c·U ≥ w (255 when U is +inf; 0 when U is 0, i.e. every band
// norm is 0). c·U is exact in double; the estimate by a reciprocal is corrected both ways.
WITCERT_HD inline uint8_t BandWitnessCode(double w, uint16_t unit) {
  if (unit == kBf16PosInf) return 255;
  if (unit == 0) return 0;
  const double u = static_cast<double>(Bf16ToFloat(unit));
#if defined(__CUDA_ARCH__)
  const double r = __drcp_rn(u);
#else
  const double r = 1.0 / u;
#endif
  double c = ceil(w * r);
  if (!(c <= 255.0)) c = 255.0;
  if (c < 0.0) c = 0.0;
  while (c > 0.0 && (c - 1.0) * u >= w) c -= 1.0;
  while (c < 255.0 && c * u < w) c += 1.0;
  return static_cast<uint8_t>(c);
}

// Key band witness of B band norms `w` (doubles, already ≥ the true norms): codes [B], returns U.
// (The GPU write path runs the same two steps with one band per lane.)
WITCERT_HD inline uint16_t EncodeBandWitness(const double* w, int32_t num_bands, uint8_t* codes) {
  double wmax = 0.0;
  bool finite = true;
  for (int32_t b = 0; b < num_bands; ++b) {
    if (!(w[b] <= 1.7976931348623157e308)) finite = false;  // NaN or inf
    else if (w[b] > wmax) wmax = w[b];
  }
  const uint16_t unit = BandWitnessUnit(wmax, finite);
  for (int32_t b = 0; b < num_bands; ++b) codes[b] = BandWitnessCode(w[b], unit);
  return unit;
}

// The bound c·U of one band, exact in fp32.
WITCERT_HD inline float BandWitnessBound(uint32_t code, float unit) { return static_cast<float>(code) * unit; }

// Value summary from the two sums of squares (residual, stored value) in double.
WITCERT_HD inline void EncodeValueSummary(double resid_sum, double value_sum, uint16_t* out) {
  const double rho = InflatedNorm(resid_sum);
  out[0] = DoubleToBf16Up(rho);
  // ‖x̂‖ is also what a reader's fp32 decode of the codes gives, within 2^-24 per channel
  // (s·m exact vs rounded): the 2^-20 margin covers either reading.
  const double nu = fma(sqrt(value_sum), 1.0 + 9.5367431640625e-07, rho);  // one rounding, as written
  out[1] = DoubleToBf16Up(nu * (1.0 + 1e-12));
}

// The key witness from per-band sums of squares (BandSquareSum of each band, in band order):
// the CPU computes them in one loop, the GPU write path one band per lane.
WITCERT_HD inline uint16_t KeyWitnessFromBandSums(const double* resid_band_sums, int32_t num_bands,
                                                  uint8_t* codes) {
  double w[64];  // B ≤ 64
  for (int32_t b = 0; b < num_bands; ++b) w[b] = InflatedNorm(resid_band_sums[b]);
  return EncodeBandWitness(w, num_bands, codes);
}

// The value summary's two sums of squares are formed in the order the GPU write path forms
// them with one warp per vector: lane l (of 32) sums channels l, l + 32, l + 64, … in
// increasing order (fma steps), then a butterfly over the lanes (offsets 16, 8, 4, 2, 1). As
// a + b = b + a exactly, every lane ends with the bits of the pairwise tree that adds lanes
// l and l + o for l < o at each offset o; the host forms that tree (31 adds). r, xh [d].
inline void ValueSummaryOf(const double* r, const double* xh, int32_t head_dim, uint16_t* out) {
  constexpr int32_t kLanes = 32;
  double rs[kLanes], vs[kLanes];
  for (int32_t l = 0; l < kLanes; ++l) {
    rs[l] = 0.0;
    vs[l] = 0.0;
    for (int32_t c = l; c < head_dim; c += kLanes) {
      rs[l] = fma(r[c], r[c], rs[l]);
      vs[l] = fma(xh[c], xh[c], vs[l]);
    }
  }
  for (int32_t o = kLanes / 2; o > 0; o >>= 1) {
    for (int32_t l = 0; l < o; ++l) {
      rs[l] += rs[l + o];
      vs[l] += vs[l + o];
    }
  }
  EncodeValueSummary(rs[0], vs[0], out);
}

}  // namespace witcert::meter
