// Building blocks of the pipelined decode kernel (metered_decode_pipelined.cuh): the
// shared-memory stage layout and ring plan (host and device agree on them), the dynamic shared
// memory that holds a kernel at two CTAs per SM, the cp.async wrappers (from cp_async.cuh),
// shared-memory chunk loads, and the reduce-scatter butterfly of the G dot products.
//
// Why 64-token stages aligned to absolute positions: every 8-token group then lies in one
// paged block (block_size ≥ 8), so its codes, scales, key band witnesses (8·B code bytes and
// 8 bf16 units) and value summaries (8 × 4 bytes) are contiguous runs which a handful of
// 16-byte cp.async copies move (8-byte ones for the band codes when B is odd: 8·B bytes).
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/decode_common.cuh"
#include "kernels/cuda/pipe_stage_geometry.h"
#include "kernels/cuda/tc8_layout.h"

namespace witcert::cuda_kv {

static_assert(kSplitAlignTokens % kStageTokens == 0, "splits start on a stage");

// Ring depth: about 48 KB of codes per CTA in the ring (two CTAs per SM keep ≥ 32 KB per SM
// in flight, what ~4.8 TB/s × ~1 µs of latency needs across 132 SMs), 2 to 4 stages. kivi2's
// 2-bit stages hold less (~10 KB per CTA in flight at 4), but its kernel is bound by instructions,
// not loads: six stages measured 0.3-3.5% slower with the meter and no faster without it on an
// H100 (bench/RESULTS.md, twenty-fourth session).
__host__ __device__ constexpr int PipeStages(int bits_per_channel, int head_dim) {
  const int stage_code_bytes = kStageTokens * bits_per_channel * head_dim / 8;
  const int s = 49152 / stage_code_bytes;
  return s < 2 ? 2 : (s > 4 ? 4 : s);
}

__host__ __device__ constexpr int RoundUp16(int x) { return (x + 15) / 16 * 16; }

// Byte offsets inside one stage of kStageTokens tokens (each 16-byte aligned).
struct StageLayout {
  int32_t codes, scales, kscales, kwit, kunit, vsum, kparams, bytes;
};
// nscale: scale words per vector (kivi2: a value's fp16 (zero, scale), 2); kparam_bytes: a
// (block, KV head)'s key group parameters (kivi2: 4·d bytes; 0 for every other scheme).
__host__ __device__ inline StageLayout MakeStageLayout(int32_t code_bytes, int32_t nscale, int32_t nb,
                                                       int32_t kparam_bytes) {
  StageLayout s;
  int32_t o = 0;
  s.codes = o;   o += kStageTokens * code_bytes;              // [64, code_bytes]
  s.scales = o;  o += RoundUp16(kStageTokens * 2 * nscale);   // [64, nscale] bf16 (kivi2 V: fp16 pairs)
  s.kscales = o; o += RoundUp16(kStageTokens * 2 * nscale);   // [64, nscale] K scales (Tier B)
  s.kwit = o;    o += RoundUp16(kStageTokens * nb);           // [64, B] uint8 K band codes
  s.kunit = o;   o += kStageTokens * 2;                       // [64] bf16 K band units
  s.vsum = o;    o += kStageTokens * 4;                       // [64, 2] bf16 V summaries (ρ, ν)
  s.kparams = o; o += kStageGroups * RoundUp16(kparam_bytes); // [8 groups, kparam_bytes] K group parameters
  s.bytes = o;
  return s;
}

// Dynamic shared memory of the pipelined kernel: ring, logits (later the output
// reduction), the split's group vector table and, where blocks may be read exact (kivi2), the
// groups' exact-cache slots. Offsets in bytes.
struct PipeSmemPlan {
  StageLayout stage;
  int32_t stages, logits_off, gvec_off, gvec_entries, gexact_off;
  size_t bytes;
};
inline PipeSmemPlan MakePipeSmemPlan(const PagedKvLayout& L, int32_t gmax, int32_t lcap) {
  PipeSmemPlan p;
  const bool group_keys = L.group_keys();  // kivi2: the V stages carry each value's (zero, scale)
  p.stage = MakeStageLayout(L.code_bytes(), L.scales_per_vector(group_keys), L.num_bands,
                            2 * L.group_params_per_block());
  p.stages = PipeStages(SchemeInfo(L.scheme).bits_per_channel, L.head_dim);
  p.logits_off = p.stages * p.stage.bytes;
  const int64_t lf = std::max<int64_t>(int64_t{gmax} * lcap, int64_t{kWarps} * gmax * L.head_dim);
  // gvec [8-token groups of the split's stages] int32 (FillGroupVectors), then gexact alike
  // (the groups' exact-cache slots, FillGroupVectors too; group-keyed schemes only).
  p.gvec_off = p.logits_off + static_cast<int32_t>(4 * lf);
  p.gvec_entries = (lcap + 2 * kStageTokens) / 8 + 2;
  p.gexact_off = p.gvec_off + 4 * p.gvec_entries;
  p.bytes = static_cast<size_t>(p.gexact_off) + (group_keys ? 4 * static_cast<size_t>(p.gvec_entries) : 0);
  return p;
}

// Dynamic shared memory that keeps `kernel` at two CTAs per SM: short splits need little, and an
// instantiation with few registers would otherwise take three, which left SMs idle beside
// crowded ones when the decode launched behind the KV write (the 8B step with fp16 KV, 8k:
// bench/RESULTS.md sixteenth session). 0 where the device cannot be queried.
inline size_t TwoCtasPerSmBytes(const void* kernel) {
  int dev = 0, per_sm = 0, reserved = 0;
  cudaFuncAttributes fa{};
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess ||
      cudaFuncGetAttributes(&fa, kernel) != cudaSuccess) {
    return 0;
  }
  const int64_t need = int64_t{per_sm} / 3 + 1 - static_cast<int64_t>(fa.sharedSizeBytes) - reserved;
  return static_cast<size_t>(need > 0 ? need : 0);
}

