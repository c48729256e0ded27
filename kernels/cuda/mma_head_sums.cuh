// The tensor-core kernels' per-thread certificate sums of one query head (the decode kernel,
// metered_decode_int8_mma.cuh, and the chunked prefill, metered_prefill_int8.cu): the
// per-token arithmetic of the CPU's PartialAddTokenWeighted, its branch-free common case, and the
// warp reductions.
#pragma once

#include <cstdint>

#include "kernels/meter/cert_math.h"
#include "kernels/meter/partial_sum.h"

namespace witcert::cuda_kv {

// One head's certificate sums over a thread's tokens: CertPartial's z, b, c, eps_max and bad
// (the split max m is common), with PartialAddTokenWeighted's arithmetic (its A−1 term is
// partial_sum.h's WeightedEpsTerm, with the five-fma expm1 bound), but no per-token η / vmax
// fields (η is per split here; vmax is kept per thread) and no token count: every token of the
// split counts for every head (ToPartial). A token with a non-finite logit, which
// PartialAddTokenWeighted leaves out of the count, sets `bad`, which makes the certificate
// vacuous whatever the count says; elsewhere the count only sizes the summation chain's γ.
struct MmaHeadSums {
  float z = 0.0f, b = 0.0f, c = 0.0f, eps_max = 0.0f;
  bool bad = false;
  __device__ __forceinline__ void Add(float logit, float w, float m, float eps_hat, float rho) {
    if (!(fabsf(logit) <= 3.0e38f)) { bad = true; return; }
    z += w;
    if (eps_hat > 0.0f) b += meter::WeightedEpsTerm<meter::Expm1Form::kUpperSmall>(logit, m, w, eps_hat);
    if (rho > 0.0f) c = fmaf(w, rho, c);  // one rounding (AddCommonPowers' and AddMid's too)
    eps_max = meter::MaxAcc(eps_max, eps_hat);
    if (!(eps_hat == eps_hat)) eps_max = INFINITY;
  }
  // Add's arithmetic for a token where meter::WeightedTokenIsCommon holds, or nothing where !active,
  // without branches: a skipped term is selected to +0 instead, and x + 0 = x for the non-negative
  // sums. The A−1 term goes to the thread's power sums `ps` (meter::EpsPowerSums), whose Bound() the
  // caller adds to b once, before any reduction (FoldPowerSums). (An inactive token's ε̂ and ρ may be
  // garbage, inf or NaN: they are selected away before any product, so no 0·inf can reach the sums.)
  __device__ __forceinline__ void AddCommonPowers(bool active, float w, float eps_hat, float rho,
                                                  meter::EpsPowerSums* ps) {
    AddSelected(active, w, eps_hat, rho, [&](float wz, float ez) { ps->Add(wz, ez); });
  }
  // The same for a token where meter::WeightedTokenIsMidAtGap holds, its A−1 term rounded alone as
  // WeightedEpsTerm forms it (ε̂ = 0 gives Expm1Mid(0) = 0 exactly).
  __device__ __forceinline__ void AddMid(bool active, float w, float eps_hat, float rho) {
    AddSelected(active, w, eps_hat, rho, [&](float wz, float ez) { b += __fmul_rn(wz, meter::Expm1Mid(ez)); });
  }
  // The branch-free adds' shared part: the token's (w, ε̂, ρ), or zeros where !active, into z, c
  // and the ε̂ max, and (w, ε̂) as selected to the caller's A−1 term, a_minus_1(w, ε̂).
  template <class AMinus1>
  __device__ __forceinline__ void AddSelected(bool active, float w, float eps_hat, float rho, AMinus1&& a_minus_1) {
    const float wz = active ? w : 0.0f;
    const float ez = active ? eps_hat : 0.0f;
    const float rz = active && rho > 0.0f ? rho : 0.0f;
    z += wz;
    a_minus_1(wz, ez);
    c = fmaf(wz, rz, c);
    eps_max = active ? meter::MaxAcc(eps_max, eps_hat) : eps_max;
  }
  __device__ __forceinline__ void FoldPowerSums(const meter::EpsPowerSums& ps) { b += ps.Bound(); }
  // += the sums of lane (lane ^ o): a re-association of non-negative sums (SumPartialsSameMax).
  // Without the meter only z is summed (b, c and eps_max stay 0). `bad` goes by ballot (BadOf).
  template <bool METER>
  __device__ __forceinline__ void AddShfl(int o) {
    const unsigned f = 0xffffffffu;
    z += __shfl_xor_sync(f, z, o);
    if constexpr (METER) {
      b += __shfl_xor_sync(f, b, o);
      c += __shfl_xor_sync(f, c, o);
      eps_max = fmaxf(eps_max, __shfl_xor_sync(f, eps_max, o));
    }
  }
  // Whether any lane in `lanes` (a mask) has `bad` set; every lane of the warp calls.
  __device__ __forceinline__ static bool BadOf(bool bad_here, unsigned lanes) {
    return (__ballot_sync(0xffffffffu, bad_here) & lanes) != 0;
  }
  // The split's partial over `count` tokens (CertPartial's count and chain).
  __device__ __forceinline__ meter::CertPartial ToPartial(float m, int32_t count) const {
    meter::CertPartial r;
    if (count == 0 && !bad) return r;  // empty
    r.m = m;
    r.z = z;
    r.b = b;
    r.c = c;
    r.eps_max = eps_max;
    r.count = count;
    r.chain = count;
    r.bad = bad;
    return r;
  }
};

}  // namespace witcert::cuda_kv
