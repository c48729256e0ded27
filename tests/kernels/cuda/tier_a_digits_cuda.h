// Runs kernels/cuda/tier_a_digits.cuh on the device for tier_a_digits_test: one query head per
// 8 lanes, its 8 band factors through BandFactorDigitsOf, then ε of each token through
// TierAEpsilonOfDigits, as the tensor-core decode computes them.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_status.h"

namespace witcert::testing {

// factors [heads, 8]; codes [heads, tokens, 8]; units [heads, tokens] → eps [heads, tokens].
CudaStatus TierAEpsilonOfDigitsCuda(const std::vector<float>& factors, const std::vector<uint8_t>& codes,
                                    const std::vector<float>& units, int64_t tokens, std::vector<float>* eps);

// The prefill kernels' tensor-core form (BandDigitFragments, TierABandSumsMma) beside the dp2a form,
// for rows sharing tokens: factors [rows, 8] (rows a multiple of 16), codes [tokens, 8] (tokens a
// multiple of 8), units [tokens] → eps_dp2a and eps_mma [rows, tokens].
CudaStatus TierAEpsilonBothFormsCuda(const std::vector<float>& factors, const std::vector<uint8_t>& codes,
                                     const std::vector<float>& units, std::vector<float>* eps_dp2a,
                                     std::vector<float>* eps_mma);

}  // namespace witcert::testing
