// The tensor-core metered decode kernel for int8-rtn and int8-dither KV (d = 128, up to 4 query
// heads per KV head): the default for those schemes; other schemes and shapes use the
// pipelined kernel.
//
// Why: the pipelined kernel is bound by instruction issue, not bytes (bench/RESULTS.md): per
// token and lane it spends ~95 warp-instructions on fp32 FMAs, int8→fp32 converts and
// reductions, while 4 TB/s leaves ~68. Here both products run on int8 tensor cores
// (mma.m16n8k32 s8·s8→s32), which are EXACT, so the codes are fed as stored, unconverted:
//  * q·k: the query is split into four base-128 int8 digits (kernels/meter/int_digit_dot.h);
//    rows of the A operand are (head, digit), the B operand is the K codes. The four exact
//    int32 dots are combined by three fmas; the logit rounding η is bounded in that header
//    (≈ 20× tighter than the fp32 dot's), so the certificate stays sound.
//  * p·v: the weights w_t·s_t (V scale folded in) are split the same way into digits relative
//    to a power of two above the split's largest V scale; the int32 accumulators are exact.
//    This is the output only (not part of the certificate): a weight's digits miss it by ≤ 2^-22
//    where the largest weight maps below 64, i.e. ≤ 2^-28 of that weight per token, below the
//    fp32 reference's own rounding.
//  * int8-dither (DITHER): keys are x = m − ξ with ξ regenerated per 4 channels from the dither
//    hash (kernels/meter/dither_hash.h). The K pass runs the query digits against the codes
//    and against the dither bytes (4 more MMAs per tile), and combines F_j = 512·Dm_j − 2·De_j − S_j
//    (kernels/meter/int_digit_dot.h, IntDigitEtaDither) where it combined D_j. Values are
//    not dithered, so the V pass is int8-rtn's. The meter adds Tier B, ε̂ = min(ε, u_t).
//  * int8-dither, Tier B's other forms (FORM, meter::TierBForm; MeteredDecodeCudaArgs::tier_b_form):
//    scale-only takes ε̂_t = u_t alone, token by token, so a V stage reads the K scales but no
//    key witness and a token skips Tier A's digits. Split-max also takes ε̂_t = u_t, and the
//    split's A − 1 and value sums from its largest u_t and ρ_t (meter::SetSplitMaxSums). The
//    largest u_t is C·(the split's largest K scale), which pass 1 takes anyway for η, so a V
//    stage reads no key witness and no K scales, and a token's meter work is two maxima and a
//    finiteness test.
// Everything else — the two-pass split (logits in shared memory, exact split max before any
// sum), the certificate terms per (head, token), the partial layout — is the pipelined
// kernel's, so the merge kernel and FinalizeCert are shared unchanged.
//
// Layout and lane mapping (m16n8k32; gid = lane/4, tig = lane%4; PTX fragment layouts):
//  * A stage holds 128 tokens; token j's 128 code bytes are 8 16-byte chunks stored at chunk
//    position r ^ f(j), f(j) = ((j&3)<<1) | ((j>>2)&1): both passes' 16-byte shared loads are
//    then free of bank conflicts (the V pass's 8-byte loads too).
//  * K pass: n-tile t = 8 tokens, column n ↔ token 8t + (n>>1) + 4(n&1). Logical k of k-step
//    s ↔ channel (k%16/4)·32 + 8s + (k/16)·4 + k%4, so lane tig reads its token's channels
//    [32·tig, 32·tig+32) as two chunks and every B register is one code word as stored.
//  * V pass: warp w takes k-step w%4 (32 tokens) and channel half w/4; logical k ↔ token
//    (k%16/4) + 4·(k%4) + 16·(k/16), column n of tile i ↔ channel 64·half + 8n + i. Lane
//    (n, tig) reads 8 channels of 8 tokens and transposes bytes with prmt (8 per 4 registers).
//  * Weights step: thread = (token, head pair): the token's key band codes c_b and unit U, and ρ
//    and the vmax candidate ν ≥ ‖ṽ‖ + ρ read from its value summary (kernels/meter/witness_format.h:
//    no per-token ‖ṽ‖), then ε̂ / weight / digits / certificate terms per head. Tier A's
//    Σ_b f_b·c_b runs in integers: the head's band factors f_b as 16-bit digits (rounded up),
//    four dp2a against the 8 code bytes, one conversion and two products rounded up
//    (TierAEpsilonOfDigits): in the source, 14 operations a token for two heads where the fp32
//    form had 34 (1.5–2% off the metered kernel, bench/RESULTS.md fourteenth session). The value loop then
//    does nothing but MMAs.
//  * A rows: row gid (gid < 4: head gid digit 0, else head gid−4 digit 2), row gid+8 the next
//    digit, so lane gid holds digits {0,1} and lane gid+4 digits {2,3} of one head.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/int8_mma_ops.cuh"
#include "kernels/cuda/int8_mma_smem.cuh"
#include "kernels/cuda/mma_head_sums.cuh"
#include "kernels/cuda/pipe_stage.cuh"
#include "kernels/cuda/tier_a_digits.cuh"
#include "kernels/meter/int_digit_dot.h"
#include "kernels/meter/tier_b_form.h"

