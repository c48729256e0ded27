// The metered chunked-prefill kernel for keys that are one exact 16-bit float per channel: fp16,
// bf16, fp8-e4m3 raw and fp8-e4m3 scaled (a code times a per-token scale). Contract in
// metered_prefill_cuda.h; the CTA shape, the tile ring, the online softmax and the certificate
// sums are the int8-rtn kernel's (metered_prefill_int8.cu), the key arithmetic is the tensor-core
// decode kernel's (metered_decode_pipelined.cuh, kTc), with the operands' roles swapped: here the
// A operand holds 16 query vectors, the B operand 8 tokens' keys.
//
// Structure (why):
//  * CTA = 4 warps, 64 query vectors of one KV head: vector v ↔ (row v / G, head v % G). Each
//    32-token KV tile (codes, scales, witnesses) is loaded once per CTA by cp.async into a
//    3-stage ring and used by all 64 vectors. fp8 tiles are converted to fp16 in shared memory
//    once per tile (every e4m3 value is an fp16 one, exactly); 16-bit tiles are read as stored.
//    Key rows keep their 16-byte chunks XOR-swizzled by token % 8, so the B-fragment loads of a
//    warp (8 tokens × 4 words) hit 32 distinct banks.
//  * q·k: each vector as x = q·2^s (s puts max|x_c| below 2^14) split into two digits of the key
//    format, hi + lo (f16_digits.cuh), the A fragments of fp16 / bf16 MMAs with fp32 accumulation.
//    Per digit, two chains of 4 k-steps (even and odd), summed as ((ca_hi + cb_hi) + (ca_lo +
//    cb_lo)), times the token's K scale (scaled fp8), times the vector's unscale fl(2^-s·fl(1/√d)):
//    the arithmetic tc_logit_eta.cuh's model bounds. With the meter on:
//    a chain of 8 MMAs over a third digit, fl↑(|hi| + |lo|) rounded up to the key format (≥ |hi| +
//    |lo|), against the keys (codes) with their sign bits cleared, gives T̂_t with T_t ≤ T̂_t·(1 +
//    8.02μ + 2u) + 8ν for T_t = Σ_c (|hi_c| + |lo_c|)·|k_c|: the model's T̂ (there the two digits
//    are two columns of one chain; here one digit bounds both, its round-up only loosening T̂ by
//    ≤ 2^-10). The vector's η is TcLogitEtaOf(max T̂_t over the tokens it sees, unscale); scaled
//    fp8: TcLogitEtaScaledOf(max_t fl(T̂_t·s_t), the largest K scale the CTA read, unscale). (The
//    decode kernel bounds scaled fp8's T_t by 448·Σ_c (|hi_c| + |lo_c|) instead, which saves the
//    chain; on the prefill test's adversarial rows it gave bounds up to 112x the CPU's, the
//    per-token form 3.5x. Here the chain is shared by 64 vectors.)
//    A non-finite query makes its certificate vacuous.
//  * Softmax, certificate terms and p·v: as the int8 kernel (its file comment has the rescale
//    argument), tokens in natural order: C element (row, 2·tig + e) of n-tile nt is token
//    8·nt + 2·tig + e, so two n-tiles' C fragments are one PV A fragment, and the V tile is
//    transposed in natural token order. p·v is output only: the weights times the token's V scale
//    (scaled fp8; else 1) rounded to fp16, the values as fp16 (bf16 values rounded to fp16:
//    output-only, ≤ 2^-11 relative; a value beyond fp16's range would make the output infinite).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/metered_prefill_launch.h"
#include "kernels/cuda/metered_prefill_rows.cuh"
#include "kernels/cuda/ops/mma_f16.cuh"
#include "kernels/cuda/tc_logit_eta.cuh"

