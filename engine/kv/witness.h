// Tier A band-norm witness (certificates.md §1): w_b = ‖(x − x̂)_b‖₂ per RoPE band, stored as
// fp16 rounded UP so the stored value is never below the true norm.
#pragma once

#include <cstdint>

#include "engine/kv/half_array.h"
#include "engine/model/model_config.h"

namespace witcert {

struct BandLayout {
  int32_t head_dim = 0;
  int32_t num_bands = 8;
  RopePairing pairing = RopePairing::kInterleaved;
  bool interleaved() const { return pairing == RopePairing::kInterleaved; }
  int32_t witness_bytes() const { return 2 * num_bands; }
};

// x, x_hat [d] → w [B] fp16 bits: residual band norms, computed in double, rounded up.
void ComputeWitness(const float* x, const float* x_hat, const BandLayout& layout, uint16_t* w);

// w [B] fp16 bits → out [B] floats (exact widening; inline: the gather runs it per row).
// A witness is a norm rounded up, never NaN: the F16C path gives HalfToFloat's bits.
inline void DecodeWitness(const uint16_t* w, int32_t num_bands, float* out) {
  HalfArrayToFloat(reinterpret_cast<const uint8_t*>(w), num_bands, out);
}

}  // namespace witcert