namespace witcert::cuda_kv {

template <bool METER, bool DITHER, meter::TierBForm FORM>
__global__ void __launch_bounds__(kMmaThreads, 2) Int8MmaDecodeKernel(const DecodeParams p, const MmaSmemPlan plan) {
  constexpr int D = kMmaD, G4 = kMmaG, ST = kMmaStageTokens;
  static_assert(FORM == meter::TierBForm::kPerToken || (METER && DITHER), "Tier B's forms are int8-dither's, meter on");
  constexpr bool SPLIT_MAX = FORM == meter::TierBForm::kSplitMax;
  constexpr bool kKeyWitness = METER && meter::TierBFormReadsKeyWitness(FORM);  // Tier A's band codes and units
  // The ring starts on a 128-byte boundary whatever sizeof(MmaSmem) is: with 16-byte alignment
  // the kernel's speed moved with the static block's size (bench/RESULTS.md, 2026-12-03).
  extern __shared__ __align__(128) uint8_t dsm[];
  __shared__ MmaSmem sm;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int split = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
  const PagedKvLayout& L = p.layout;
  constexpr int32_t nb = 8;  // witness bands (TensorCoreDecodeSupports)
  const int32_t hkv = L.num_kv_heads, bs = L.block_size, G = p.q_per_kv;
  const int h0 = kvh * G;
  // The query's loads first, unless the kernel before may still be writing it: nothing they read
  // depends on the split, so their latency overlaps the context length's and the block table's.
  float qv[4];
  auto load_query = [&] {
    if (warp < G4) {
      const float* qg = p.q + (static_cast<int64_t>(seq) * p.num_q_heads + h0 + (warp < G ? warp : 0)) * D;
      LoadQueryLane(qg, warp < G, lane, qv);
    }
  };
  if (!p.overlap_previous) load_query();
  const SplitRange range = BeginSplit<D>(p, seq, split, kvh, tid);
  if (!range.run) return;
  const int64_t begin = range.begin, end = range.end;
  const MmaStageLayout& sl = plan.stage;
  uint8_t* ring = dsm;
  float* logits = reinterpret_cast<float*>(dsm + plan.logits_off);  // [G4, lcap]
  int32_t* btl = reinterpret_cast<int32_t*>(dsm + plan.bt_off);      // [bt_entries]
  MmaDitherSmem& dsm_d = *reinterpret_cast<MmaDitherSmem*>(dsm + plan.dither_off);  // DITHER only
  const int64_t begin_al = begin / ST * ST;
  const int32_t n_st = static_cast<int32_t>((end - begin_al + ST - 1) / ST);
  const int64_t blk0 = begin_al >> p.bs_shift;
  // Token positions below are int32 offsets from begin_al (a split is ≤ lcap tokens).
  const int32_t t_lo = static_cast<int32_t>(begin - begin_al), t_hi = static_cast<int32_t>(end - begin_al);
  const int32_t base = static_cast<int32_t>(begin_al), bmask = bs - 1, blk0_in = static_cast<int32_t>(blk0);
  const int32_t* bt = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks;
  {
    const int64_t nblk = ((end - 1) >> p.bs_shift) - blk0 + 1;
    for (int i = tid; i < nblk; i += kMmaThreads) btl[i] = bt[blk0 + i];
  }
  const float inv_sqrt_d = 1.0f / sqrtf(static_cast<float>(D));
  __syncthreads();  // btl

  // ---- the stage loader: stage k < n_st reads K (+ K and V scales), k ≥ n_st reads V
  // (+ the K band witnesses and V summaries). 16 threads per 8-token group (16 groups = 256
  // threads): thread (grp, q) looks its group up once and copies code chunks q + 16i (token
  // 2i + q/8, chunk q%8), for q < 2 the scale chunk(s), and for 8 ≤ q < 15 one witness chunk:
  // the group's band codes (64 bytes, q 8-11), units (16 bytes, q 12) or summaries (32 bytes,
  // q 13-14).
  const int ld_grp = tid >> 4, ld_q = tid & 15;
  const int ld_tb = ld_q >> 3, ld_r = ld_q & 7;
  // Vector index of the thread's group's first token in stage k (< 2^31: TensorCoreDecodeSupports),
  // 0 where the group is outside the split. issue(k) takes it from the previous call, which
  // looked it up, so the block-table read's latency is off the path from barrier to copies
  // (ncu: the loader's longest stall was that read).
  auto group_vector = [&](int k) -> int32_t {
    const int32_t t0 = ST * (k >= n_st ? k - n_st : k) + ld_grp * 8;
    if (k >= 2 * n_st || !(t0 < t_hi && t0 + 8 > t_lo)) return 0;
    const int32_t pos = base + t0;
    const int32_t blk = btl[(pos >> p.bs_shift) - blk0_in];
    return ((blk * hkv + kvh) << p.bs_shift) + (pos & bmask);
  };
  int32_t v0_next = 0;  // group_vector(k) for the next issue(k); set once btl is loaded
  // What does not change from call to call is set here once (ncu: the loader's per-call address
  // arithmetic was over a third of the kernel's instructions). Stage addresses are 32-bit
  // shared-window offsets; calls come with k = 0, 1, 2, … so the ring slot advances by one.
  // Code chunk i (token 2i + q/8 of the group) lands at chunk position r ^ MmaSwizzle(2i + q/8)
  // = (r ^ 2·(q/8)) ^ {0, 4, 1, 5}[i] of its row (the swizzle's bits do not overlap).
  const uint32_t ring_s = static_cast<uint32_t>(__cvta_generic_to_shared(ring));
  const uint32_t code_row = sl.codes + (ld_grp * 8 + ld_tb) * D;  // + 2i·D for chunk i
  const uint32_t code_chunk = static_cast<uint32_t>(ld_r ^ (ld_tb << 1)) << 4;
  const int32_t code_src = ld_tb * D + ld_r * 16;
  // Scales: K stage: q 0 copies K scales to sc0, q 1 V scales to sc1; V stage: q 0 V scales to
  // sc0 and, for int8-dither's Tier B, q 1 K scales to sc1.
  constexpr bool kVStageKScales = METER && DITHER && !SPLIT_MAX;
  const uint32_t scale_dst = (ld_q == 0 ? sl.sc0 : sl.sc1) + ld_grp * 16;
  // Witnesses (meter, V stage, q 8-14): band codes (r < 4), units (r 4) or summaries (r 5-6);
  // Tier B's scale-only and split-max forms read the summaries only.
  const bool wit_role = METER && ld_tb && ld_r < 7 && (kKeyWitness || ld_r >= 5);
  const int32_t wit_stride = ld_r < 4 ? nb : (ld_r == 4 ? 2 : 4);
  const uint32_t wit_dst = ld_r < 4 ? sl.kwit + ld_grp * 8 * nb + ld_r * 16
                                    : (ld_r == 4 ? sl.kunit + ld_grp * 16 : sl.vsum + ld_grp * 32 + (ld_r - 5) * 16);
  const int32_t wit_src = ld_r < 4 ? ld_r * 16 : (ld_r == 4 ? 0 : (ld_r - 5) * 16);
  uint32_t stage_next = ring_s;  // the next call's stage
  auto issue = [&](int k) {
    const int32_t v0 = v0_next;
    v0_next = group_vector(k + 1);
    const uint32_t st = stage_next;
    stage_next = st == ring_s + (kMmaRing - 1) * sl.bytes ? ring_s : st + sl.bytes;
    if (k < 2 * n_st) {
      const bool isv = k >= n_st;
      const int32_t t0 = ST * (isv ? k - n_st : k) + ld_grp * 8;  // offset from begin_al
      const bool ok = t0 < t_hi && t0 + 8 > t_lo;
      const uint8_t* src = (isv ? p.kv.v_codes : p.kv.k_codes) + static_cast<int64_t>(v0) * D + code_src;
      constexpr uint32_t kChunkFlip[4] = {0, 4 << 4, 1 << 4, 5 << 4};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        CpAsync16Shared(st + code_row + 2 * i * D + (code_chunk ^ kChunkFlip[i]), src + 2 * i * D, ok);
      }
      if (ld_q < 2 && !(isv && ld_q == 1 && !kVStageKScales)) {
        const uint16_t* sc = isv == (ld_q == 0) ? p.kv.v_scales : p.kv.k_scales;
        CpAsync16Shared(st + scale_dst, reinterpret_cast<const uint8_t*>(sc) + static_cast<int64_t>(v0) * 2, ok);
      }
      if (wit_role && isv) {
        const uint8_t* base = ld_r < 4 ? p.kv.k_witness
                                       : (ld_r == 4 ? reinterpret_cast<const uint8_t*>(p.kv.k_witness_unit)
                                                    : reinterpret_cast<const uint8_t*>(p.kv.v_summary));
        CpAsync16Shared(st + wit_dst, base + static_cast<int64_t>(v0) * wit_stride + wit_src, ok);
      }
    }
    CpAsyncCommit();  // one group per call, possibly empty: keeps wait_group counting exact
  };
  // Launched to overlap the KV write (MeteredDecodeCudaArgs::overlap_previous): the first stages
  // stream before the wait, except in the split the write may still be changing.
  if (range.HoldsNewest()) cuda_launch::WaitForPreviousKernel();
  v0_next = group_vector(0);
#pragma unroll
  for (int k = 0; k < kMmaRing - 1; ++k) issue(k);
  cuda_launch::WaitForPreviousKernel();
  if (p.overlap_previous) load_query();