namespace witcert {
namespace {

using cuda_kv::Bf16Bits;
using cuda_copy::CpAsync16;
using cuda_copy::CpAsyncCommit;
using cuda_copy::CpAsyncWait;
using prefill::HalfBitsToFloat;
using prefill::kBands;
using prefill::kD;
using prefill::kRing;
using prefill::kThreads;
using prefill::kTile;
using prefill::kVecs;
using prefill::kVPitch;
using prefill::Params;

// The key formats: bytes per stored channel, the MMA / digit format, whether codes are fp8 and
// whether each vector has a bf16 scale.
template <int CODE_BYTES, bool BF16, bool SCALED>
struct KeyFormat {
  static constexpr int kCodeBytes = CODE_BYTES;
  static constexpr bool kBf16 = BF16, kFp8 = CODE_BYTES == 1, kScaled = SCALED;
  static constexpr int kChunks = kD * CODE_BYTES / 16;  // 16-byte chunks per stored vector
};
using Fp16Keys = KeyFormat<2, false, false>;
using Bf16Keys = KeyFormat<2, true, false>;
using Fp8RawKeys = KeyFormat<1, false, false>;
using Fp8ScaledKeys = KeyFormat<1, false, true>;

template <class F>
struct Stage {
  uint8_t kc[kTile][kD * F::kCodeBytes];  // 16-bit: chunk c of token t at chunk c ^ (t & 7); fp8: as stored
  uint8_t vc[kTile][kD * F::kCodeBytes];  // as stored
  uint16_t ks[kTile], vs[kTile];          // bf16 scales (scaled fp8)
  alignas(16) uint8_t kw[kTile][kBands];  // K band codes c_b
  alignas(16) uint16_t ku[kTile];         // K band units U, bf16
  alignas(16) uint32_t vsum[kTile];       // V summaries: bf16 ρ (low half), ν (high half)
};

template <class F, bool METER>
struct Smem {
  Stage<F> ring[kRing];
  uint16_t k16[F::kFp8 ? kTile : 1][kD];  // fp8: the K tile as fp16, chunks swizzled as kc's
  __half vt[kD][kVPitch];                 // V of the current tile as fp16, [channel, token]
  // With the meter the query's lo and fl↑(|hi| + |lo|) digits live here, not in registers
  // (QueryRows with SMEM_DIGITS): [warp][digit − 1][k-step][lane].
  uint4 qdig[METER ? prefill::kWarps : 1][2][8][32];
};

// The 16-bit key rows of a tile (swizzled), as 32-bit words [token][64].
template <class F, bool METER>
__device__ __forceinline__ const uint32_t* KeyWords(const Smem<F, METER>& sm, const Stage<F>& st) {
  if constexpr (F::kFp8) {
    return reinterpret_cast<const uint32_t*>(&sm.k16[0][0]);
  } else {
    return reinterpret_cast<const uint32_t*>(&st.kc[0][0]);
  }
}

template <class F, bool METER>
__global__ void __launch_bounds__(kThreads, 2) MeteredPrefillFloatKernel(const Params P) {
  constexpr bool BF16 = F::kBf16;
  constexpr bool kChain = METER;  // η from the T̂ chain
  extern __shared__ __align__(16) uint8_t dsm[];
  Smem<F, METER>& sm = *reinterpret_cast<Smem<F, METER>*>(dsm);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int64_t v0 = static_cast<int64_t>(blockIdx.x) * kVecs;  // first vector of the CTA
  const float inv_sqrt_d = 1.0f / sqrtf(static_cast<float>(kD));

  prefill::QueryRows<BF16, kChain, METER, METER> rows;
  rows.Load(P, v0, warp, gid, tig, inv_sqrt_d, &sm.qdig[METER ? warp : 0][0][0][0]);
  const int64_t(&ctx)[2] = rows.ctx;
  const prefill::CtaSpan span(P, v0, ctx);
  const int64_t cta_end = span.end, warp_end = span.warp_end;
  const int num_tiles = span.num_tiles;

  // ---- the tile loader: thread (token tid / 4, part tid % 4)
  const int ld_t = tid >> 2, ld_p = tid & 3;
  constexpr int kCB = kD * F::kCodeBytes;  // code bytes per vector
  constexpr int kPartChunks = F::kChunks / 4;
  auto issue = [&](int k) {
    if (k < num_tiles) {
      Stage<F>& st = sm.ring[k % kRing];
      int64_t vec;
      const bool ok = prefill::TileTokenVector(P, k, ld_t, cta_end, &vec);
#pragma unroll
      for (int c = kPartChunks * ld_p; c < kPartChunks * (ld_p + 1); ++c) {
        const int kpos = F::kFp8 ? c : c ^ (ld_t & 7);
        CpAsync16(&st.kc[ld_t][kpos << 4], P.kv.k_codes + vec * kCB + c * 16, ok);
        CpAsync16(&st.vc[ld_t][c << 4], P.kv.v_codes + vec * kCB + c * 16, ok);
      }
      if constexpr (F::kScaled) prefill::IssueScales(st.ks, st.vs, P.kv, vec, ld_t, ld_p, ok);
      if constexpr (METER) prefill::IssueWitnesses(st.kw, st.ku, st.vsum, P.kv, vec, ld_t, ld_p, ok);
    }
    CpAsyncCommit();
  };
#pragma unroll
  for (int k = 0; k < kRing - 1; ++k) issue(k);

  prefill::RowSums<METER> acc;
  acc.Init();
  float that[2] = {0.0f, 0.0f}, smaxk = 0.0f;  // max T̂_t (·s_t) per row; scaled fp8: max K scale
  prefill::RowEpsDigits eps_digits;  // Tier A's band factors as digits (meter)
  if constexpr (METER) eps_digits.From(rows.qbn, inv_sqrt_d, tig);

  for (int k = 0; k < num_tiles; ++k) {
    CpAsyncWait<kRing - 2>();
    __syncthreads();
    issue(k + kRing - 1);
    const Stage<F>& st = sm.ring[k % kRing];
    const int64_t base = static_cast<int64_t>(k) * kTile;
    // (a) V tile → fp16 [channel, token]; fp8 K tile → fp16, swizzled.
    {
      const int t = tid & 31, cb = tid >> 5;  // token, 32-channel block
      if constexpr (F::kFp8) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint4 x = *reinterpret_cast<const uint4*>(&st.vc[t][cb * 32 + h * 16]);
          const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const uint32_t lo = mma::E4m3PairLoToF16x2(w[i]), hi = mma::E4m3PairHiToF16x2(w[i]);
            const int c = cb * 32 + h * 16 + 4 * i;
            sm.vt[c + 0][t] = __ushort_as_half(static_cast<unsigned short>(lo & 0xffffu));
            sm.vt[c + 1][t] = __ushort_as_half(static_cast<unsigned short>(lo >> 16));
            sm.vt[c + 2][t] = __ushort_as_half(static_cast<unsigned short>(hi & 0xffffu));
            sm.vt[c + 3][t] = __ushort_as_half(static_cast<unsigned short>(hi >> 16));
          }
        }
        // K: token tid / 4, code chunks 2·(tid % 4) + {0, 1} → fp16 chunks 4·(tid % 4) + [0, 4).
        const int kt = tid >> 2, kp = tid & 3;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint4 x = *reinterpret_cast<const uint4*>(&st.kc[kt][(2 * kp + h) * 16]);
          const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
          for (int j = 0; j < 2; ++j) {  // fp16 chunk 4kp + 2h + j: code words 2j, 2j + 1
            const uint4 y = make_uint4(mma::E4m3PairLoToF16x2(w[2 * j]), mma::E4m3PairHiToF16x2(w[2 * j]),
                                       mma::E4m3PairLoToF16x2(w[2 * j + 1]), mma::E4m3PairHiToF16x2(w[2 * j + 1]));
            const int chunk = (4 * kp + 2 * h + j) ^ (kt & 7);
            *reinterpret_cast<uint4*>(&sm.k16[kt][chunk * 8]) = y;
          }
        }
      } else {
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          const uint4 x = *reinterpret_cast<const uint4*>(&st.vc[t][(cb * 32 + h * 8) * 2]);
          const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const uint32_t bits = (w[i >> 1] >> (16 * (i & 1))) & 0xffffu;
            sm.vt[cb * 32 + h * 8 + i][t] =
                BF16 ? __float2half_rn(HalfBitsToFloat<true>(bits)) : __ushort_as_half(static_cast<unsigned short>(bits));
          }
        }
      }
    }
    __syncthreads();
    if (base >= warp_end) continue;  // every row of this warp ends before the tile

    // (b) logits: 4 n-tiles of 8 tokens; c0,c1 row gid, c2,c3 row gid+8, tokens 8·nt + 2·tig + {0, 1}.
    const uint32_t* kw32 = KeyWords(sm, st);
    float lg[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int brow = nt * 8 + gid, sw = brow & 7;
      float ca[2][4] = {}, cb[2][4] = {}, ct[4] = {};
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) {
        const uint32_t b0 = kw32[brow * 64 + (((2 * ks) ^ sw) << 2) + tig];
        const uint32_t b1 = kw32[brow * 64 + (((2 * ks + 1) ^ sw) << 2) + tig];
#pragma unroll
        for (int dg = 0; dg < 2; ++dg) {
          uint32_t qf[4];
          rows.Frag(dg, ks, qf);
          if (ks & 1) {
            mma::Mma16F32<BF16>(cb[dg], qf, b0, b1);
          } else {
            mma::Mma16F32<BF16>(ca[dg], qf, b0, b1);
          }
        }
        if constexpr (kChain) {
          uint32_t qf[4];
          rows.Frag(2, ks, qf);
          mma::Mma16F32<BF16>(ct, qf, b0 & 0x7fff7fffu, b1 & 0x7fff7fffu);
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, tok = nt * 8 + 2 * tig + (e & 1);
        float sum = (ca[0][e] + cb[0][e]) + (ca[1][e] + cb[1][e]);
        if constexpr (F::kScaled) sum *= Bf16Bits(st.ks[tok]);
        const bool seen = base + tok < ctx[r];
        lg[nt][e] = seen ? sum * rows.unscale[r] : -INFINITY;
        if constexpr (kChain) {  // scaled fp8: fl(T̂_t·s_t)
          if (seen) that[r] = meter::MaxAcc(that[r], F::kScaled ? ct[e] * Bf16Bits(st.ks[tok]) : ct[e]);
        }
      }
    }
    if constexpr (METER && F::kScaled) {  // η's key-scale max, over the CTA's real tokens
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int tok = nt * 8 + 2 * tig + h;
          if (base + tok < cta_end) smaxk = meter::MaxAcc(smaxk, Bf16Bits(st.ks[tok]));
        }
      }
    }
    // (c)–(e): online softmax, certificate terms, o += P·V.
    acc.AddTile(lg, eps_digits, st.kw, sm.vt, gid, tig, [&](int tok) {
      prefill::TokenTerms tt;
      tt.rho = tt.nu = 0.0f;
      if constexpr (METER) {
        tt.kunit = Bf16Bits(st.ku[tok]);
        tt.rho = cuda_kv::SummaryRho(st.vsum[tok]);
        tt.nu = cuda_kv::SummaryNu(st.vsum[tok]);
      }
      tt.sv = F::kScaled ? Bf16Bits(st.vs[tok]) : 1.0f;
      return tt;
    });
  }
  CpAsyncWait<0>();

  // ---- η per row (the quad's T̂ maxima), then the output and the certificate
  float eta[2] = {0.0f, 0.0f};
  smaxk = meter::MaxAcc(smaxk, __shfl_xor_sync(0xffffffffu, smaxk, 1));
  smaxk = meter::MaxAcc(smaxk, __shfl_xor_sync(0xffffffffu, smaxk, 2));
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    that[r] = meter::MaxAcc(that[r], __shfl_xor_sync(0xffffffffu, that[r], 1));
    that[r] = meter::MaxAcc(that[r], __shfl_xor_sync(0xffffffffu, that[r], 2));
    if constexpr (METER) {
      eta[r] = F::kScaled ? cuda_kv::TcLogitEtaScaledOf<false>(that[r], smaxk, rows.unscale[r])
                          : cuda_kv::TcLogitEtaOf<BF16>(that[r], rows.unscale[r]);
    }
  }
  acc.Finish(P, rows, v0, warp, lane, eta);
}

template <class F>
CudaStatus Launch(const Params& p, dim3 grid, cudaStream_t stream) {
  const size_t smem = p.a.meter ? sizeof(Smem<F, true>) : sizeof(Smem<F, false>);
  auto kernel = p.a.meter ? MeteredPrefillFloatKernel<F, true> : MeteredPrefillFloatKernel<F, false>;
  return prefill::LaunchWithSmem(kernel, smem, grid, stream, p);
}

}  // namespace

CudaStatus prefill::LaunchFloat(const Params& p, dim3 grid, cudaStream_t stream) {
  switch (p.layout.scheme) {
    case KvScheme::kFp16: return Launch<Fp16Keys>(p, grid, stream);
    case KvScheme::kBf16: return Launch<Bf16Keys>(p, grid, stream);
    case KvScheme::kFp8Raw: return Launch<Fp8RawKeys>(p, grid, stream);
    case KvScheme::kFp8Scaled: return Launch<Fp8ScaledKeys>(p, grid, stream);
    default: return CudaStatus::Error("MeteredPrefillCuda: no float-key kernel for this scheme");
  }
}

}  // namespace witcert
