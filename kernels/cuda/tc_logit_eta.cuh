// η for logits computed on tensor cores: the rounding bound of the pipelined kernel's fp16 / bf16
// K pass with the meter on (metered_decode_pipelined.cuh, d = 128), and the model of the tensor
// cores' arithmetic it rests on. Host-callable (tests/kernels/cuda/mma_rounding_model_test.cc).
//
// The model. One mma.m16n8k16 with fp16 or bf16 inputs and an fp32 accumulator returns, per
// element of D,
//     |D − (C + Σ_k a_k·b_k)| ≤ μ·(|C| + Σ_k |a_k·b_k|) + ν,     μ = 2^-16, ν = 2^-120.
// PTX does not specify the order or rounding of that sum, so this is an assumption, stated:
// published measurements of NVIDIA tensor cores (products exact, the terms aligned to the
// largest exponent and truncated to ≥ 24 significant bits, one normalisation) give at most
// 17·2^-23 ≈ 2^-18.9 of the absolute sum, ~7× inside μ. kernels_cuda_mma_rounding_model_test
// checks the model on the device on adversarial operands (cancellation, one term dominating,
// the full exponent range, subnormals) and prints the largest error it saw in units of μ, so
// the margin is measured where the kernel runs (bench/RESULTS.md). On the CPU,
// kernels_cuda_tc_logit_eta_test emulates such an accumulator (exact products, alignment to the
// largest exponent, truncation): with 23 bits its worst case stays 5× inside μ, with 20 bits it
// breaks the model. ν covers products or sums
// below fp32's normal range flushed to zero (bf16 only: fp16 products are ≥ 2^-48).
//
// The kernel's logit of one head and token: x = q·2^s (s a power of two, max|x_c| < 2^14) is
// split into two digits x_c ≈ hi_c + lo_c (f16_digits.cuh); the MMA forms Σ hi_c·k_c and
// Σ lo_c·k_c over d = 128 channels in two chains of 4 k-steps each (columns of one MMA), and
// ℓ̂ = ((ca_hi + cb_hi) + (ca_lo + cb_lo))·fl(2^-s·fl(1/√d)). A second chain of 8 MMAs of the
// same keys and digits with their sign bits cleared gives T̂ ≈ T = Σ_c (|hi_c| + |lo_c|)·|k_c|.
// Then |ℓ̂ − q·k/√d| ≤ η = (c_rel·T̂ + c_abs)·fl(2^-s·fl(1/√d))·(1 + 2^-20), because:
//  * a chain of 4 MMAs errs by ≤ 4.01·μ·T_chain + 4ν (the j-th accumulator is ≤ (1+μ)^j times
//    the terms before it);
//  * the three fp32 additions and the product with the unscale: ≤ 4u·(1 + 5μ)·T; the
//    unscale's own error (2^-s is exact; 1/√d is two roundings): ≤ 3u more;
//  * the digit split: |x_c − hi_c − lo_c| ≤ ρ·|x_c| + α (fp16: ρ = 2^-22, α = 2^-25 where lo
//    is subnormal; bf16: ρ = 2^-16, α = 2^-134), with |k_c| ≤ K (a finite key: fp16 65504,
//    bf16 < 2^128; a non-finite one makes the logit non-finite and the cell vacuous), so
//    Σ_c |x_c − hi_c − lo_c|·|k_c| ≤ ρ(1 + 2ρ)·T + d·α·K;
//  * T̂ is a chain of 8 MMAs of non-negative terms: T ≤ T̂·(1 + 8.02μ + 2u) + 8ν;
// so c_rel ≥ (4.01μ + 8u + ρ(1 + 2ρ))·(1 + 8.02μ + 2u)·(1 + 4u): fp16 6.19e-5, bf16 7.69e-5
// (taken as 6.25e-5 and 7.75e-5), and c_abs ≥ d·α·K + 24ν: fp16 0.24994, bf16 2.0 (taken as
// 0.25 and 2.01). The final (1 + 2^-20) covers η's own three roundings. T̂ is summed over the
// same tensor cores at no cost to the issue slots the kernel is bound by (the A operand's sign
// bits cleared: four LOP3s a k-step).
#pragma once

