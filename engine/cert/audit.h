// Audit (shadow) mode, certificates.md §6: for a deterministic sample of cells, the true TV
// and output error from the exact K/V, computed in long double.
#pragma once

#include <cstdint>

namespace witcert {

// Deterministic sampling: hash of (layer, head, step) below `rate`.
bool AuditSampled(int32_t layer, int32_t head, int64_t step, double rate);

struct AuditResult {
  double true_tv = 0;
  double true_out_err = 0;   // ‖o − õ‖₂ (õ from stored rows in long double)
  double out_norm = 0;       // ‖õ‖₂
};

// q [d]; exact k, v and stored ks, vs rows [S, d].
AuditResult AuditCell(const float* q, const float* k, const float* v, const float* ks,
                      const float* vs, int64_t num_tokens, int32_t head_dim);

}  // namespace witcert