  // ---- prologue, while the first stages load: query digits (warps 0-3), band norms (meter,
  // warp 4, beside them rather than after head 0's digits on warp 0)
  if (warp < G4) MmaQueryPrologue(qv, lane, warp, inv_sqrt_d, sm);
  static_assert(G4 * nb <= 32 && kMmaWarps > G4, "one warp after the digit warps holds the band norms");
  // The band warp also takes each head's ‖q‖₁ and max|q| from its lanes, so η's query part
  // (IntDigitEtaCoef; the exponent is SplitQueryDigits' from the same max, and a query it marks
  // bad gets η = ∞ below whatever these say) and int8-dither's Tier B coefficient are ready
  // before pass 1 instead of between the passes, where they were on the CTA's serial path.
  if constexpr (METER) {
    if (warp == G4) {  // lane = g·nb + b
      const int g = lane / nb, b = lane % nb;
      float norm = 0.0f, amax = 0.0f;
      float a1 = 0.0f;  // ≥ Σ|q_c| over the band (fp32 rounded up: the shorter chain)
      if (g < G) {
        const float* qg = p.q + (static_cast<int64_t>(seq) * p.num_q_heads + h0 + g) * D;
        norm = QueryBandNorm<D>(qg, b, nb, L.interleaved, &a1, &amax);
      }
      if constexpr (kKeyWitness) {
        StoreBandFactorDigits(BandFactorDigitsOf((norm * inv_sqrt_d) * meter::EpsInflation(D, nb), nb), b,
                              sm.qbn16[g], &sm.qbn_scale[g]);
      }
      float raw[nb];  // int8-dither: the head's band norms, for Tier B
      if constexpr (DITHER) {
#pragma unroll
        for (int j = 0; j < nb; ++j) raw[j] = __shfl_sync(0xffffffffu, norm, g * nb + j);
      }
#pragma unroll
      for (int o = 1; o < nb; o <<= 1) {
        a1 += __shfl_xor_sync(0xffffffffu, a1, o);
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      }
      a1 *= 1.0f + 8.0f * meter::kUnitRoundoff;  // the three sums above (non-negative) and this product
      if (b == 0) {
        meter::IntDigitEtaCoef ec;
        int32_t k = 0;
        if (amax > 0.0f && amax <= 3.0e38f && DigitExponentInRange(amax, &k)) {
          ec = meter::IntDigitEtaCoefficients(DITHER ? meter::kIntDigitHornerCDither : meter::kIntDigitHornerC4, 4, a1, k,
                                              D, meter::DigitQueryScale(k, inv_sqrt_d));
        }
        sm.eta_a[g] = ec.a;
        sm.eta_b[g] = ec.b;
        if constexpr (DITHER) {
          dsm_d.tierb[g] =
              g < G ? TierBCoefficientFromNormsF<D>(raw, nb, a1, range.context, p.delta_loc, p.neg_log_delta) : 0.0f;
        }
      }
    }
  }
  __syncthreads();  // qdig, qbn16, qscale

