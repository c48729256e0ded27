// The pipelined fused metered split-KV decode kernel (the default; metered_decode_kernel.cuh
// keeps the first, two-phase kernel for comparison and as the fallback).
//
// Why this shape: the first kernel was bound by latency, not bandwidth: its loads were issued
// only in bursts between three __syncthreads phases per tile, so most of the time no bytes
// were in flight. Here every byte the CTA reads goes through a ring of S shared-memory
// stages of 64 tokens filled with cp.async (16-byte, L1-bypassing), S−1 stages ahead of the
// compute: loads stay in flight across every phase, the K pass, the split-max reduction,
// the weights/meter step and the V pass alike (one global stage sequence: K stages, then
// V stages, so the first V stages load while the split max is being reduced).
//  * Stages are aligned to absolute token positions (multiples of 64), so each 8-token
//    group lies in one block (block_size ≥ 8) and its codes, scales, key band witnesses and
//    value summaries are contiguous aligned runs; tokens outside [begin, end) are masked
//    (edge stages).
//  * The split's block-table slice is staged in shared memory once: address math never
//    waits on a global load.
//  * K pass: lane = 8 channels of one token (LPT = D/8 lanes per token, as before); the G
//    dot products are combined by a reduce-scatter butterfly (each round halves the values
//    a lane carries), so a token costs log2(LPT)+G−1 shuffles instead of G·log2(LPT), and
//    each of G lanes ends with one head's logit.
//  * V stage (pipe_weights_step.cuh): one thread per (query head, token) computes w = e^{ℓ̂−m}
//    once (it feeds both the output and, with the tensor-core int8 kernel's sums,
//    mma_head_sums.cuh, the certificate), ε̂ from the staged K band witness (codes and unit) /
//    K scale, and ρ and the vmax candidate ν ≥ ‖ṽ‖ + ρ from the staged value summary
//    (kernels/meter/witness_format.h): no per-token ‖ṽ‖. After one
//    barrier the V lanes accumulate Σ w ṽ (and, for the exact scheme alone, which has no
//    summary, max ‖ṽ‖ by the wide-range norm). With ≥ 4 ring stages the weights run a stage
//    ahead: stage k + 1's weights and stage k's values share one barrier (kWeightsAhead). The
//    certificate math is the two-pass split of the first kernel, unchanged: the split max is
//    known before any term is summed.
//  * fp16, bf16 and fp8-e4m3 at d = 128 (kTc; fp8 converted to fp16 exactly as the fragments are
//    built, its lane mapping below at kTc8): the V pass runs on tensor cores (ops/mma_f16.cuh, the
//    digit splits in f16_digits.cuh): each warp owns 16 output channels, A = the stage's values
//    transposed by ldmatrix.trans, B = the weights as two digits of the same format per head,
//    fp32 accumulators summed per stage; the stage's code rows are stored with their 16-byte
//    chunks XOR-swizzled by token % 8 so that the K pass's row reads and the 8×8 loads are free
//    of bank conflicts. The K pass runs there too (the query as two digits under a
//    power-of-two scale). With the meter on, a third chain of MMAs over the same keys and digits
//    with their sign bits cleared bounds each token's Σ|q_c k_c| (scaled fp8: the codes' range,
//    |code| ≤ 448, bounds it instead, with no chain), and η follows from a stated
//    model of the tensor cores' fp32 accumulation (tc_logit_eta.cuh, checked on the device by
//    kernels_cuda_mma_rounding_model_test). No other certificate term passes through them.
//  * kivi2 at d = 128 (kTcV2, kTcK2): both passes on tensor cores. V: its codes exact fp16 subnormals,
//    the weights' digits w·s_t·2^-k, Σ w·z_t per head beside them. K: the codes' bit planes times
//    the block's scales as exact fp16 rows, the zeros beside them, η from the channels' largest
//    |z|, |s| over the blocks read (pipe_tc_kivi2_keys.cuh).
//  * Tier A's ε with B = 8 is computed as the tensor-core kernel does it (tier_a_digits.cuh):
//    the band factors as 16-bit digits rounded up, four dp2a against the token's band codes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/f16_digits.cuh"
#include "kernels/cuda/ops/mma_f16.cuh"
#include "kernels/cuda/pipe_exact_rows.cuh"
#include "kernels/cuda/pipe_stage.cuh"
#include "kernels/cuda/pipe_stage_loader.cuh"
#include "kernels/cuda/pipe_tc_kivi2_keys.cuh"
#include "kernels/cuda/pipe_tc_query.cuh"
#include "kernels/cuda/pipe_tc_value_codes.cuh"
#include "kernels/cuda/pipe_weights_step.cuh"
#include "kernels/cuda/tc_logit_eta.cuh"
#include "kernels/cuda/tier_a_digits.cuh"