#include <cmath>

#include <cuda_runtime.h>

namespace witcert::cuda_kv {

// The model's constants (above).
constexpr double kTcMu = 1.0 / 65536.0;                      // 2^-16
constexpr double kTcNu = 7.52316384526264e-37;               // 2^-120

template <bool BF16>
struct TcLogitEta {
  static constexpr float kRel = 6.25e-5f;
  static constexpr float kAbs = 0.25f;
};
template <>
struct TcLogitEta<true> {
  static constexpr float kRel = 7.75e-5f;
  static constexpr float kAbs = 2.01f;
};

// η of a head's logits given the largest T̂ over its tokens and the head's unscale
// fl(2^-s·fl(1/√d)) (both ≥ 0). inf and NaN pass through (a vacuous η, never a small one).
template <bool BF16>
__host__ __device__ __forceinline__ float TcLogitEtaOf(float t_hat_max, float unscale) {
  return fmaf(TcLogitEta<BF16>::kRel, t_hat_max, TcLogitEta<BF16>::kAbs) * unscale * (1.0f + 0x1p-20f);
}

// fp8-e4m3 keys with a per-token scale s_t (the same K pass, the codes converted to fp16 exactly,
// each token's sum multiplied by s_t before the unscale: ℓ̂ = fl(fl(Σ·s_t)·unscale)). That product
// is one more rounding, ≤ u of |ℓ̂|, inside c_rel's margin (6.19e-5 + 6e-8 < 6.25e-5); fp8 codes
// are ≤ 448 in magnitude, well inside c_abs's K. Per token the error is then ≤ (c_rel·T̂_t +
// c_abs)·s_t·unscale, and over the split ≤ (c_rel·max_t fl(T̂_t·s_t) + c_abs·max_t s_t)·unscale,
// with the (1 + 2^-19) covering the products' own five roundings (≤ 5u < 2^-21.6).
template <bool BF16>
__host__ __device__ __forceinline__ float TcLogitEtaScaledOf(float t_hat_scaled_max, float scale_max, float unscale) {
  return fmaf(TcLogitEta<BF16>::kRel, t_hat_scaled_max, TcLogitEta<BF16>::kAbs * scale_max) * unscale *
         (1.0f + 0x1p-19f);
}

// Scaled fp8 without the T̂ chain: e4m3 codes are at most 448 in magnitude, so a token's
// T_t = Σ_c (|hi_c| + |lo_c|)·|code_c| ≤ 448·X₁, X₁ = Σ_c (|hi_c| + |lo_c|) over the head's digits,
// and over the split max_t T_t·s_t ≤ 448·X₁·max_t s_t. `digit_l1` is X₁ summed in fp32 (at most
// 40 additions of non-negative terms: ≥ X₁·(1 − 40u)); the (1 + 2^-16) covers that and the two
// products' roundings (43u < 2^-16). T_t is now bounded exactly, not estimated by a chain of
// MMAs, so c_rel's chain factor is margin.
__host__ __device__ __forceinline__ float TcLogitEtaFp8CodeBoundOf(float digit_l1, float scale_max, float unscale) {
  return TcLogitEtaScaledOf<false>(448.0f * digit_l1 * scale_max * (1.0f + 0x1p-16f), scale_max, unscale);
}

// kivi2 keys at d = 128 (the pipelined kernel's kTcK2, pipe_tc_kivi2_keys.cuh): k̃_c = fl(z_c +
// s_c·m_c), fp16 (z_c, s_c) per channel over a paged block and 2-bit codes m_c = b0_c + 2·b1_c,
// never decoded. Against the query's fp16 digits (d_c = hi_c + lo_c, as above) each k-step runs
//  * the code planes, rows gid = s_c·b0_c and gid + 8 = s_c·b1_c (both exact in fp16: s_c or 0),
//  * the zeros, rows gid = z_c (gid + 8 empty),
// the planes into two chains of 4 MMAs (ca: even k-steps, cb: odd), rows gid P0 = Σ d_c·s_c·b0_c and
// rows gid + 8 P1 = Σ d_c·s_c·b1_c, the zeros into a chain of 8 (cz), rows gid Pz = Σ d_c·z_c. The
// token's sum is Kivi2TcDot(ca, cb, cz) = (P0 + Pz) + 2·P1 in fp32 (ten terms, nine roundings), then
// times the unscale. Against Σ_c x_c·k̃_c (x = q·2^s), with W = Σ_c (|hi_c| + |lo_c|)·(|z_c| + 3|s_c|):
//  * the MMAs: ≤ 4.01μ·(T_P0 + 2·T_P1) + 8.02μ·T_z + 32ν ≤ 8.02μ·W + 32ν (b0 + 2·b1 = m ≤ 3);
//  * the nine additions, the unscale's product and its own error: ≤ 13u·(1 + 8.02μ)·W;
//  * the digit split (|x_c − d_c| ≤ ρ|x_c| + α) over |z_c + s_c·m_c| ≤ |z_c| + 3|s_c| ≤ 4·65504:
//    ≤ ρ(1 + 2ρ)·W + d·α·4·65504·(1 + 2ρ);
//  * the stored key's own rounding, which the planes do not repeat (z_c + s_c·m_c is a multiple of
//    2^-24 below 2^19, so fl() errs relatively, never subnormal): ≤ u·(1 + 2ρ)·(W + d·α·4·65504).
// W itself is bounded, not estimated: with Z(c), S(c) the largest |z|, |s| of channels c and c ^ 2
// over the blocks read, W ≤ Σ_c (|hi_c| + |lo_c|)·(Z(c) + 3·S(c)), and the kernel's
// fp32 sum of that (Kivi2TcBoundSum: non-negative terms, ≤ 36 roundings) is ≥ it times (1 − 36u),
// so Ŵ = sum·(1 + 2^-16) ≥ W. Then η = (c_rel·Ŵ + c_abs)·unscale·(1 + 2^-19), c_rel ≥ (8.0007μ +
// 14u + ρ(1 + 2ρ))·(1 + 2u) = 1.2315e-4 (taken as 1.25e-4, as when an MMA chain estimated W and
// its factor (1 + 8.02μ + 3u) entered too), c_abs ≥ 128·2^-25·262016·(1 + 2^-20) + 48ν = 0.99951
// (taken as 1.0); the (1 + 2^-19) covers η's own four roundings. kernels_cuda_tc_logit_eta_test
// re-derives the constants and replays the arithmetic.
struct TcLogitEtaKivi2 {
  static constexpr float kRel = 1.25e-4f;
  static constexpr float kAbs = 1.0f;
};

// (P0 + Pz) + 2·P1 from the lane's accumulators (elements 0, 1: row gid's hi and lo digit columns;
// 2, 3: row gid + 8's): the planes' chains ca, cb and the zeros' cz (rows gid only).
__host__ __device__ __forceinline__ float Kivi2TcDot(const float (&ca)[4], const float (&cb)[4],
                                                     const float (&cz)[4]) {
  const float p0 = (ca[0] + cb[0]) + (ca[1] + cb[1]);
  const float pz = cz[0] + cz[1];
  const float p1 = (ca[2] + cb[2]) + (ca[3] + cb[3]);
  return fmaf(2.0f, p1, p0 + pz);
}

// η of the coded rows' logits for one head from the fp32 bound sum `w_sum` (Kivi2TcBoundSum) and the
// head's unscale fl(2^-s·fl(1/√d)). inf and NaN pass through.
__host__ __device__ __forceinline__ float TcLogitEtaKivi2Of(float w_sum, float unscale) {
  return fmaf(TcLogitEtaKivi2::kRel, w_sum * (1.0f + 0x1p-16f), TcLogitEtaKivi2::kAbs) * unscale * (1.0f + 0x1p-19f);
}

}  // namespace witcert::cuda_kv