  // Query A fragments for the 4 k-steps (see the header for the row/channel mapping).
  uint32_t qa[4][4];
  {
    const int head = gid & 3, dig = (gid >> 2) * 2;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const int c0 = tig * 32 + s * 8;
      qa[s][0] = *reinterpret_cast<const uint32_t*>(&sm.qdig[dig][head][c0]);
      qa[s][1] = *reinterpret_cast<const uint32_t*>(&sm.qdig[dig + 1][head][c0]);
      qa[s][2] = *reinterpret_cast<const uint32_t*>(&sm.qdig[dig][head][c0 + 4]);
      qa[s][3] = *reinterpret_cast<const uint32_t*>(&sm.qdig[dig + 1][head][c0 + 4]);
    }
  }
  const int my_head = gid & 3;  // lanes < 16 finish head gid's logits
  const float my_qscale = DITHER ? meter::DitherQueryScale(sm.qscale[my_head]) : sm.qscale[my_head];
  // int8-dither: S_j = Σ_c d_{j,c} of the lane's two A rows (digits dig, dig+1 of head gid&3),
  // from the fragments themselves (byte sums by dp4a, then over the 4 lanes of one gid); the
  // token hashes of stage 0 (then of stage k+1 during stage k; published by the barriers);
  // h1 = DitherHeadHash, each token's DitherTokenHashAt(h1, pos).
  int32_t dsum_lo = 0, dsum_hi = 0;
  uint64_t h1 = 0;
  if constexpr (DITHER) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      dsum_lo = __dp4a(static_cast<int>(qa[s][0]), 0x01010101, dsum_lo);
      dsum_lo = __dp4a(static_cast<int>(qa[s][2]), 0x01010101, dsum_lo);
      dsum_hi = __dp4a(static_cast<int>(qa[s][1]), 0x01010101, dsum_hi);
      dsum_hi = __dp4a(static_cast<int>(qa[s][3]), 0x01010101, dsum_hi);
    }
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) {
      dsum_lo += __shfl_xor_sync(0xffffffffu, dsum_lo, o);
      dsum_hi += __shfl_xor_sync(0xffffffffu, dsum_hi, o);
    }
    h1 = meter::DitherHeadHash(p.seed, static_cast<uint32_t>(p.layer), static_cast<uint32_t>(kvh));
  }
  auto stage_hashes = [&](int k) {  // K stage k's token hashes, thread = token
    if constexpr (DITHER) {
      if (tid < ST) {
        dsm_d.thash[k & 1][tid] = meter::DitherTokenHashAt(h1, static_cast<uint64_t>(int64_t{base} + ST * k + tid));
      }
    }
  };
  stage_hashes(0);

  // ---- pass 1: logits of the whole split, K and V scale maxima ----------------------------
  float mloc = -INFINITY, smaxk = 0.0f, smaxv = 0.0f;
  for (int k = 0; k < n_st; ++k) {
    CpAsyncWait<kMmaRing - 2>();
    __syncthreads();
    issue(k + kMmaRing - 1);
    if (k + 1 < n_st) stage_hashes(k + 1);
    const uint8_t* st = ring + (k % kMmaRing) * sl.bytes;
    const int32_t sb = ST * k;
    if (tid < ST) {  // scale maxima: thread = token
      const int32_t t = sb + tid;
      if (t >= t_lo && t < t_hi) {
        smaxk = meter::MaxAcc(smaxk, Bf16Bits(reinterpret_cast<const uint16_t*>(st + sl.sc0)[tid]));
        smaxv = meter::MaxAcc(smaxv, Bf16Bits(reinterpret_cast<const uint16_t*>(st + sl.sc1)[tid]));
      }
    }
#pragma unroll
    for (int u = 0; u < (ST / 8) / kMmaWarps; ++u) {
      const int t8 = warp + kMmaWarps * u;  // n-tile
      const int row = t8 * 8 + (gid >> 1) + 4 * (gid & 1);
      const uint8_t* rp = st + sl.codes + row * D;
      const int sw = MmaSwizzle(row);
      const uint4 c0 = *reinterpret_cast<const uint4*>(rp + (((2 * tig) ^ sw) << 4));
      const uint4 c1 = *reinterpret_cast<const uint4*>(rp + (((2 * tig + 1) ^ sw) << 4));
      int32_t acc[4] = {0, 0, 0, 0}, acc2[4] = {0, 0, 0, 0};  // two chains: more MMAs in flight
      MmaS8(acc, qa[0], c0.x, c0.y);
      MmaS8(acc2, qa[2], c1.x, c1.y);
      MmaS8(acc, qa[1], c0.z, c0.w);
      MmaS8(acc2, qa[3], c1.z, c1.w);
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] += acc2[i];  // exact: |D| < 2^24
      if constexpr (DITHER) {
        // The token's dither words for the lane's channels [32·tig, 32·tig + 32) (groups
        // 8·tig + i, i < 8), with each byte's top bit flipped: e = b − 128 as int8, in the
        // code words' order (c0 = groups 8tig..+3, c1 = +4..+7).
        const uint64_t th = dsm_d.thash[k & 1][row];
        const uint32_t lo = static_cast<uint32_t>(th) + static_cast<uint32_t>(8 * tig) * 0x9e3779b9u;
        const uint32_t hi = static_cast<uint32_t>(th >> 32);
        uint32_t e[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) e[i] = meter::Fmix32((lo + static_cast<uint32_t>(i) * 0x9e3779b9u) ^ hi) ^ 0x80808080u;
        int32_t de[4] = {0, 0, 0, 0};
        MmaS8(de, qa[0], e[0], e[1]);
        MmaS8(de, qa[1], e[2], e[3]);
        MmaS8(de, qa[2], e[4], e[5]);
        MmaS8(de, qa[3], e[6], e[7]);
        acc[0] = meter::DitherDigitTerm(acc[0], de[0], dsum_lo);
        acc[1] = meter::DitherDigitTerm(acc[1], de[1], dsum_lo);
        acc[2] = meter::DitherDigitTerm(acc[2], de[2], dsum_hi);
        acc[3] = meter::DitherDigitTerm(acc[3], de[3], dsum_hi);
      }
      // Lanes ≥ 16 hold digits 2, 3: fold them and pass on.
      const float pa = fmaf(static_cast<float>(acc[2]), 0.0078125f, static_cast<float>(acc[0]));
      const float pb = fmaf(static_cast<float>(acc[3]), 0.0078125f, static_cast<float>(acc[1]));
      const float qa23 = __shfl_xor_sync(0xffffffffu, pa, 16);
      const float qb23 = __shfl_xor_sync(0xffffffffu, pb, 16);
      if (gid < 4 && my_head < G) {
        const float ta = fmaf(fmaf(qa23, 0.0078125f, static_cast<float>(acc[2])), 0.0078125f, static_cast<float>(acc[0]));
        const float tb = fmaf(fmaf(qb23, 0.0078125f, static_cast<float>(acc[3])), 0.0078125f, static_cast<float>(acc[1]));
        const int ja = t8 * 8 + tig, jb = ja + 4;  // columns 2tig, 2tig+1
        const uint16_t* ks = reinterpret_cast<const uint16_t*>(st + sl.sc0);
        const float la = (ta * Bf16Bits(ks[ja])) * my_qscale;
        const float lb = (tb * Bf16Bits(ks[jb])) * my_qscale;
        const int32_t tA = sb + ja, tB = sb + jb;
        if (tA >= t_lo && tA < t_hi) {
          logits[my_head * p.lcap + (tA - t_lo)] = la;
          mloc = fmaxf(mloc, la);
        }
        if (tB >= t_lo && tB < t_hi) {
          logits[my_head * p.lcap + (tB - t_lo)] = lb;
          mloc = fmaxf(mloc, lb);
        }
      }
    }
  }
  // Split max per head: the 4 lanes of one gid, then across warps.
  mloc = fmaxf(mloc, __shfl_xor_sync(0xffffffffu, mloc, 1));
  mloc = fmaxf(mloc, __shfl_xor_sync(0xffffffffu, mloc, 2));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    smaxk = fmaxf(smaxk, __shfl_xor_sync(0xffffffffu, smaxk, o));
    smaxv = fmaxf(smaxv, __shfl_xor_sync(0xffffffffu, smaxv, o));
  }
  if (tig == 0 && gid < 4) sm.red[warp][gid] = mloc;
  if (lane == 0) {
    sm.smax[warp][0] = smaxk;
    sm.smax[warp][1] = smaxv;
  }
  __syncthreads();
  if (tid < G4) {
    float m = -INFINITY;
    for (int w = 0; w < kMmaWarps; ++w) m = fmaxf(m, sm.red[w][tid]);
    sm.m[tid] = m > -INFINITY ? m : 0.0f;  // all logits NaN: the partial is marked bad later
    float sk = 0.0f;
    for (int w = 0; w < kMmaWarps; ++w) sk = fmaxf(sk, sm.smax[w][0]);
    if (METER && tid < G) {
      meter::IntDigitEtaCoef ec;
      ec.a = sm.eta_a[tid];
      ec.b = sm.eta_b[tid];
      sm.eta[tid] = sm.qbad[tid] ? INFINITY : meter::IntDigitEtaAt(ec, sk);
      if constexpr (SPLIT_MAX) {
        // max_t u_t: the per-token product C·(s_t·(1 + 4u)) is monotone in s_t, rounding included.
        const float e = dsm_d.tierb[tid] * (sk * (1.0f + 4 * meter::kUnitRoundoff));
        dsm_d.eps_split[tid] = e >= 0.0f ? e : INFINITY;  // NaN (a bad query): vacuous
      }
    }
    if (tid == 0) {
      float sv = 0.0f;
      for (int w = 0; w < kMmaWarps; ++w) sv = fmaxf(sv, sm.smax[w][1]);
      int kv = sv > 0.0f && sv <= 3.0e38f ? meter::DigitExponent(sv) : 0;
      kv = kv < -100 ? -100 : kv;
      sm.vscale_mul = sv > 0.0f && sv <= 3.0e38f ? ldexpf(1.0f, 6 - kv) : 0.0f;
      sm.vscale_out = ldexpf(1.0f, kv - 6);
    }
  }
  __syncthreads();  // sm.m, sm.eta, vscale

  // ---- pass 2: per V stage, (a) weights, digits, meter; (b) values by MMA ------------------
  const int tok = tid >> 1, hp = tid & 1;  // weights step: token, head pair {2hp, 2hp+1}
  const int ha = 2 * hp, hb = 2 * hp + 1;
  const float ma = sm.m[ha], mb = sm.m[hb];
  const float tierb_a = DITHER && METER ? dsm_d.tierb[ha] : 0.0f, tierb_b = DITHER && METER ? dsm_d.tierb[hb] : 0.0f;
  const float vmul = sm.vscale_mul;
  // Digit position of this thread's token inside its k-step, as the A fragment reads it.
  const int pks = tok >> 5, prr = tok & 31;
  const int ppos = (prr >> 4) * 16 + (prr & 3) * 4 + ((prr >> 2) & 3);
  int32_t acc[8][4];
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0;
  MmaHeadSums cpa, cpb;  // heads ha, hb
  meter::EpsPowerSums epa, epb;  // their common tokens' A−1 terms (partial_sum.h), folded into b after the split
  float vmax = 0.0f;     // max over the thread's tokens in the split of ν
  float rmax = 0.0f;     // SPLIT_MAX: and of ρ
  uint32_t qd_a[nb / 2], qd_b[nb / 2];  // meter: Tier A's band factor digits of heads ha, hb
  float qs_a = 0.0f, qs_b = 0.0f;       // and their units
  if constexpr (kKeyWitness) {
#pragma unroll
    for (int j = 0; j < nb / 2; ++j) {
      qd_a[j] = sm.qbn16[ha][j];
      qd_b[j] = sm.qbn16[hb][j];
    }
    qs_a = sm.qbn_scale[ha];
    qs_b = sm.qbn_scale[hb];
  }
  const int vks = warp & 3, vhalf = warp >> 2;  // value loop: k-step, channel half
  // The value loop's byte offsets of row tig (+4e) in a k-step, for even and odd e.
  const int vchunk = (vhalf * 4 + (gid >> 1)) ^ (tig << 1);
  const int voff0 = tig * D + (vchunk << 4) + ((gid & 1) << 3);
  const int voff1 = tig * D + ((vchunk ^ 1) << 4) + ((gid & 1) << 3);
  for (int k = n_st; k < 2 * n_st; ++k) {
    CpAsyncWait<kMmaRing - 2>();
    __syncthreads();
    issue(k + kMmaRing - 1);
    const uint8_t* st = ring + (k % kMmaRing) * sl.bytes;
    const int32_t sb = ST * (k - n_st);
    {  // (a), branch-free but for the rare tokens that need Add's general arithmetic (ncu: the
      // branches of the per-token sums were most of this step's stalls). Every shared-memory
      // read below stays inside the stage and the logits, so masked tokens (not `in`) compute
      // on stale or zero-filled bytes and their results are selected away.
      const int32_t t = sb + tok;
      const bool in = t >= t_lo && t < t_hi;
      const bool act_a = in && ha < G, act_b = in && hb < G;
      const float sv = Bf16Bits(reinterpret_cast<const uint16_t*>(st + sl.sc0)[tok]);
      const int32_t li = min(max(t - t_lo, 0), p.lcap - 1);
      const float la = logits[ha * p.lcap + li];
      const float lb = logits[hb * p.lcap + li];
      const float ga = la - ma, gb = lb - mb;
      const float wa = act_a ? expf(ga) : 0.0f;
      const float wb = act_b ? expf(gb) : 0.0f;
      if constexpr (SPLIT_MAX) {
        // The value summary's maxima and the logits' finiteness; z as without the meter.
        const uint32_t vsum = reinterpret_cast<const uint32_t*>(st + sl.vsum)[tok];
        cpa.bad = cpa.bad || (act_a && !(fabsf(la) <= 3.0e38f));
        cpb.bad = cpb.bad || (act_b && !(fabsf(lb) <= 3.0e38f));
        cpa.z += wa;
        cpb.z += wb;
        rmax = in ? meter::MaxAcc(rmax, SummaryRho(vsum)) : rmax;
        vmax = in ? meter::MaxAcc(vmax, SummaryNu(vsum)) : vmax;
      } else if constexpr (METER) {
        // The token's value summary (ρ, ν) and, for Tier A, its key band bounds c_b·U; both lanes
        // of the pair read the same words (a broadcast). A masked token's bytes (zero-filled or
        // stale) only reach results that are selected away below.
        const uint32_t vsum = reinterpret_cast<const uint32_t*>(st + sl.vsum)[tok];
        float ea, eb;
        if constexpr (kKeyWitness) {
          const uint2 kc = *reinterpret_cast<const uint2*>(st + sl.kwit + tok * nb);
          const float unit = Bf16Bits(reinterpret_cast<const uint16_t*>(st + sl.kunit)[tok]);
          // ε = (Σ_b q'_b·c_b)·U·s_q: the band factors as digits q'_b ≥ ‖q_b‖/√d·EpsInflation / s_q
          // (BandFactorDigits), the sum exact in integers (four dp2a per head), then rounded up to
          // fp32 and by two products rounded up: no rounding falls below the prologue's factors,
          // whose own roundings EpsInflation covers (cert_math.h).
          ea = TierAEpsilonOfDigits(qd_a, kc, unit, qs_a);
          eb = TierAEpsilonOfDigits(qd_b, kc, unit, qs_b);
        }
        if constexpr (DITHER) {  // Tier B: u_t = C·s_t (the pipelined kernel's)
          const float ks = Bf16Bits(reinterpret_cast<const uint16_t*>(st + sl.sc1)[tok]) * (1.0f + 4 * meter::kUnitRoundoff);
          if constexpr (kKeyWitness) {  // per-token: ε̂ = min(ε, u_t)
            ea = tierb_a > 0.0f ? fminf(ea, tierb_a * ks) : ea;
            eb = tierb_b > 0.0f ? fminf(eb, tierb_b * ks) : eb;
          } else {  // scale-only: ε̂ = u_t (tierb 0: a zero query, u_t = 0; NaN, a bad query: ∞)
            const float ua = tierb_a * ks, ub = tierb_b * ks;
            ea = ua >= 0.0f ? ua : INFINITY;
            eb = ub >= 0.0f ? ub : INFINITY;
          }
        }
        const float rho = SummaryRho(vsum);
        const bool rare = (act_a && !meter::WeightedTokenIsCommonAtGap(la, ga, ea)) ||
                          (act_b && !meter::WeightedTokenIsCommonAtGap(lb, gb, eb));
        if (rare) {
          if (act_a) cpa.Add(la, wa, ma, ea, rho);
          if (act_b) cpb.Add(lb, wb, mb, eb, rho);
        } else {
          cpa.AddCommonPowers(act_a, wa, ea, rho, &epa);
          cpb.AddCommonPowers(act_b, wb, eb, rho, &epb);
        }
        vmax = in ? meter::MaxAcc(vmax, SummaryNu(vsum)) : vmax;  // NaN ignored, as PartialAddToken does
      } else {
        cpa.z += wa;
        cpb.z += wb;
      }
      // Digits of w·s_v relative to 2^{kV−6}. Rounding by the 1.5·2^23 shift (exact for
      // |x| < 2^22, ties to even as rintf) keeps it on the FMA pipe; the int8 digit is the low
      // byte of the shifted value's bits (two's complement of a small integer).
      int8_t* pd = reinterpret_cast<int8_t*>(&sm.pdig[pks][0][0][0]);
      float xa = wa * sv * vmul, xb = wb * sv * vmul;
      if (!(xa >= 0.0f && xa < 64.0f)) xa = 0.0f;  // NaN (bad partial) or an empty slot
      if (!(xb >= 0.0f && xb < 64.0f)) xb = 0.0f;
      constexpr float kShift = 12582912.0f;  // 1.5·2^23
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float ya = __fadd_rn(xa, kShift), yb = __fadd_rn(xb, kShift);
        const float da = __fsub_rn(ya, kShift), db = __fsub_rn(yb, kShift);
        pd[(j * G4 + ha) * 32 + ppos] = static_cast<int8_t>(__float_as_uint(ya) & 0xffu);
        pd[(j * G4 + hb) * 32 + ppos] = static_cast<int8_t>(__float_as_uint(yb) & 0xffu);
        xa = (xa - da) * 128.0f;
        xb = (xb - db) * 128.0f;
      }
    }
    __syncthreads();
    {  // (b) values: lane (n = gid, tig) reads channels [64·half + 8n, +8) of tokens tig + 4e
      uint2 v[8];
      const uint8_t* vb = st + sl.codes + vks * 32 * D;
#pragma unroll
      for (int e = 0; e < 8; ++e) {  // row tig + 4e: MmaSwizzle = (tig << 1) | (e & 1)
        v[e] = *reinterpret_cast<const uint2*>(vb + e * 4 * D + ((e & 1) ? voff1 : voff0));
      }
      uint32_t pa[4];
      const int head = gid & 3, dig = (gid >> 2) * 2;
      pa[0] = sm.pdig[vks][dig][head][tig];
      pa[1] = sm.pdig[vks][dig + 1][head][tig];
      pa[2] = sm.pdig[vks][dig][head][4 + tig];
      pa[3] = sm.pdig[vks][dig + 1][head][4 + tig];
      uint32_t lo[4], hi[4];
      Transpose4x4(v[0].x, v[1].x, v[2].x, v[3].x, lo);
      Transpose4x4(v[4].x, v[5].x, v[6].x, v[7].x, hi);
#pragma unroll
      for (int b = 0; b < 4; ++b) MmaS8(acc[b], pa, lo[b], hi[b]);
      Transpose4x4(v[0].y, v[1].y, v[2].y, v[3].y, lo);
      Transpose4x4(v[4].y, v[5].y, v[6].y, v[7].y, hi);
#pragma unroll
      for (int b = 0; b < 4; ++b) MmaS8(acc[4 + b], pa, lo[b], hi[b]);
    }
  }
  CpAsyncWait<0>();
  ReleaseSplitMerge();

  // ---- reductions: certificate partials (lanes of one parity share heads), vmax, outputs ----
  constexpr bool kTokenSums = METER && !SPLIT_MAX;  // b, c and the ε̂ max summed per token
  if constexpr (kTokenSums) {
    cpa.FoldPowerSums(epa);
    cpb.FoldPowerSums(epb);
  }