namespace witcert::cuda_kv {

template <int GMAX, bool TCV, bool WT32>
struct PipeSmem {
  // Two buffers [V stage index % 2]: the weights step fills one stage's while the value pass
  // reads the previous stage's.
  float wt[2][WT32 ? GMAX : 1][kStageTokens];  // weights of a V stage (CUDA-core values; kivi2: exact rows')
  // TCV: the weights' fp16 / bf16 digits [head·2 + digit, token] (DigitFormat), rows padded to 72
  // halves (36 words) so the B-fragment loads of one warp hit 32 distinct banks.
  uint16_t wt16[2][TCV ? 2 * GMAX : 1][TCV ? kStageTokens + 8 : 2];
  float m[GMAX];
  float eta[GMAX];
  float red[kWarps][GMAX];
  float red_eta[kWarps][GMAX];  // the meter's η per warp, reduced beside red
  float vmax[kWarps];
  float qbn[GMAX][64];            // query band norms ‖q_b‖
  double q1[GMAX][64];            // per-band Σ|q_c| (Tier B ‖q‖₁)
  uint32_t qbn16[GMAX][4];        // B = 8: Tier A's band factors as 16-bit digits [head, band pair]
  float qbn_scale[GMAX];          // and their unit per head (BandFactorDigits)
  float tierb[GMAX];
  float vsmax[kWarps];            // fp8-e4m3 on tensor cores: the split's largest V scale per warp
  float vscale_mul, vscale_out;   // and 2^-k, 2^k with that scale < 2^k (the weights' digits)
  float vzero[kWarps];            // kivi2 on tensor cores: Σ w·z_t of the warp's head over the split
  // [kWarps] CertPartial (pipe_weights_step.cuh), raw storage: a __shared__ object may not
  // have initializers.
  alignas(8) unsigned char wpart_raw[kWarps][sizeof(meter::CertPartial)];
  __device__ meter::CertPartial& wpart(int w) {
    return *reinterpret_cast<meter::CertPartial*>(wpart_raw[w]);
  }
};

// What a stage holds per codec, as the kernel reads it: code bytes per vector, scale words per
// vector (kivi2: a value's fp16 (zero, scale)), key group parameter bytes per block (kivi2: d
// pairs). LaunchPipelined checks the host's plan (MakePipeSmemPlan) against these.
template <class C, int D>
inline constexpr int kPipeCodeBytes = C::kBytes * D / 8;
template <class C, int D>
inline constexpr int kPipeScaleWords = C::kAffineParams ? 2 : (C::kScaled ? (C::kGroupScale ? D / 32 : 1) : 0);
template <class C, int D>
inline constexpr int kPipeKeyParamBytes = C::kAffineParams ? 4 * D : 0;

template <class C, int D, int GMAX, bool METER>
__global__ void __launch_bounds__(kThreads, 2) PipelinedDecodeKernel(const DecodeParams p, const PipeSmemPlan plan) {
  constexpr int LPT = D / 8, TPW = 32 / LPT, U = kStageTokens / (kWarps * TPW);
  constexpr int NW = kChunkWords<C::kBytes>;
  constexpr int CB = kPipeCodeBytes<C, D>;  // code bytes per vector
  // kivi2 (kAffine): the K stages carry each block's key group parameters (KPB bytes: fp16 (zero,
  // scale) per channel, KeyParamSlot) and the V stages each value's pair in the scale slot (NS = 2
  // words); its blocks whose keys are not encoded yet, and blocks the gate promoted, are read from
  // the exact cache (kReadsExact: pipe_exact_rows.cuh).
  constexpr bool kAffine = C::kAffineParams;
  constexpr bool kReadsExact = kAffine;
  constexpr int NS = kPipeScaleWords<C, D>;
  constexpr int KPB = kPipeKeyParamBytes<C, D>;
  constexpr int S = PipeStages(C::kBytes, D);  // bits per channel = bytes per 8-channel lane
  constexpr bool kWit = METER && !C::kExact;
  constexpr bool kKScale = METER && C::kTierB;
  // fp16 or bf16 at d = 128: the logits (pass 1, below) and the value pass on tensor cores
  // (ops/mma_f16.cuh). In the value pass each warp owns
  // 16 channels: A = the stage's values transposed (channels × tokens, ldmatrix.trans), B = the
  // weights as two digits per head (tokens × (head, digit)). The stage's code rows are then
  // stored with their 16-byte chunks XOR-swizzled by token % 8, so both the K pass's row reads
  // and the transposing loads are free of bank conflicts.
  // bf16 takes the same paths with bf16 MMAs and digits (DigitFormat).
  constexpr bool kBf16 = std::is_same_v<C, DevBf16>;
  // fp8-e4m3 (raw or scaled) at d = 128 takes the fp16 paths too (kTc8): its codes are converted to
  // fp16 exactly as the fragments are built (one cvt per two codes) instead of loaded by ldmatrix,
  // which has no byte form. K pass: lane (gid, tig) of k-step ks reads channels 16·(tig + 4·(ks/4)) +
  // 4·(ks%4) + [0, 4) of rows gid and gid + 8 (one 16-byte load covers four k-steps), the query's
  // B fragments taken at the same channels; each token's sum is multiplied by its K scale. V pass:
  // row gid / gid + 8 of warp w's tile are channels 16w + 2·gid + {0, 1}, and k-step column
  // 2tig + {0, 1, 8, 9} is token tig + 4·{0, 1, 2, 3} (two bytes of four rows, paired by prmt), so
  // the weights' digits are stored at that column (Tc8WeightColumn); scaled, the weight's digits
  // are those of w·s_t·2^-k, 2^k above the split's largest V scale (read in the K stages).
  constexpr bool kFp8 = std::is_same_v<C, DevFp8Scaled> || std::is_same_v<C, DevFp8Raw>;
  constexpr bool kTc = (std::is_same_v<C, DevFp16> || kBf16 || kFp8) && D == 128;  // both passes on tensor cores
  constexpr bool kTc8 = kTc && kFp8;
  // kivi2 at d = 128 (kTcV2): the value pass on tensor cores, the logits on CUDA cores (the key
  // scales are per channel, inside the dot product). ṽ_t = z_t + s_t·m_t, so Σ_t w_t·ṽ_t =
  // Σ_t w_t·z_t (a sum per head, in the weights step) + Σ_t (w_t·s_t)·m_t: the 2-bit codes m are
  // the A operand, exact fp16 subnormals (mma::TwoBitPairAsF16Subnormals), at kTc8's lane mapping; the weights'
  // digits those of w·s_t·2^-k as scaled fp8's. Rows read exact go to the MMAs with weight 0 and are
  // summed on CUDA cores beside them (rare: a sequence's unfilled block, the gate's promoted ones).
  constexpr bool kTcV2 = kAffine && D == 128;
  // Its logits too (kTcK2): the codes' two bit planes times the block's scales as exact fp16 A
  // operands, the zeros in a chain of their own (pipe_tc_kivi2_keys.cuh); exact rows on CUDA cores.
  // With the meter, η from the digits and the channels' largest |z|, |s| (no MMA).
  constexpr bool kTcK2 = kTcV2;
  constexpr bool kTcK = kTc || kTcK2;        // the key pass on tensor cores
  constexpr bool kTcV = kTc || kTcV2;        // the value pass on tensor cores
  constexpr bool kPairRows = kTc8 || kTcV2;  // V tile rows gid, gid + 8 = channels 2gid, 2gid + 1
  constexpr bool kVScaleMax = (kTc8 && C::kScaled) || kTcV2;
  using Digits = DigitFormat<kBf16>;
  extern __shared__ __align__(128) uint8_t dsm[];
  __shared__ PipeSmem<GMAX, kTcV, !kTcV || kTcV2> sm;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int sub = lane / LPT, part = lane % LPT, ch0 = part * 8;
  const int split = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
  const PagedKvLayout& L = p.layout;
  const int32_t nb = L.num_bands, G = p.q_per_kv;
  const SplitRange range = BeginSplit<D>(p, seq, split, kvh, tid);
  if (!range.run) return;
  const int64_t Sctx = range.context, begin = range.begin, end = range.end;
  const StageLayout& sl = plan.stage;
  uint8_t* ring = dsm;
  float* logits = reinterpret_cast<float*>(dsm + plan.logits_off);  // [GMAX, lcap]
  int32_t* gvec = reinterpret_cast<int32_t*>(dsm + plan.gvec_off);   // [gvec_entries]
  const int64_t begin_al = begin / kStageTokens * kStageTokens;
  // Token offsets inside the split, [0, n_split), in 32 bits (a split is < 2^31 tokens): the
  // per-token tests and logit indices below need no 64-bit arithmetic.
  const int32_t n_split = static_cast<int32_t>(end - begin), lcap = p.lcap;
  const int32_t off_al = static_cast<int32_t>(begin_al - begin);  // stage 0's token 0, in (−64, 0]
  const int32_t n_st = static_cast<int32_t>((end - begin_al + kStageTokens - 1) / kStageTokens);
  int32_t* gexact = reinterpret_cast<int32_t*>(dsm + plan.gexact_off);  // kReadsExact: [gvec_entries]
  FillGroupVectors(p, seq, kvh, static_cast<int32_t>(begin_al), static_cast<int32_t>(begin - begin_al),
                   static_cast<int32_t>(end - begin_al), n_st * kStageGroups, tid, kThreads, gvec,
                   kReadsExact ? gexact : nullptr);
  const PipeExactRows<D, kReadsExact> exact_rows(p, gexact, static_cast<int32_t>(begin_al), ch0);
  const int scale_idx = C::kScaled ? (NS > 1 ? ch0 / 32 : 0) : 0;
  const float inv_sqrt_d = 1.0f / sqrtf(static_cast<float>(D));
  const int h0 = kvh * G;
  const uint64_t h1 = meter::DitherHeadHash(p.seed, static_cast<uint32_t>(p.layer), static_cast<uint32_t>(kvh));

  __syncthreads();  // gvec

  // ---- the stage loader (pipe_stage_loader.cuh): stage k < n_st reads K, k ≥ n_st reads V (+ the
  // K band witnesses, the V summaries and the K scales)
  constexpr StageSwizzle kSwizzle = !kTc ? StageSwizzle::kNone : (kTc8 ? StageSwizzle::kTc8 : StageSwizzle::kTc);
  const PipeStageLoader<CB, NS, S, kSwizzle, kVScaleMax, kKScale, kWit, KPB> loader(sl, tid, p.bs_shift);
  auto issue = [&](int k) { loader.Issue(k, n_st, gvec, ring, sl, p.kv, nb); };
  // Launched to overlap the KV write (MeteredDecodeCudaArgs::overlap_previous): the first stages
  // stream before the wait, except in the split the write may still be changing. q is read after.
  if (range.HoldsNewest()) cuda_launch::WaitForPreviousKernel();
#pragma unroll
  for (int k = 0; k < S - 1; ++k) issue(k);
  cuda_launch::WaitForPreviousKernel();

  // ---- meter prologue, while the first stages load: query band norms and the Tier B
  // coefficient (CPU: PrepareMeteredQuery)
  if constexpr (METER) {
    if (kWit) QueryBandPrologue<D, C::kTierB>(p, seq, h0, G, nb, tid, kThreads, sm);
    __syncthreads();  // qbn
    if (tid < GMAX) {  // read after the next barrier
      sm.tierb[tid] = tid < G ? TierBCoefficientOfHead<D, C::kTierB>(sm, tid, nb, Sctx, p.delta_loc) : 0.0f;
    }
    // B = 8: each head's band factors ‖q_b‖/√d·EpsInflation as 16-bit digits rounded up, for
    // the per-token ε by dp2a (TierAEpsilonOfDigits, as the tensor-core kernel): lane g·8 + b of
    // the first GMAX/4 warps; heads ≥ G get factors 0. Read after the next barrier.
    if (kWit && nb == 8 && tid < GMAX * 8) {
      const int g = tid / 8, b = tid % 8;
      const float f = g < G ? (sm.qbn[g][b] * inv_sqrt_d) * meter::EpsInflation(D, nb) : 0.0f;
      StoreBandFactorDigits(BandFactorDigitsOf(f, 8), b, sm.qbn16[g], &sm.qbn_scale[g]);
    }
  }

  // ---- pass 1: logits of the whole split -------------------------------------------------
  // kTc (fp16 / bf16 at d = 128): q·k on tensor cores. Warp w < 4 takes the stage's tokens
  // [16w, 16w + 16) (fp8: warp w < 8, tokens [8w, 8w + 8): kKRows) as the A operand (ldmatrix,
  // swizzled rows as in the value pass) against B = the query as two digits per head (q·2^s_h = hi + lo, s_h a power of two that
  // puts the head's max|q| below 2^14), columns (head, digit) as in the value pass, two
  // accumulator chains. With the meter (kTcEta) a third chain runs the same keys and digits with
  // their sign bits cleared: T̂ = Σ_c (|hi_c| + |lo_c|)·|k_c| per token, whose max over the split
  // gives η under the tensor-core rounding model of tc_logit_eta.cuh (certificates.md §4).
  constexpr bool kTcEta = kTcK && METER;
  // Tokens a warp takes in the K pass: 16 (the A fragment's rows), so warps 0-3 cover a stage;
  // fp8 (kTc8), whose fragments are built by conversion rather than loaded, 8 (rows gid + 8 are
  // zeros), so that all 8 warps share the stage and each converts half as many codes: the K pass
  // had been a chain of four warps while the other four waited at the barrier (ncu,
  // bench/RESULTS.md twenty-second session).
  constexpr int kKRows = kTc8 || kTcK2 ? 8 : 16;
  // Scaled fp8 needs no T̂ chain: its codes are ≤ 448 in magnitude, so T_t ≤ 448·X₁ with X₁ the
  // head's digit sum Σ_c (|hi_c| + |lo_c|), and η follows from the split's largest K scale
  // (TcLogitEtaFp8CodeBoundOf). Raw fp8 keeps the chain (its keys are not near 448). kivi2 bounds
  // its keys by the channels' largest parameters (Kivi2TcBoundSum).
  constexpr bool kTcEtaChain = kTcEta && !(kTc8 && C::kScaled) && !kTcK2;
  constexpr int NTK = kTcK ? GMAX / 4 : 1;
  float q[GMAX][8];         // CUDA-core logits: the lane's 8 channels of every head
  uint32_t qb[NTK][8][2];  // kTcK: B fragments [n-tile, k-step of 16 channels, register]
  float qunscale[NTK];     // kTcK: 2^-s of the head whose logits the lane finishes (4n + tig)
  float qdigit_l1[NTK];    // scaled fp8 with the meter: X₁ of head 4n + tig (fp32 sum)
  // kTcK2 with the meter: qb in shared memory [n-tile][k-step][lane] for the K pass (in registers
  // it spilled at 8 heads, ptxas 136 bytes; at 4 heads it fits since `cb371b8` but measured no
  // faster: bench/RESULTS.md, twenty-seventh session).
  constexpr bool kQbShared = kTcK2 && METER;
  __shared__ uint2 qb_shared[kQbShared ? NTK * 8 * 32 : 1];
  if constexpr (kTcK) {
    TcQueryFragments<D, NTK, kTc8 || kTcK2, kBf16, kTcEta && !kTcEtaChain && !kTcK2>(p, seq, h0, G, lane, inv_sqrt_d,
                                                                                   qb, qunscale, qdigit_l1);
    if (kQbShared && warp == 0) {  // the same for every warp; read after the first K stage's barrier
#pragma unroll
      for (int n = 0; n < NTK; ++n) {
#pragma unroll
        for (int ks = 0; ks < 8; ++ks) qb_shared[(n * 8 + ks) * 32 + lane] = make_uint2(qb[n][ks][0], qb[n][ks][1]);
      }
    }
  } else {
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        q[g][i] = g < G ? p.q[(static_cast<int64_t>(seq) * p.num_q_heads + h0 + g) * D + ch0 + i] : 0.0f;
      }
    }
  }
  float mtc[NTK];   // kTcK: the lane's max logit of head 4n + tig
  float tmax[NTK];  // kTcEta: the lane's max T̂ (scaled: T̂·s_t) of head 4n + tig (over its valid tokens), then its η
                    // (kTcK2: the max η of its exact rows)
  // kTcK2 with the meter: the largest |z|, |s| of channels 4·lane..4·lane + 3 over the blocks with a
  // valid token (Kivi2TcParamMax; z's bit 15 set once there is one).
  uint32_t kz_max = 0, ks_max = 0;
  float kscale_max = 0.0f;  // kTcEta, scaled fp8: the lane's max K scale over its valid tokens
  float vscale_max = 0.0f;  // kVScaleMax: the thread's max V scale over its valid tokens (threads < 64)