using cuda_copy::CpAsync16;
using cuda_copy::CpAsync16Shared;
using cuda_copy::CpAsync8;
using cuda_copy::CpAsyncCommit;
using cuda_copy::CpAsyncWait;

// `BYTES` bytes from shared memory (generic pointer, suitably aligned).
template <int BYTES>
__device__ __forceinline__ void LoadSmemChunk(const uint8_t* p, uint32_t (&w)[kChunkWords<BYTES>]) {
  if constexpr (BYTES == 2) {
    w[0] = *reinterpret_cast<const uint16_t*>(p);
  } else if constexpr (BYTES >= 16) {
#pragma unroll
    for (int i = 0; i < BYTES / 16; ++i) {
      const uint4 a = reinterpret_cast<const uint4*>(p)[i];
      w[4 * i] = a.x; w[4 * i + 1] = a.y; w[4 * i + 2] = a.z; w[4 * i + 3] = a.w;
    }
  } else if constexpr (BYTES == 8) {
    const uint2 a = *reinterpret_cast<const uint2*>(p);
    w[0] = a.x; w[1] = a.y;
  } else {
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  }
}

__device__ __forceinline__ uint32_t Uint4Word(const uint4& u, int i) {
  return i == 0 ? u.x : (i == 1 ? u.y : (i == 2 ? u.z : u.w));
}

// Reduce-scatter over the LPT lanes of a token: on return the lane holds the full sum of
// v[h] for h = the returned head index. Lanes with (part & (LPT/G − 1)) != 0 hold copies.
template <int G, int LPT>
__device__ __forceinline__ float ReduceScatter(float (&v)[G], int part, int* head) {
  static_assert(LPT >= G, "reduce-scatter needs at least G lanes per token");
  int h = 0;
#pragma unroll
  for (int r = 0, n = G; n > 1; ++r, n >>= 1) {
    const int o = LPT >> (r + 1);
    const bool up = (part & o) != 0;
#pragma unroll
    for (int k = 0; k < n / 2; ++k) {
      const float send = up ? v[k] : v[k + n / 2];
      const float keep = up ? v[k + n / 2] : v[k];
      v[k] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
    if (up) h += n / 2;
  }
  float s = v[0];
#pragma unroll
  for (int o = LPT / G / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  *head = h;
  return s;
}

}  // namespace witcert::cuda_kv
