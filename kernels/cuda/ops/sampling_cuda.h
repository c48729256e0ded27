// Next-token sampling on the GPU, one CTA per row of logits: the CUDA counterpart of the
// engine's Sampler (engine/runtime/sampler.h), so a decode step's logits need not travel to
// the host.
//
// Per row, in order: penalties (logit −= presence + frequency·count for each listed token),
// then temperature 0 → the first index of the maximum (NaN never chosen); otherwise weights
// w = e^{(l − max)/T} over the candidates: the top_k largest logits when 0 < top_k < vocab
// (every logit equal to the k-th largest is kept: ties widen the set), then min_p (drop
// w < min_p), then top_p (keep the largest weights, down to the one whose inclusion brings
// the kept mass to ≥ top_p of the total; ties at that weight are kept). The token is drawn
// with the row's `uniform` u ∈ [0, 1): the first index i, in token-id order, whose cumulative
// kept weight exceeds u · (total kept weight).
//
// Exactness (why fixed point): weights are accumulated as 40-bit fixed-point integers (w·2^40,
// rounded down), so every sum, the top-p threshold and the draw are exact integer arithmetic,
// independent of thread order: the same logits and u give the same token on every run. The
// rounding moves each token's probability by < 2^-40 of the total.
// The host sampler walks sorted candidates for top-k / top-p; this one walks token ids, so
// the same u can pick a different token, from the same distribution.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_status.h"

namespace witcert {

struct SampleRowParams {
  float temperature = 1.0f;  // ≤ 0 → greedy
  float top_p = 1.0f;        // (0, 1]
  int32_t top_k = 0;         // 0 → off
  float min_p = 0.0f;        // 0 → off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t penalty_offset = 0;  // this row's entries in the penalty arrays
  int32_t penalty_count = 0;
  double uniform = 0.0;        // U[0, 1)
};

// One chunk's maximum of a row (SampleRowsCuda's argmax scratch): the first index holding it,
// −1 where the chunk is all NaN.
struct SampleArgmaxPartial {
  float value;
  int32_t index;
};
// Entries of argmax scratch SampleRowsCuda takes for n rows of `vocab` logits.
int64_t SampleArgmaxScratchEntries(int64_t n, int64_t vocab);

// logits [n, vocab] device, modified in place (penalties applied, then overwritten with
// weights); params [n] device; penalty_tokens / penalty_counts: distinct generated tokens and
// their counts, rows' ranges given by params (may be null when no row has any); out [n] device.
// argmax_scratch [SampleArgmaxScratchEntries(n, vocab)] device, or null: with it, a first
// launch takes each row's maximum over chunks of 4096 logits on many SMs (rows without
// penalties), instead of the row's one CTA scanning it (a Llama-3 row: 0.5 MB), the same index.
CudaStatus SampleRowsCuda(float* logits, int64_t n, int64_t vocab, const SampleRowParams* params,
                          const int32_t* penalty_tokens, const int32_t* penalty_counts,
                          int32_t* out, cudaStream_t stream,
                          SampleArgmaxPartial* argmax_scratch = nullptr);

}  // namespace witcert