#pragma unroll
  for (int n = 0; n < NTK; ++n) {
    mtc[n] = -INFINITY;
    tmax[n] = 0.0f;
  }
  float mloc = -INFINITY, admax[GMAX];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) admax[g] = 0.0f;
  // η by Cauchy–Schwarz (codecs whose squares cannot overflow): over the lane's 8 channels
  // Σ_c |q_c x_c|·s ≤ ‖q_lane‖·‖x_lane‖·s, so the lane keeps one head-independent number per
  // split, max_t s_t²·‖x_t,lane‖², instead of G sums of |q_c x_c| per token (8 fmas a token
  // instead of 8·G). Finished after the pass (meter::EtaLaneFactor, cert_math.h).
  constexpr bool kEtaByNorm = !C::kWideRange && !C::kExact;
  float xss_max = 0.0f;
  int my_h = 0;
  // int8-dither keys: each stage's token hashes DitherTokenHashAt(h1, t), computed once per token by the
  // first kStageTokens threads instead of by each of the token's LPT lanes; double-buffered,
  // stage k+1's written during stage k (published by the next stage's barrier). Values are not
  // dithered (meter/dither_hash.h): the V pass needs none.
  __shared__ uint64_t thash[C::kTierB ? 2 : 1][C::kTierB ? kStageTokens : 1];
  auto stage_hashes = [&](int stage, int buf) {
    if constexpr (C::kTierB) {
      if (tid < kStageTokens) {
        thash[buf][tid] = meter::DitherTokenHashAt(h1, static_cast<uint64_t>(begin_al + int64_t{kStageTokens} * stage + tid));
      }
    }
  };
  stage_hashes(0, 0);
  for (int k = 0; k < n_st; ++k) {
    CpAsyncWait<S - 2>();
    __syncthreads();
    issue(k + S - 1);
    if (k + 1 < n_st) stage_hashes(k + 1, (k + 1) & 1);
    const uint8_t* st = ring + (k % S) * sl.bytes;
    const int32_t off0 = off_al + kStageTokens * k;  // stage token 0's offset in the split
    const bool edge = off0 < 0 || off0 + kStageTokens > n_split;
    if constexpr (kVScaleMax) {  // thread = token
      if (tid < kStageTokens && off0 + tid >= 0 && off0 + tid < n_split) {
        float vs;
        if constexpr (kAffine) {  // the scale of the value's (zero, scale) pair
          float z;
          C::UnpackPair(reinterpret_cast<const uint32_t*>(st + sl.kscales)[tid], &z, &vs);
        } else {
          vs = Bf16Bits(reinterpret_cast<const uint16_t*>(st + sl.kscales)[tid]);
        }
        vscale_max = meter::MaxAcc(vscale_max, vs);
      }
    }
    if constexpr (kTc) {
      if (warp < kStageTokens / kKRows) {
        const int gid = lane >> 2, tig = lane & 3;
        // ldmatrix rows: matrix i = lane / 8 covers tokens 16·warp + 8·(i % 2) + [0, 8) and
        // channels 16·ks + 8·(i / 2) + [0, 8): chunk 2·ks + i / 2 of row lane % 8, swizzled.
        const int row = 16 * warp + ((lane >> 3) & 1) * 8 + (lane & 7);
        const uint32_t rbase = static_cast<uint32_t>(__cvta_generic_to_shared(st + sl.codes)) + row * CB;
        // kTc8: the lane's 32 code bytes of row gid (token 8·warp + gid, swizzled by gid): chunks
        // tig (k-steps 0-3) and tig + 4 (k-steps 4-7); Tc8Swizzle keeps each quarter-warp's 16-byte
        // loads on all 32 banks. Rows gid + 8 of the A fragments are zeros.
        uint4 k8[kTc8 ? 2 : 1];  // [chunk tig / tig + 4]
        if constexpr (kTc8) {
          const uint8_t* r0 = st + sl.codes + (kKRows * warp + gid) * CB;
          const int sw = Tc8Swizzle(gid);
#pragma unroll
          for (int c = 0; c < 2; ++c) k8[c] = *reinterpret_cast<const uint4*>(r0 + (((tig + 4 * c) ^ sw) << 4));
        }
        float ca[NTK][4], cb[NTK][4];  // two accumulator chains (even, odd k-steps)
        float ct[kTcEtaChain ? NTK : 1][4];  // kTcEtaChain: T̂'s chain (sign bits cleared)
#pragma unroll
        for (int n = 0; n < NTK; ++n) {
#pragma unroll
          for (int i = 0; i < 4; ++i) ca[n][i] = cb[n][i] = 0.0f;
          if constexpr (kTcEtaChain) {
#pragma unroll
            for (int i = 0; i < 4; ++i) ct[n][i] = 0.0f;
          }
        }
#pragma unroll
        for (int ks = 0; ks < 8; ++ks) {
          uint32_t a[4];
          if constexpr (kTc8) {
            const uint32_t w0 = Uint4Word(k8[ks / 4], ks % 4);
            a[0] = mma::E4m3PairLoToF16x2(w0);
            a[1] = 0u;
            a[2] = mma::E4m3PairHiToF16x2(w0);
            a[3] = 0u;
          } else {
            mma::LdMatrixX4(a, rbase + (((2 * ks + (lane >> 4)) ^ (lane & 7)) << 4));
          }
#pragma unroll
          for (int n = 0; n < NTK; ++n) mma::Mma16F32<kBf16>((ks & 1) ? cb[n] : ca[n], a, qb[n][ks][0], qb[n][ks][1]);
          if constexpr (kTcEtaChain) {
            constexpr uint32_t kMag = 0x7fff7fffu;  // both halves' sign bits cleared
            const uint32_t aa[4] = {a[0] & kMag, a[1] & kMag, a[2] & kMag, a[3] & kMag};
#pragma unroll
            for (int n = 0; n < NTK; ++n) mma::Mma16F32<kBf16>(ct[n], aa, qb[n][ks][0] & kMag, qb[n][ks][1] & kMag);
          }
        }
#pragma unroll
        for (int n = 0; n < NTK; ++n) {
          const int g = 4 * n + tig;
#pragma unroll
          for (int half = 0; half < kKRows / 8; ++half) {
            const int j = kKRows * warp + gid + 8 * half;
            const int32_t o = off0 + j;
            float dot = (ca[n][2 * half] + cb[n][2 * half]) + (ca[n][2 * half + 1] + cb[n][2 * half + 1]);
            float ksc = 1.0f;  // scaled fp8: the token's K scale (tc_logit_eta.cuh, TcLogitEtaScaledOf)
            if constexpr (kTc8 && C::kScaled) {
              ksc = Bf16Bits(reinterpret_cast<const uint16_t*>(st + sl.scales)[j]);
              dot *= ksc;
            }
            const float l = dot * qunscale[n];
            if (g < G && o >= 0 && o < n_split) {
              logits[g * lcap + o] = l;
              mtc[n] = fmaxf(mtc[n], l);
              // T̂: column 2·tig holds the hi digits' sum, 2·tig + 1 the lo digits'.
              if constexpr (kTcEtaChain) tmax[n] = fmaxf(tmax[n], (ct[n][2 * half] + ct[n][2 * half + 1]) * ksc);
              if constexpr (kTcEta && kTc8 && C::kScaled) kscale_max = fmaxf(kscale_max, ksc);
            }
          }
        }
      }
    } else if constexpr (kTcK2) {  // lane (gid, tig): token 8·warp + gid, heads 4n + tig
      const int gid = lane >> 2, tig = lane & 3;
      const int j = 8 * warp + gid;
      const int32_t o = off0 + j;
      const bool valid = o >= 0 && o < n_split;
      if (exact_rows.IsExact(k, 8 * warp)) {  // warp-uniform: the row's fp32 dot on CUDA cores
#pragma unroll
        for (int n = 0; n < NTK; ++n) {
          const int g = 4 * n + tig;
          if (g < G && valid) {
            float eta = 0.0f;
            const float l = exact_rows.template KeyLogit<METER>(
                k, j, p.q + (static_cast<int64_t>(seq) * p.num_q_heads + h0 + g) * D, inv_sqrt_d, &eta);
            logits[g * lcap + o] = l;
            mtc[n] = fmaxf(mtc[n], l);
            if constexpr (METER) tmax[n] = fmaxf(tmax[n], eta);
          }
        }
      } else {
        const uint8_t* params = st + sl.kparams + KeyParamSlot(warp, L.block_size) * KPB;
        if constexpr (METER) {
          if (__any_sync(0xffffffffu, valid)) {  // a valid token among the warp's 8
            Kivi2TcParamMax(params, lane, &kz_max, &ks_max);
          }
        }
        float dot[NTK];
        Kivi2TcKeyTile<NTK, kQbShared>(st + sl.codes + j * CB, params, lane, qb, qb_shared, dot);
#pragma unroll
        for (int n = 0; n < NTK; ++n) {
          const int g = 4 * n + tig;
          const float l = dot[n] * qunscale[n];
          if (g < G && valid) {
            logits[g * lcap + o] = l;
            mtc[n] = fmaxf(mtc[n], l);
          }
        }
      }
    } else {  // CUDA-core logits
      // kivi2 at d = 64: warp w takes the stage's 8-token group w (tokens 8w + sub + TPW·u), one paged block,
      // so at GMAX ≤ 4 the lane's 8 channels' key parameters are loaded and unpacked once a stage
      // (kKeyFloats). At GMAX = 8 they are read per token: held across the loop they spilled with
      // the meter (ptxas: 176-184 bytes against 120).
      static_assert(!kAffine || (kWarps == kStageGroups && TPW * U == 8), "a warp per 8-token group");
      constexpr bool kKeyFloats = kAffine && GMAX <= 4;
      const uint4* kparams = reinterpret_cast<const uint4*>(st + sl.kparams + KeyParamSlot(warp, L.block_size) * KPB + 4 * ch0);
      float kz[kKeyFloats ? 8 : 1], ks[kKeyFloats ? 8 : 1];
      if constexpr (kKeyFloats) {
        const uint4 a = kparams[0], b = kparams[1];
        C::UnpackPairs({a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}, kz, ks);
      }
#pragma unroll (kAffine && GMAX > 4 ? 1 : U)  // kivi2 at GMAX = 8: fewest spills with the meter (ptxas)
      for (int u = 0; u < U; ++u) {
        const int j = kAffine ? 8 * warp + sub + TPW * u : u * kWarps * TPW + warp * TPW + sub;
        uint32_t raw[NW];
        LoadSmemChunk<C::kBytes>(st + sl.codes + j * CB + part * C::kBytes, raw);
        float sc = 1.0f;
        if constexpr (C::kScaled) sc = Bf16Bits(reinterpret_cast<const uint16_t*>(st + sl.scales)[j * NS + scale_idx]);
        bool valid = true;
        if (edge) valid = off0 + j >= 0 && off0 + j < n_split;
        float x[8];
        if constexpr (kKeyFloats) {
          C::DecodeWithFloats(raw[0], kz, ks, x);
        } else if constexpr (kAffine) {
          const uint4 a = kparams[0], b = kparams[1];
          float z[8], s[8];
          C::UnpackPairs({a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}, z, s);
          C::DecodeWithFloats(raw[0], z, s, x);
        } else {
          DecodeCtx ctx{C::kTierB ? thash[k & 1][j] : 0ull, ch0, false};
          C::Decode8(raw, ctx, x);
        }
        if (exact_rows.on() && valid) exact_rows.Row(k, j, 0, x);  // an exact row: sc = 1 already (unscaled codec)
        if (!valid) {
          sc = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; ++i) x[i] = 0.0f;
        }
        float dot[GMAX];
#pragma unroll
        for (int g = 0; g < GMAX; ++g) {
          float s = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; ++i) s = fmaf(q[g][i], x[i], s);
          dot[g] = s * sc;
        }
        if constexpr (METER && kEtaByNorm) {  // η: max over tokens of s²·‖x_lane‖²
          xss_max = fmaxf(xss_max, meter::KeyLaneSquares(x, sc));
        } else if constexpr (METER) {  // η: per head, max over tokens of this lane's Σ|q_c x_c|·s
#pragma unroll
          for (int g = 0; g < GMAX; ++g) {
            float a = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; ++i) a = fmaf(fabsf(q[g][i]), fabsf(x[i]), a);
            admax[g] = fmaxf(admax[g], a * sc);
          }
        }
        const float l = ReduceScatter<GMAX, LPT>(dot, part, &my_h) * inv_sqrt_d;
        if (valid && my_h < G && (part & (LPT / GMAX - 1)) == 0) {
          logits[my_h * lcap + (off0 + j)] = l;
          mloc = fmaxf(mloc, l);
        }
      }
    }
  }
  // Split max per head: lanes sharing my_h (all but the head bits of `part`).
  constexpr int kHeadBits = (LPT - 1) & ~(LPT / GMAX - 1);
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    if (o & kHeadBits) continue;
    mloc = fmaxf(mloc, __shfl_xor_sync(0xffffffffu, mloc, o));
  }
  if (METER && !kTcK) {
    if constexpr (kEtaByNorm) {
      const float xn = meter::EtaLaneFactor(xss_max);
#pragma unroll
      for (int g = 0; g < GMAX; ++g) admax[g] = meter::EtaLaneFactor(meter::LaneSquares(q[g])) * xn;
    }
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
      float a = admax[g];
#pragma unroll
      for (int o = LPT / 2; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
#pragma unroll
      for (int o = 16; o >= LPT; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
      admax[g] = a;
    }
  }
  if constexpr (kTcEta && kTc8 && C::kScaled) {  // the warp's tokens: max over gid
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) kscale_max = fmaxf(kscale_max, __shfl_xor_sync(0xffffffffu, kscale_max, o));
  }
  if constexpr (kVScaleMax) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) vscale_max = fmaxf(vscale_max, __shfl_xor_sync(0xffffffffu, vscale_max, o));
    if (lane == 0) sm.vsmax[warp] = vscale_max;
  }
  if constexpr (kTcK2 && METER) {  // the coded rows' η, the same on every lane of a tig
    if (kz_max & Kivi2TcParamMaxSeen) {
      float w[NTK];
      Kivi2TcBoundSum<NTK, kQbShared>(kz_max, ks_max, qb, qb_shared, lane, w);
#pragma unroll
      for (int n = 0; n < NTK; ++n) tmax[n] = fmaxf(tmax[n], TcLogitEtaKivi2Of(w[n], qunscale[n]));
    }
  }
  if constexpr (kTcK) {  // lanes of one tig hold the same head: max over gid
#pragma unroll
    for (int n = 0; n < NTK; ++n) {
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) {
        mtc[n] = fmaxf(mtc[n], __shfl_xor_sync(0xffffffffu, mtc[n], o));
        if constexpr (kTcEtaChain || (kTcK2 && METER)) tmax[n] = fmaxf(tmax[n], __shfl_xor_sync(0xffffffffu, tmax[n], o));
      }
      if (lane < 4) sm.red[warp][4 * n + lane] = mtc[n];
      // The head's η over this warp's tokens (tc_logit_eta.cuh; kTcK2: already η).
      if constexpr (kTcEta && !kTcEtaChain && !kTcK2) {
        tmax[n] = TcLogitEtaFp8CodeBoundOf(qdigit_l1[n], kscale_max, qunscale[n]);
      } else if constexpr (kTcEta && !kTcK2) {
        tmax[n] = TcLogitEtaOf<kBf16>(tmax[n], qunscale[n]);
      }
      if (kTcEta && lane < 4) sm.red_eta[warp][4 * n + lane] = tmax[n];
    }
  } else {
    if (lane < LPT && (part & (LPT / GMAX - 1)) == 0) sm.red[warp][my_h] = mloc;
    if (METER && lane == 0) {
#pragma unroll
      for (int g = 0; g < GMAX; ++g) sm.red_eta[warp][g] = admax[g];
    }
  }
  __syncthreads();
  if (tid < GMAX) {
    float m = -INFINITY;
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sm.red[w][tid]);
    sm.m[tid] = m > -INFINITY ? m : 0.0f;  // all logits NaN: the partial is marked bad later
    if (METER) {
      float a = 0.0f;
      for (int w = 0; w < kWarps; ++w) a = fmaxf(a, sm.red_eta[w][tid]);
      sm.eta[tid] = kTcEta ? a : meter::EtaFactor(D) * a * inv_sqrt_d;
    }
    if (kVScaleMax && tid == 0) {  // 2^k above the split's largest V scale (0 where none is finite)
      float sv = 0.0f;
      for (int w = 0; w < kWarps; ++w) sv = fmaxf(sv, sm.vsmax[w]);
      int e = 0;
      if (sv > 0.0f && sv <= 3.0e38f) frexpf(sv, &e);  // sv < 2^e
      e = max(e, -100);
      sm.vscale_mul = sv > 0.0f && sv <= 3.0e38f ? ldexpf(1.0f, -e) : 0.0f;
      sm.vscale_out = ldexpf(1.0f, e);
    }
  }
  // sm.m / sm.eta become visible at the first V stage's barrier.

  // ---- pass 2: per V stage, weights + meter, then values ------------------------------------
  // CUDA-core values: acc [GMAX heads, the lane's 8 channels]. kTcV: vacc [GMAX/4 n-tiles, 4]
  // the MMA's fp32 D fragments, column 2·tig + {0, 1} = head 4·tile + tig's two digits, rows
  // channels 16·warp + gid and + 8 (kPairRows: 2·gid, 2·gid + 1) (summed per stage, then added
  // here: one rounding a stage). kTcV2: eacc [n-tile, row] the exact rows' Σ w·ṽ at the lane's
  // two channels for head 4·tile + tig, vzero_acc the thread's Σ w·z_t for its weights-step head.
  constexpr int NT = kTcV ? GMAX / 4 : 1;
  float acc[kTcV ? 1 : GMAX][8];
  float vacc[NT][4];
  float eacc[kTcV2 ? NT : 1][2] = {};
  float vzero_acc = 0.0f;
