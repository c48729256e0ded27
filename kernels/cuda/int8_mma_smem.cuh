// The tensor-core int8 decode kernel's shared memory (metered_decode_int8_mma.cuh): its constants,
// the stage layout and the host's plan of the dynamic region (the host and the kernel agree on
// both), the code chunk swizzle, int8-dither's dynamic block, the static block, and the query
// prologue that fills its digits. The lane mappings these serve are in the kernel's header.
#pragma once

#include <cstdint>

#include "kernels/cuda/int8_mma_ops.cuh"
#include "kernels/cuda/metered_decode_cuda.h"
#include "kernels/cuda/paged_kv_cuda.h"

namespace witcert::cuda_kv {

constexpr int kMmaThreads = 256, kMmaWarps = 8, kMmaStageTokens = 128, kMmaRing = 3;
constexpr int kMmaD = 128, kMmaG = 4;
constexpr int kMmaCodeBytes = kMmaStageTokens * kMmaD;  // int8 codes of one stage
static_assert(kSplitAlignTokens % kMmaStageTokens == 0, "splits start on a stage");

// Byte offsets inside one stage (the host plan and the kernel agree on them; each 16-byte
// aligned, B = 8).
struct MmaStageLayout {
  int32_t codes, sc0, sc1, kwit, kunit, vsum, bytes;
};
__host__ __device__ inline MmaStageLayout MakeMmaStageLayout(int32_t nb) {
  MmaStageLayout s;
  int32_t o = 0;
  s.codes = o; o += kMmaCodeBytes;               // [128, 128] int8, swizzled chunks
  s.sc0 = o;   o += kMmaStageTokens * 2;         // [128] bf16: K scales (K stage), V (V stage)
  s.sc1 = o;   o += kMmaStageTokens * 2;         // [128] bf16: V scales (K stage), K (V, dither meter)
  s.kwit = o;  o += kMmaStageTokens * nb;        // [128, B] uint8 K band codes (V stage, meter)
  s.kunit = o; o += kMmaStageTokens * 2;         // [128] bf16 K band units (V stage, meter)
  s.vsum = o;  o += kMmaStageTokens * 4;         // [128, 2] bf16 V summaries ρ, ν (V stage, meter)
  s.bytes = o;
  return s;
}

// int8-dither's shared state, in the dynamic region (so the int8-rtn kernel's static block and
// its speed stay as they were): the K pass's token hashes, double-buffered as in the pipelined
// kernel, the Tier B coefficient per head, and for the split-max form each head's ε̂ maximum
// and each warp's ρ maximum.
struct MmaDitherSmem {
  uint64_t thash[2][kMmaStageTokens];
  float tierb[kMmaG];
  float eps_split[kMmaG];
  float rmax[kMmaWarps];
};

struct MmaSmemPlan {
  MmaStageLayout stage;
  int32_t logits_off, bt_off, bt_entries, dither_off;
  size_t bytes;
};
inline MmaSmemPlan MakeMmaSmemPlan(const PagedKvLayout& L, int32_t lcap) {
  MmaSmemPlan p;
  p.stage = MakeMmaStageLayout(L.num_bands);
  p.logits_off = kMmaRing * p.stage.bytes;
  // logits [G, lcap] fp32 (the output reduction goes in the ring).
  const int64_t lf = int64_t{kMmaG} * lcap;
  p.bt_off = p.logits_off + static_cast<int32_t>(4 * lf);
  p.bt_entries = (lcap + 2 * kMmaStageTokens) / L.block_size + 2;
  p.bytes = static_cast<size_t>(p.bt_off) + 4 * static_cast<size_t>(p.bt_entries);
  p.dither_off = static_cast<int32_t>((p.bytes + 15) / 16 * 16);
  if (L.scheme == KvScheme::kInt8Dither) p.bytes = p.dither_off + sizeof(MmaDitherSmem);
  return p;
}

__device__ __forceinline__ int MmaSwizzle(int j) { return ((j & 3) << 1) | ((j >> 2) & 1); }

struct MmaSmem {
  int8_t qdig[4][kMmaG][kMmaD];             // query digits [digit, head, channel]
  uint32_t pdig[4][4][kMmaG][8];            // weight digits [k-step, digit, head, 32 tokens]
  uint32_t qbn16[kMmaG][4];                 // Tier A's band factors as 16-bit digits [head, band pair]
  float qbn_scale[kMmaG];                   // their unit per head (BandFactorDigits)
  double eta_a[kMmaG], eta_b[kMmaG];        // η's query coefficients (IntDigitEtaCoef) per head
  float qscale[kMmaG];
  int32_t qbad[kMmaG];
  float m[kMmaG];
  float eta[kMmaG];
  float red[kMmaWarps][kMmaG];
  float smax[kMmaWarps][2];                 // K, V scale maxima per warp
  float vscale_mul, vscale_out;             // 2^{6−kV}, 2^{kV−6}
  float vmax[kMmaWarps];
  // [warps, heads] the warp's certificate sums per head (MmaHeadSums, raw storage).
  alignas(8) unsigned char wsum_raw[kMmaWarps][kMmaG][32];
};

// Query digits and the split's scalars: warp g < 4 owns query head g (its lane's channels qv).
__device__ __forceinline__ void MmaQueryPrologue(const float (&qv)[4], int lane, int g, float inv_sqrt_d,
                                                 MmaSmem& sm) {
  const QueryDigitScalars r = SplitQueryDigits(qv, lane, inv_sqrt_d, &sm.qdig[0][g][0], kMmaG * kMmaD);
  if (lane == 0) {
    sm.qbad[g] = r.bad;
    sm.qscale[g] = r.qscale;
  }
}

}  // namespace witcert::cuda_kv
