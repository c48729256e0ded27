// The stored witnesses of one vector (formats: kernels/meter/witness_format.h).
//  * Keys, the Tier A band witness (certificates.md §1): w_b ≥ ‖(x − x̂)_b‖₂ per RoPE band as
//    B one-byte codes of a per-vector bf16 unit, B + 2 bytes: [unit (bf16), c_0 … c_{B−1}].
//  * Values, the value summary: ρ ≥ ‖x − x̂‖₂ and ν ≥ ‖x̂‖₂ + ρ, two bf16 rounded up, 4 bytes:
//    [ρ, ν]. The value bound needs nothing more, so no value band norms are stored.
// Every stored bound is ≥ the real number it bounds (computed in double, rounded up).
#pragma once

#include <cstdint>
#include <cstring>

#include "engine/model/model_config.h"
#include "kernels/meter/float_formats.h"
#include "kernels/meter/witness_format.h"

namespace witcert {

struct BandLayout {
  int32_t head_dim = 0;
  int32_t num_bands = 8;
  RopePairing pairing = RopePairing::kInterleaved;
  bool interleaved() const { return pairing == RopePairing::kInterleaved; }
  int32_t key_witness_bytes() const { return 2 + num_bands; }
  static constexpr int32_t value_summary_bytes() { return 2 * meter::kValueSummaryWords; }
};

// x, x_hat [d] → the key band witness, key_witness_bytes() bytes at `out`.
void ComputeKeyWitness(const float* x, const float* x_hat, const BandLayout& layout, uint8_t* out);
// x, x_hat [d] → the value summary, value_summary_bytes() bytes at `out`.
void ComputeValueSummary(const float* x, const float* x_hat, const BandLayout& layout, uint8_t* out);

// A stored key witness → out [B], the bound c_b·U of each band (exact in fp32).
inline void DecodeKeyWitness(const uint8_t* in, int32_t num_bands, float* out) {
  uint16_t unit_bits;
  std::memcpy(&unit_bits, in, 2);
  const float unit = meter::Bf16ToFloat(unit_bits);
  for (int32_t b = 0; b < num_bands; ++b) out[b] = meter::BandWitnessBound(in[2 + b], unit);
}

// A stored value summary → ρ and ν.
inline void DecodeValueSummary(const uint8_t* in, float* rho, float* bound) {
  uint16_t w[2];
  std::memcpy(w, in, 4);
  *rho = meter::Bf16ToFloat(w[0]);
  *bound = meter::Bf16ToFloat(w[1]);
}

}  // namespace witcert