#pragma unroll
  for (int g = 0; g < (kTcV ? 1 : GMAX); ++g) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
  }
#pragma unroll
  for (int n = 0; n < NT; ++n) vacc[n][0] = vacc[n][1] = vacc[n][2] = vacc[n][3] = 0.0f;
  PipeWeightsStep<C, GMAX, METER, NS> ws;  // the weights step's per-thread state
  ws.Init(sm, tid, G, nb);
  float vmax = 0.0f;  // max over the thread's in-range tokens of ν (the exact scheme: ‖ṽ‖)
  const float infl = meter::EpsInflation(D, nb);
  // Stage k's weights (a) before stage k's values (b), one barrier between. With the weights a
  // stage ahead (kWeightsAhead), an iteration computes stage k + 1's weights and stage k's
  // values with no barrier between them: two independent chains a warp can interleave (the
  // weights step is a dependent chain of shared-memory reads, expf and the meter's terms; the
  // value pass, MMAs), one barrier a stage instead of two. It needs stage k + 1 landed at
  // iteration k, one stage less in flight, so it is taken where the ring has ≥ 4 stages. On an
  // H100 (bench/RESULTS.md, twenty-seventh session) it took fp8-e4m3 3–4% faster with the meter,
  // 1–2% without, kivi2 8–9% without the meter and, once its weights step had no warp vote left
  // (AddMid for every token), 1.4–1.8% with it; the values before the weights measured 0.5–2% slower.
  constexpr bool kWeightsAhead = S >= 4;
  auto weights_of = [&](int k) {  // (a) of V stage k into buffer (k − n_st) % 2
    const uint8_t* st = ring + (k % S) * sl.bytes;
    const int buf = (k - n_st) & 1;  // values_of(k) reads the same one
    const int32_t off0 = off_al + kStageTokens * (k - n_st);  // stage token 0's offset in the split
    const bool edge = off0 < 0 || off0 + kStageTokens > n_split;
    const float vmul = kVScaleMax ? sm.vscale_mul : 1.0f;
    auto vscale_of = [&](int jj) -> float {
      if constexpr (kVScaleMax && !kTcV2) {
        return Bf16Bits(reinterpret_cast<const uint16_t*>(st + sl.scales)[jj]) * vmul;
      } else {
        return 1.0f;
      }
    };
    // w of head g for stage token jj; vs: the token's V scale times 2^-k (kVScaleMax), else 1.
    auto store_weight = [&](int g, int jj, float w, float vs) {
      if constexpr (kTcV) {
        const int col = kPairRows ? Tc8WeightColumn(jj) : jj;
        if constexpr (kTcV2) {  // w·z_t summed here, w·s_t·2^-k to the MMAs; an exact row's w kept in fp32
          float z, s;
          C::UnpackPair(reinterpret_cast<const uint32_t*>(st + sl.scales)[jj], &z, &s);
          if (exact_rows.IsExact(k - n_st, jj)) {
            sm.wt[buf][g][jj] = w;
            w = 0.0f;
          } else if (w > 0.0f) {  // a masked token's w is 0 (its pair may be stale bytes); NaN: a bad partial
            vzero_acc = fmaf(w, z, vzero_acc);
          }
          vs = s * vmul;
        }
        if constexpr (kVScaleMax) {
          w *= vs;  // ≤ 1: w ≤ 1 and s_t < 2^k; NaN (a bad partial) or a stale slot's bits: 0
          if (!(w >= 0.0f && w <= 1.0f)) w = 0.0f;
        }
        const uint32_t d = Digits::Weight(w);
        sm.wt16[buf][2 * g][col] = static_cast<uint16_t>(d);
        sm.wt16[buf][2 * g + 1][col] = static_cast<uint16_t>(d >> 16);
      } else {
        sm.wt[buf][g][jj] = w;
      }
    };
    // Exact rows carry no quantization error: ε̂ = ρ = 0 (the V pass below takes their ‖ṽ‖ into vmax).
    if constexpr (kWit) exact_rows.ClearStagedWitness(k - n_st, const_cast<uint8_t*>(st), sl, tid);
    // (a) weights and certificate terms (pipe_weights_step.cuh)
    ws.Stage(sm, sl, st, logits, lcap, off0, n_split, nb, inv_sqrt_d, infl, &vmax, store_weight, vscale_of);
    if constexpr (kTc) {
      // An edge stage's tokens outside [begin, end) may hold any bits (slots not yet written):
      // zero their rows, since a 0 weight times a NaN code would still reach the MMA's sums.
      if (edge && tid < kStageTokens && !(off0 + tid >= 0 && off0 + tid < n_split)) {
        uint4* row = reinterpret_cast<uint4*>(const_cast<uint8_t*>(st) + sl.codes + tid * CB);
#pragma unroll
        for (int i = 0; i < CB / 16; ++i) row[i] = make_uint4(0, 0, 0, 0);
      }
    }
  };
  auto values_of = [&](int k) {  // (b) of V stage k from buffer (k − n_st) % 2
    const uint8_t* st = ring + (k % S) * sl.bytes;
    const int buf = (k - n_st) & 1;
    const int32_t off0 = off_al + kStageTokens * (k - n_st);  // stage token 0's offset in the split
    const bool edge = off0 < 0 || off0 + kStageTokens > n_split;
    // (b) values
    if constexpr (kTcV) {
      const int gid = lane >> 2, tig = lane & 3;
      const TcValueCodes<CB, kTc8, kTcV2> codes(st + sl.codes, lane, gid, tig, warp);  // pipe_tc_value_codes.cuh
      float sacc[NT][4];
#pragma unroll
      for (int n = 0; n < NT; ++n) sacc[n][0] = sacc[n][1] = sacc[n][2] = sacc[n][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < kStageTokens / 16; ++ks) {
        uint32_t a[4];
        codes.Load(ks, a);
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          const uint16_t* wr = &sm.wt16[buf][n * 8 + gid][ks * 16 + 2 * tig];
          const uint32_t b0 = *reinterpret_cast<const uint32_t*>(wr), b1 = *reinterpret_cast<const uint32_t*>(wr + 8);
          mma::Mma16F32<kBf16>(sacc[n], a, b0, b1);
        }
      }
#pragma unroll
      for (int n = 0; n < NT; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) vacc[n][i] += sacc[n][i];
      }
      if constexpr (kTcV2) {  // rows read exact: on CUDA cores beside the MMAs (their weight there is 0)
        exact_rows.template AddTcValueRows<METER, NT, LPT>(k - n_st, off0, n_split, 16 * warp + 2 * gid, tig, sm.wt[buf], eacc,
                                                           warp, sub, &vmax);
      }
    } else {  // CUDA-core values
#pragma unroll (kAffine ? 1 : U)  // kivi2: the V loop unrolled spilled (ptxas: 100 bytes at GMAX = 4)
      for (int u = 0; u < U; ++u) {
        const int j = u * kWarps * TPW + warp * TPW + sub;
        uint32_t raw[NW];
        LoadSmemChunk<C::kBytes>(st + sl.codes + j * CB + part * C::kBytes, raw);
        float sc = 1.0f;
        if constexpr (C::kScaled) sc = Bf16Bits(reinterpret_cast<const uint16_t*>(st + sl.scales)[j * NS + scale_idx]);
        bool valid = true;
        if (edge) valid = off0 + j >= 0 && off0 + j < n_split;
        float x[8];
        if constexpr (kAffine) {
          C::DecodeWithPair(raw[0], reinterpret_cast<const uint32_t*>(st + sl.scales)[j], x);
        } else {
          DecodeCtx ctx{0ull, ch0, true};
          C::Decode8(raw, ctx, x);
        }
        const bool exact = exact_rows.on() && valid && exact_rows.Row(k - n_st, j, 1, x);
        if (!valid) {
          sc = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; ++i) x[i] = 0.0f;
        }
#pragma unroll
        for (int g = 0; g < GMAX; ++g) {
          const float ws = sm.wt[buf][g][j] * sc;
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(ws, x[i], acc[g][i]);
        }
        if constexpr (METER && C::kExact) {  // no summary: ‖ṽ‖ by the wide-range path (ρ = 0)
          const float norm = WideRangeRowNorm<D, LPT>(x, sc);
          if (valid) vmax = meter::MaxAcc(vmax, norm);  // NaN ignored, as PartialAddToken does
        } else if constexpr (METER && kReadsExact) {  // exact rows alike; the vote keeps the shuffles uniform
          if (exact_rows.on() && __any_sync(0xffffffffu, exact)) {
            const float norm = WideRangeRowNorm<D, LPT>(x, sc);
            if (exact) vmax = meter::MaxAcc(vmax, norm);
          }
        }
      }
    }
  };
  if constexpr (kWeightsAhead) {
    CpAsyncWait<S - 2>();
    __syncthreads();  // stage n_st landed; sm.m, sm.eta and the K stages' last reads done
    ws.LoadMax(sm);
    weights_of(n_st);
    for (int k = n_st; k < 2 * n_st; ++k) {
      CpAsyncWait<S - 3>();  // stage k + 1 landed
      __syncthreads();       // stage k's weights written; stage k − 1's values done with its slot and buffer
      issue(k + S - 1);
      if (k + 1 < 2 * n_st) weights_of(k + 1);
      values_of(k);
    }
  } else {
    for (int k = n_st; k < 2 * n_st; ++k) {
      CpAsyncWait<S - 2>();
      __syncthreads();
      issue(k + S - 1);
      if (k == n_st) ws.LoadMax(sm);
      weights_of(k);
      __syncthreads();
      values_of(k);
    }
  }
  CpAsyncWait<0>();
  ReleaseSplitMerge();

  // ---- reductions: certificate partials, vmax, then output accumulators ----------------------
  ws.WarpPartial(sm, warp, lane);  // sm.wpart, read after the barriers below
  if constexpr (kTcV2) {  // a warp's threads share their weights-step head
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) vzero_acc += __shfl_xor_sync(0xffffffffu, vzero_acc, o);
    if (lane == 0) sm.vzero[warp] = vzero_acc;
  }
  if (METER) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, o));
  }
  __syncthreads();  // every thread is done with logits / sm.wt
  if (lane == 0) sm.vmax[warp] = vmax;
  const int64_t cell0 = (static_cast<int64_t>(seq) * p.num_q_heads + h0) * p.num_splits + split;
  if constexpr (kTcV) {  // the warp's 16 channels of every head are complete: no reduction
    const int gid = lane >> 2, tig = lane & 3;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const int g = 4 * n + tig;
      if (g < G) {
        // Rows gid and gid + 8: channels gid and gid + 8 of the warp's 16, kPairRows 2·gid and 2·gid + 1.
        float* out = p.part_acc + (cell0 + static_cast<int64_t>(g) * p.num_splits) * D + 16 * warp;
        const float unscale = kVScaleMax ? sm.vscale_out : 1.0f;
        // kTcV2: the codes' subnormal scales, rows gid 2^-24 and gid + 8 2^-22, taken off with the
        // digits' (exact: powers of two).
        constexpr float kRow0 = (kTcV2 ? 16777216.0f : 1.0f) / Digits::kWeightScale;
        constexpr float kRow8 = (kTcV2 ? 4194304.0f : 1.0f) / Digits::kWeightScale;
        float o0 = (vacc[n][0] + vacc[n][1]) * kRow0 * unscale;
        float o1 = (vacc[n][2] + vacc[n][3]) * kRow8 * unscale;
        if constexpr (kTcV2) {  // + Σ w·z_t of head g (its weights-step warps) + the exact rows' sums
          constexpr int kHeadWarps = PipeWeightsStep<C, GMAX, METER, NS>::TPH / 32;
          float zs = 0.0f;
#pragma unroll
          for (int w = 0; w < kHeadWarps; ++w) zs += sm.vzero[g * kHeadWarps + w];
          o0 += zs + eacc[n][0];
          o1 += zs + eacc[n][1];
        }
        out[kPairRows ? 2 * gid : gid] = o0;
        out[kPairRows ? 2 * gid + 1 : gid + 8] = o1;
      }
    }
  }
  float* red = logits;  // [kWarps, GMAX, D]
  if constexpr (!kTcV) {
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int o = 16; o >= LPT; o >>= 1) acc[g][i] += __shfl_xor_sync(0xffffffffu, acc[g][i], o);
      }
    }
    if (sub == 0) {
#pragma unroll
      for (int g = 0; g < GMAX; ++g) {
#pragma unroll
        for (int i = 0; i < 8; ++i) red[(warp * GMAX + g) * D + ch0 + i] = acc[g][i];
      }
    }
  }
  __syncthreads();
  if (tid < G) {
    meter::CertPartial c = PipeWeightsStep<C, GMAX, METER, NS>::HeadPartial(sm, tid);
    c.m = sm.m[tid];
    if (METER) {
      float vm = 0.0f;
      for (int w = 0; w < kWarps; ++w) vm = fmaxf(vm, sm.vmax[w]);
      c.vmax = vm;
      c.eta_max = fmaxf(c.eta_max, sm.eta[tid]);
    }
    p.parts[cell0 + static_cast<int64_t>(tid) * p.num_splits] = c;
  }
  for (int i = kTcV ? G * D : tid; i < G * D; i += kThreads) {
    const int g = i / D, c = i % D;
    float s = 0.0f;
    for (int w = 0; w < kWarps; ++w) s += red[(w * GMAX + g) * D + c];
    p.part_acc[(cell0 + static_cast<int64_t>(g) * p.num_splits) * D + c] = s;
  }
}

