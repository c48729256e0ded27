// Vectorized exp over float arrays, for the softmax-shaped loops outside the forward pass
// (sampling over a 50k–150k vocabulary, log-sum-exp for logprobs), where a libm call per
// element costs more than the rest of the step's host work.
//
// Accuracy: |ExpF(x) − e^x| ≤ 2 ulp of e^x for x ∈ [−87.3, 88.7] (Cody–Waite reduction
// x = k·ln2 + r, |r| ≤ ln2/2, the degree-7 Taylor polynomial, then 2^k by exponent bits);
// below −87.3 the result is 0 (no subnormals), above 88.7 it is +inf; NaN stays NaN.
// The AVX2 path and the scalar path compute the same polynomial in the same order, so
// results do not depend on which one ran or on the array's alignment.
#pragma once

#include <cstdint>

namespace witcert {

// e^x, the kernel's scalar path (for tails and for callers with one value).
float ExpF(float x);

// out[i] = e^{(x[i] − shift)·scale} for i < n; returns Σ out[i], accumulated in double
// (8 float lanes per step, each group added to the double sum). `out` may alias `x`.
double ExpShiftedSum(const float* x, int64_t n, float shift, float scale, float* out);

// Σ e^{(x[i] − shift)·scale} without storing the terms.
double ExpShiftedSumOnly(const float* x, int64_t n, float shift, float scale);

// The terms without their sum: out[i] = e^{(x[i] − shift)·scale}. `out` may alias `x`.
void ExpShifted(const float* x, int64_t n, float shift, float scale, float* out);

// max_i x[i], NaNs ignored (−inf for n = 0 or when every element is NaN).
float MaxValue(const float* x, int64_t n);

}  // namespace witcert