#pragma unroll
  for (int o = 16; o > 1; o >>= 1) {
    cpa.AddShfl<kTokenSums>(o);
    cpb.AddShfl<kTokenSums>(o);
  }
  if constexpr (METER) {
    const unsigned parity = (lane & 1) ? 0xaaaaaaaau : 0x55555555u;
    cpa.bad = MmaHeadSums::BadOf(cpa.bad, parity);
    cpb.bad = MmaHeadSums::BadOf(cpb.bad, parity);
    // vmax ∈ [0, ∞] (MaxAcc from 0, NaN ignored): as unsigned bits it orders as a float.
    vmax = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(vmax)));
    if constexpr (SPLIT_MAX) rmax = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(rmax)));
  }
  __syncthreads();  // every thread is done with the ring, logits and pdig
  static_assert(sizeof(MmaHeadSums) <= sizeof(sm.wsum_raw[0][0]), "wsum holds MmaHeadSums");
  if (lane < 2) {
    *reinterpret_cast<MmaHeadSums*>(sm.wsum_raw[warp][ha]) = cpa;
    *reinterpret_cast<MmaHeadSums*>(sm.wsum_raw[warp][hb]) = cpb;
  }
  if (lane == 0) sm.vmax[warp] = vmax;
  if (SPLIT_MAX && lane == 0) dsm_d.rmax[warp] = rmax;
  // The output reduction in the ring (free now: every copy has landed and every thread is past
  // the last stage): red [warps, 32 lanes, kRedRow] int32, lane row = 8 tiles × {acc 0, 2, 1, 3}
  // + 4 words of padding. The int4 stores of 8 consecutive lanes then cover all 32 banks, and
  // the reads below take {acc[par], acc[2 + par]} as one 8-byte word, a half-warp's 16 of them
  // in distinct banks (with [warps, tiles, lanes, 4] every read was, by that layout, an 8-way
  // conflict; ncu showed MIO as the batch-1 epilogue's largest stall).
  constexpr int kRedRow = 8 * 4 + 4;
  static_assert(kMmaWarps * 32 * kRedRow * 4 <= kMmaRing * kMmaCodeBytes, "the ring holds the reduction");
  int32_t* red = reinterpret_cast<int32_t*>(ring);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    *reinterpret_cast<int4*>(&red[(warp * 32 + lane) * kRedRow + i * 4]) =
        make_int4(acc[i][0], acc[i][2], acc[i][1], acc[i][3]);
  }
  __syncthreads();
  const int64_t cell0 = (static_cast<int64_t>(seq) * p.num_q_heads + h0) * p.num_splits + split;
  // The split's partial per head: warp 0's lane (head h, warp w) takes warp w's sums, and three
  // shuffle steps add them (a re-association, as SumPartialsSameMax: a warp without tokens adds
  // exact zeros). Serially over the 8 warps this was ~2000 cycles of every CTA's tail.
  static_assert(kMmaWarps == 8 && kMmaG * kMmaWarps == 32, "one lane per (head, warp)");
  if (warp == 0) {
    const int h = lane >> 3, w = lane & 7;
    MmaHeadSums s = *reinterpret_cast<const MmaHeadSums*>(sm.wsum_raw[w][h]);
    float vm = 0.0f;
#pragma unroll
    for (int o = 1; o < kMmaWarps; o <<= 1) s.AddShfl<kTokenSums>(o);
    float rm = 0.0f;
    if constexpr (METER) {
      s.bad = MmaHeadSums::BadOf(s.bad, 0xffu << (8 * h));
      vm = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(sm.vmax[w])));
      if constexpr (SPLIT_MAX) rm = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(dsm_d.rmax[w])));
    }
    if (w == 0 && h < G) {
      meter::CertPartial c = s.ToPartial(sm.m[h], t_hi - t_lo);
      c.m = sm.m[h];
      if (sm.qbad[h]) c.bad = true;
      if (METER) {
        c.vmax = vm;
        c.eta_max = fmaxf(c.eta_max, sm.eta[h]);
      }
      if (SPLIT_MAX && !c.bad) meter::SetSplitMaxSums(&c, dsm_d.eps_split[h], rm);
      p.parts[cell0 + static_cast<int64_t>(h) * p.num_splits] = c;
    }
  }
  const double vout21 = static_cast<double>(sm.vscale_out) * 4.76837158203125e-07;  // ·2^−21, exact
  for (int o = tid; o < G * D; o += kMmaThreads) {
    const int g = o / D, c = o % D;
    const int half = c >> 6, n = (c >> 3) & 7, i = c & 7, tg = n >> 1, par = n & 1;
    const int lane_lo = g * 4 + tg, lane_hi = (g + 4) * 4 + tg;
    long long d0 = 0, d1 = 0, d2 = 0, d3 = 0;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const int w = half * 4 + ks;
      const int2 lo = *reinterpret_cast<const int2*>(&red[(w * 32 + lane_lo) * kRedRow + i * 4 + 2 * par]);
      const int2 hi = *reinterpret_cast<const int2*>(&red[(w * 32 + lane_hi) * kRedRow + i * 4 + 2 * par]);
      d0 += lo.x;
      d1 += lo.y;
      d2 += hi.x;
      d3 += hi.y;
    }
    // Σ_j d_j·2^{−7j} as one integer in units of 2^{−21} (|d_j| < 2^33, so |T| < 2^55): one
    // conversion and one power-of-two scaling instead of four conversions and three fmas
    // (ncu: that double-precision tail had ~12% of a batch-1 × 8k launch's stall samples).
    const long long t = d0 * (1LL << 21) + d1 * (1LL << 14) + d2 * (1LL << 7) + d3;
    p.part_acc[(cell0 + static_cast<int64_t>(g) * p.num_splits) * D + c] =
        static_cast<float>(static_cast<double>(t) * vout21);
  }
}

template <bool METER, bool DITHER, meter::TierBForm FORM>
CudaStatus LaunchInt8Mma(const DecodeParams& p, const MmaSmemPlan& plan, dim3 grid, cudaStream_t stream) {
  auto kernel = Int8MmaDecodeKernel<METER, DITHER, FORM>;
  WITCERT_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(plan.bytes)));
  return cuda_launch::Launch(kernel, grid, dim3(kMmaThreads), plan.bytes, stream, p.overlap_previous, p, plan);
}

}  // namespace witcert::cuda_kv