template <class C, int D, int GMAX, bool METER>
CudaStatus LaunchPipelined(const DecodeParams& p, const PipeSmemPlan& plan, dim3 grid, cudaStream_t stream) {
  const StageLayout want = MakeStageLayout(kPipeCodeBytes<C, D>, kPipeScaleWords<C, D>, p.layout.num_bands,
                                          kPipeKeyParamBytes<C, D>);
  const StageLayout& got = plan.stage;
  if (got.codes != want.codes || got.scales != want.scales || got.kscales != want.kscales || got.kwit != want.kwit ||
      got.kunit != want.kunit || got.vsum != want.vsum || got.kparams != want.kparams || got.bytes != want.bytes ||
      plan.stages != PipeStages(C::kBytes, D)) {
    return CudaStatus::Error("MeteredDecodeCuda: the pipelined kernel's stage plan does not match its codec");
  }
  auto kernel = PipelinedDecodeKernel<C, D, GMAX, METER>;
  static const size_t two_per_sm = TwoCtasPerSmBytes(reinterpret_cast<const void*>(kernel));  // per instantiation
  const size_t bytes = std::max(plan.bytes, two_per_sm);
  WITCERT_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  return cuda_launch::Launch(kernel, grid, dim3(kThreads), bytes, stream, p.overlap_previous, p, plan);
}

template <class C>
CudaStatus LaunchPipelinedForCodec(const DecodeParams& p, const PipeSmemPlan& plan, bool meter, dim3 grid,
                                   cudaStream_t stream) {
  const int d = p.layout.head_dim;
  const bool g8 = p.q_per_kv > 4;
#define WITCERT_PIPE_CASE(D_, G_)                                                  \
  if (d == D_ && g8 == (G_ == 8)) {                                                \
    return meter ? LaunchPipelined<C, D_, G_, true>(p, plan, grid, stream)         \
                 : LaunchPipelined<C, D_, G_, false>(p, plan, grid, stream);       \
  }
  WITCERT_PIPE_CASE(64, 4)
  WITCERT_PIPE_CASE(64, 8)
  WITCERT_PIPE_CASE(128, 4)
  WITCERT_PIPE_CASE(128, 8)
#undef WITCERT_PIPE_CASE
  return CudaStatus::Error("MeteredDecodeCuda: head_dim must be 64 or 128, got " + std::to_string(d));
}

}  // namespace witcert::cuda_kv
