// The tensor-core path of the causal prefill attention (math and shapes in
// prefill_attention_cuda.h): a flash-attention-2-style kernel on mma.sync m16n8k16, fp16
// operands, fp32 accumulation.
//
// Structure (why):
// - A CTA of 8 warps owns a tile of query rows of one query head and walks key tiles of 64 up
//   to its causal limit. Each warp owns 16 or 32 rows (one or two 16-row MMA blocks):
//   - 16 rows (128 per CTA): the warp's Q fragments, scores and output all stay in
//     registers (228 regs at d=128; 128 at d=64, two CTAs per SM).
//   - 32 rows (256 per CTA): Q is re-read from shared memory each tile, but every K and V
//     fragment feeds two MMAs, which halves the ldmatrix traffic per MMA (255 regs at
//     d=128 with a few words spilled, 222 at d=64; one CTA per SM). On the H200 it is
//     ~25% faster for Llama shapes and ~8% for SmolLM2's at n ≥ 8k
//     (bench/decode_gpu/bench_prefill_attention), but has half the CTAs.
//   The default takes 32 rows unless its grid would not fill the GPU once (fewer than one
//   CTA per SM), where twice as many smaller CTAs spread the work wider.
//   Larger row tiles also cut the L2 traffic of re-reading fp32 K/V per CTA. The grid puts
//   the query heads of a KV group side by side and launches the last (longest) query tiles
//   first so the causal triangle drains evenly.
// - Inputs are fp32, so cp.async cannot land them as fp16: each thread loads its share of
//   the next K (then V) tile as float4 into registers before the current tile's QKᵀ (then
//   PV), and converts and stores it into the other shared-memory buffer afterwards. The load
//   latency hides behind a tile of MMAs, and one barrier per tile suffices.
// - Scores are in the log2 domain: q is multiplied by log2(e)/√d before its fp16 rounding,
//   so the online softmax is one exp2 per score. Rows are rescaled once per tile; the row
//   sum stays per thread until the end. P is rounded to fp16 in registers and feeds PV
//   directly (the C layout of two score tiles is the A layout of one k step, mma_f16.cuh).
// - Only tiles that reach past a 16-row block's first row are masked (the diagonal ones);
//   tiles past a warp's last row are skipped by that warp. Rows and keys past n are
//   zero-filled in shared memory (0·garbage could be NaN) and never stored.
// - Shared-memory rows are padded by 8 halves, so the 8 row addresses of an ldmatrix fall on
//   distinct banks. Shared memory per CTA: (rows + 4·64)·(d + 8)·2 bytes: 102 / 136 KiB at
//   d=128 (16 / 32 rows per warp), 54 / 72 KiB at d=64.
#include <cmath>
#include <cstdint>

#include <cuda_fp16.h>

#include "kernels/cuda/ops/mma_f16.cuh"
#include "kernels/cuda/ops/prefill_attention_paths.h"

namespace witcert {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockN = 64;               // keys per tile
constexpr int kScoreTiles = kBlockN / 8;  // 8-key MMA column tiles of a score block
constexpr int kRowPadHalves = 8;
constexpr int kMinBlockM = 16 * kWarps;    // the smaller query tile
constexpr int64_t kMaxQueryTiles = 65535;  // gridDim.y; so n < 2^23 fits the kernel's int rows

// kMBlocks: 16-row MMA blocks per warp. One keeps the warp's Q fragments in registers; two
// read Q from shared memory each tile but reuse every K/V fragment for both blocks.
template <int D, int kMBlocks>
struct MmaTile {
  static constexpr int kRowsPerWarp = 16 * kMBlocks;
  static constexpr int kBlockM = kWarps * kRowsPerWarp;  // query rows per CTA
  static constexpr bool kQInRegisters = kMBlocks == 1;
  static constexpr int kRowHalves = D + kRowPadHalves;  // shared-memory row pitch
  static constexpr int kVec4PerRow = D / 4;
  static constexpr int kRowsPerPass = kThreads / kVec4PerRow;  // rows one CTA-wide load covers
  static constexpr int kQPasses = kBlockM / kRowsPerPass;
  static constexpr int kQHalves = kBlockM * kRowHalves;
  static constexpr int kKvHalves = kBlockN * kRowHalves;
  // q [kBlockM, kRowHalves], k [2, kBlockN, kRowHalves], v [2, kBlockN, kRowHalves]
  static constexpr size_t kSmemBytes = sizeof(__half) * (kQHalves + 4 * kKvHalves);
  static_assert(kThreads % kVec4PerRow == 0 && kBlockN % kRowsPerPass == 0);
};

// float4 staging registers a thread holds for one K or V tile (the same for either tile shape).
template <int D>
constexpr int kKvPasses = kBlockN / MmaTile<D, 1>::kRowsPerPass;

// This thread's float4 share of rows [row0, row0 + kBlockN) of one head: rows ≥ n read as 0.
// head_base points at column 0 of that head in row 0.
template <int D>
__device__ __forceinline__ void LoadKvRows(float4 (&staged)[kKvPasses<D>],
                                           const float* __restrict__ head_base, int64_t stride,
                                           int row0, int n) {
  using Tile = MmaTile<D, 1>;
  const int col4 = threadIdx.x % Tile::kVec4PerRow;
  const int row = threadIdx.x / Tile::kVec4PerRow;
#pragma unroll
  for (int p = 0; p < kKvPasses<D>; ++p) {
    const int r = row0 + row + p * Tile::kRowsPerPass;
    staged[p] = r < n ? __ldg(reinterpret_cast<const float4*>(head_base + r * stride) + col4)
                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// Stores a staged share into a [kBlockN, kRowHalves] fp16 tile.
template <int D>
__device__ __forceinline__ void StoreKvRows(__half* tile, const float4 (&staged)[kKvPasses<D>]) {
  using Tile = MmaTile<D, 1>;
  const int col4 = threadIdx.x % Tile::kVec4PerRow;
  const int row = threadIdx.x / Tile::kVec4PerRow;
#pragma unroll
  for (int p = 0; p < kKvPasses<D>; ++p) {
    const float4 x = staged[p];
    *reinterpret_cast<uint2*>(tile + (row + p * Tile::kRowsPerPass) * Tile::kRowHalves + 4 * col4) =
        make_uint2(mma::PackHalf2(x.x, x.y), mma::PackHalf2(x.z, x.w));
  }
}

// grid = (Hq, query tiles), block = kThreads, dynamic smem = MmaTile<D, kMBlocks>::kSmemBytes.
template <int D, int kMBlocks>
__global__ void __launch_bounds__(kThreads, D == 64 && kMBlocks == 1 ? 2 : 1)
    PrefillAttentionMmaKernel(const float* __restrict__ q, int64_t q_stride,
                              const float* __restrict__ k, const float* __restrict__ v,
                              int64_t kv_stride, int n, int32_t group, float q_scale_log2,
                              float* __restrict__ out, int64_t out_stride) {
  using Tile = MmaTile<D, kMBlocks>;
  constexpr int kSteps = D / 16;  // k steps of QKᵀ; also pairs of 8-column output tiles
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* q_s = reinterpret_cast<__half*>(smem_raw);  // [kBlockM, kRowHalves]
  __half* k_s = q_s + Tile::kQHalves;                 // [2, kBlockN, kRowHalves]
  __half* v_s = k_s + 2 * Tile::kKvHalves;            // [2, kBlockN, kRowHalves]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int32_t head = blockIdx.x;
  const int32_t kv_head = head / group;
  const int q_tile = static_cast<int>(gridDim.y - 1 - blockIdx.y);  // longest first
  const int q0 = q_tile * Tile::kBlockM;
  const int last_row = (n < q0 + Tile::kBlockM ? n : q0 + Tile::kBlockM) - 1;
  const int num_key_tiles = last_row / kBlockN + 1;
  const int warp_row0 = q0 + warp * Tile::kRowsPerWarp;
  const bool warp_live = warp_row0 < n;
  const int warp_last_row =
      warp_row0 + Tile::kRowsPerWarp - 1 < n ? warp_row0 + Tile::kRowsPerWarp - 1 : n - 1;
  const float* k_head = k + int64_t{kv_head} * D;  // row 0, column 0 of this KV head
  const float* v_head = v + int64_t{kv_head} * D;

  // Prologue: the scaled Q tile and key tile 0 into shared memory.
  {
    const float* q_head = q + int64_t{head} * D;
    const int col4 = threadIdx.x % Tile::kVec4PerRow;
    const int row = threadIdx.x / Tile::kVec4PerRow;
#pragma unroll 4
    for (int p = 0; p < Tile::kQPasses; ++p) {
      const int r = row + p * Tile::kRowsPerPass;
      float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (q0 + r < n)
        x = __ldg(reinterpret_cast<const float4*>(q_head + int64_t{q0 + r} * q_stride) + col4);
      *reinterpret_cast<uint2*>(q_s + r * Tile::kRowHalves + 4 * col4) =
          make_uint2(mma::PackHalf2(x.x * q_scale_log2, x.y * q_scale_log2),
                     mma::PackHalf2(x.z * q_scale_log2, x.w * q_scale_log2));
    }
    float4 staged[kKvPasses<D>];
    LoadKvRows<D>(staged, k_head, kv_stride, 0, n);
    StoreKvRows<D>(k_s, staged);
    LoadKvRows<D>(staged, v_head, kv_stride, 0, n);
    StoreKvRows<D>(v_s, staged);
  }
  __syncthreads();

  // ldmatrix row addresses (halves): Q as A (matrices: rows 0-7 cols 0-7, rows 8-15 cols 0-7,
  // rows 0-7 cols 8-15, rows 8-15 cols 8-15); K as B of QKᵀ (keys 0-7 cols 0-7, keys 0-7
  // cols 8-15, keys 8-15 cols 0-7, keys 8-15 cols 8-15); V transposed as B of PV (keys 0-7
  // cols 0-7, keys 8-15 cols 0-7, keys 0-7 cols 8-15, keys 8-15 cols 8-15).
  const uint32_t q_base = mma::SharedAddress(
      q_s + (warp * Tile::kRowsPerWarp + (lane & 7) + ((lane >> 3) & 1) * 8) * Tile::kRowHalves +
      (lane >> 4) * 8);
  const int k_lane_offset =
      ((lane & 7) + (lane >> 4) * 8) * Tile::kRowHalves + ((lane >> 3) & 1) * 8;
  const int v_lane_offset =
      ((lane & 7) + ((lane >> 3) & 1) * 8) * Tile::kRowHalves + (lane >> 4) * 8;

  // With one row block, this warp's 16 query rows as A fragments, one per k step.
  uint32_t q_frag[Tile::kQInRegisters ? kSteps : 1][4];
  if constexpr (Tile::kQInRegisters) {
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) mma::LdMatrixX4(q_frag[ks], q_base + 2 * ks * 16);
  }

  float o[kMBlocks][2 * kSteps][4];  // output rows (g, g+8) × 8-column tiles, unnormalized
#pragma unroll
  for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
    for (int dt = 0; dt < 2 * kSteps; ++dt) {
      o[mb][dt][0] = o[mb][dt][1] = o[mb][dt][2] = o[mb][dt][3] = 0.0f;
    }
  }
  float row_max[kMBlocks][2];  // rows g and g+8 of each block, log2 domain
  float row_sum[kMBlocks][2];  // this thread's columns only, until the end
#pragma unroll
  for (int mb = 0; mb < kMBlocks; ++mb) {
    row_max[mb][0] = row_max[mb][1] = -INFINITY;
    row_sum[mb][0] = row_sum[mb][1] = 0.0f;
  }

  for (int kt = 0; kt < num_key_tiles; ++kt) {
    const int buf = kt & 1;
    const bool has_next = kt + 1 < num_key_tiles;
    const int key0 = kt * kBlockN;
    const bool compute = warp_live && key0 <= warp_last_row;  // warp-uniform
    float4 staged[kKvPasses<D>];
    if (has_next) LoadKvRows<D>(staged, k_head, kv_stride, key0 + kBlockN, n);

    float s[kMBlocks][kScoreTiles][4];  // scores: rows (g, g+8) × 8-key tiles
    if (compute) {
#pragma unroll
      for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt) {
          s[mb][nt][0] = s[mb][nt][1] = s[mb][nt][2] = s[mb][nt][3] = 0.0f;
        }
      }
      const uint32_t k_base = mma::SharedAddress(k_s + buf * Tile::kKvHalves + k_lane_offset);
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) {
        uint32_t a[kMBlocks][4];
#pragma unroll
        for (int mb = 0; mb < kMBlocks; ++mb) {
          if constexpr (Tile::kQInRegisters) {
#pragma unroll
            for (int r = 0; r < 4; ++r) a[mb][r] = q_frag[ks][r];
          } else {
            mma::LdMatrixX4(a[mb],
                            q_base + sizeof(__half) * (mb * 16 * Tile::kRowHalves + ks * 16));
          }
        }
#pragma unroll
        for (int np = 0; np < kScoreTiles / 2; ++np) {
          uint32_t b[4];
          mma::LdMatrixX4(b, k_base + sizeof(__half) * (np * 16 * Tile::kRowHalves + ks * 16));
#pragma unroll
          for (int mb = 0; mb < kMBlocks; ++mb) {
            mma::MmaF16F32(s[mb][2 * np], a[mb], b[0], b[1]);
            mma::MmaF16F32(s[mb][2 * np + 1], a[mb], b[2], b[3]);
          }
        }
      }
    }
    if (has_next) {
      StoreKvRows<D>(k_s + (buf ^ 1) * Tile::kKvHalves, staged);
      LoadKvRows<D>(staged, v_head, kv_stride, key0 + kBlockN, n);
    }

    if (compute) {
#pragma unroll
      for (int mb = 0; mb < kMBlocks; ++mb) {
        const int block_row0 = warp_row0 + 16 * mb;
        if (key0 + kBlockN - 1 > block_row0) {        // causal mask: key > row → -inf
          const int row_rel = block_row0 - key0 + g;  // in [-31, 69]
#pragma unroll
          for (int nt = 0; nt < kScoreTiles; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int col = nt * 8 + 2 * t + (e & 1);
              if (col > row_rel + (e >> 1) * 8) s[mb][nt][e] = -INFINITY;
            }
          }
        }
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt) {
          tile_max[0] = fmaxf(tile_max[0], fmaxf(s[mb][nt][0], s[mb][nt][1]));
          tile_max[1] = fmaxf(tile_max[1], fmaxf(s[mb][nt][2], s[mb][nt][3]));
        }
        float shift[2], correction[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {  // the 4 lanes of a quad hold one row
          tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(~0u, tile_max[i], 1));
          tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(~0u, tile_max[i], 2));
          const float new_max = fmaxf(row_max[mb][i], tile_max[i]);
          shift[i] = new_max == -INFINITY ? 0.0f : new_max;  // a row masked so far: no NaN
          correction[i] = mma::Exp2Approx(row_max[mb][i] - shift[i]);
          row_max[mb][i] = new_max;
          row_sum[mb][i] *= correction[i];
        }
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[mb][nt][e] = mma::Exp2Approx(s[mb][nt][e] - shift[e >> 1]);
            row_sum[mb][e >> 1] += s[mb][nt][e];
          }
        }
#pragma unroll
        for (int dt = 0; dt < 2 * kSteps; ++dt) {
          o[mb][dt][0] *= correction[0];
          o[mb][dt][1] *= correction[0];
          o[mb][dt][2] *= correction[1];
          o[mb][dt][3] *= correction[1];
        }
      }
      const uint32_t v_base = mma::SharedAddress(v_s + buf * Tile::kKvHalves + v_lane_offset);
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        uint32_t p[kMBlocks][4];
#pragma unroll
        for (int mb = 0; mb < kMBlocks; ++mb) {
          p[mb][0] = mma::PackHalf2(s[mb][2 * kk][0], s[mb][2 * kk][1]);
          p[mb][1] = mma::PackHalf2(s[mb][2 * kk][2], s[mb][2 * kk][3]);
          p[mb][2] = mma::PackHalf2(s[mb][2 * kk + 1][0], s[mb][2 * kk + 1][1]);
          p[mb][3] = mma::PackHalf2(s[mb][2 * kk + 1][2], s[mb][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < kSteps; ++dp) {
          uint32_t b[4];
          mma::LdMatrixX4Trans(b, v_base + sizeof(__half) * (kk * 16 * Tile::kRowHalves + dp * 16));
#pragma unroll
          for (int mb = 0; mb < kMBlocks; ++mb) {
            mma::MmaF16F32(o[mb][2 * dp], p[mb], b[0], b[1]);
            mma::MmaF16F32(o[mb][2 * dp + 1], p[mb], b[2], b[3]);
          }
        }
      }
    }
    if (has_next) StoreKvRows<D>(v_s + (buf ^ 1) * Tile::kKvHalves, staged);
    __syncthreads();  // next buffer filled; this one free for the tile after
  }

  if (!warp_live) return;  // after the loop's last barrier: nothing block-wide follows
#pragma unroll
  for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float sum = row_sum[mb][i];
      sum += __shfl_xor_sync(~0u, sum, 1);
      sum += __shfl_xor_sync(~0u, sum, 2);
      const int r = warp_row0 + 16 * mb + g + 8 * i;
      if (r >= n) continue;
      const float inv = 1.0f / sum;  // ≥ 1: the row's max key contributes 2^0
      float* out_row = out + int64_t{r} * out_stride + int64_t{head} * D + 2 * t;
#pragma unroll
      for (int dt = 0; dt < 2 * kSteps; ++dt) {
        *reinterpret_cast<float2*>(out_row + dt * 8) =
            make_float2(o[mb][dt][2 * i] * inv, o[mb][dt][2 * i + 1] * inv);
      }
    }
  }
}

template <int D, int kMBlocks>
CudaStatus LaunchMma(const float* q, int64_t q_stride, const float* k, const float* v,
                     int64_t kv_stride, int64_t n, int32_t num_heads, int32_t group, float* out,
                     int64_t out_stride, cudaStream_t stream) {
  using Tile = MmaTile<D, kMBlocks>;
  WITCERT_CUDA_CALL(cudaFuncSetAttribute(PrefillAttentionMmaKernel<D, kMBlocks>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         Tile::kSmemBytes));
  const int64_t query_tiles = (n + Tile::kBlockM - 1) / Tile::kBlockM;
  const dim3 grid(static_cast<unsigned>(num_heads), static_cast<unsigned>(query_tiles));
  const float q_scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(double{D}));
  PrefillAttentionMmaKernel<D, kMBlocks><<<grid, kThreads, Tile::kSmemBytes, stream>>>(
      q, q_stride, k, v, kv_stride, static_cast<int>(n), group, q_scale_log2, out, out_stride);
  WITCERT_CUDA_CALL(cudaGetLastError());
  return CudaStatus::Ok();
}

bool Aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

// 32 rows per warp unless its grid (Hq·⌈n/256⌉ CTAs, one per SM) has fewer CTAs than SMs.
int PrefillAttentionMmaDefaultRowsPerWarp(int64_t n, int32_t num_heads) {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 16;  // the launch reports the error
  }
  const int64_t wide_ctas = int64_t{num_heads} * ((n + 255) / 256);
  return wide_ctas >= sms ? 32 : 16;
}

bool PrefillAttentionMmaSupports(const float* q, int64_t q_stride, const float* k, const float* v,
                                 int64_t kv_stride, int64_t n, int32_t head_dim, const float* out,
                                 int64_t out_stride) {
  if (head_dim != 64 && head_dim != 128) return false;
  if (!Aligned(q, 16) || !Aligned(k, 16) || !Aligned(v, 16)) return false;
  if (q_stride % 4 != 0 || kv_stride % 4 != 0) return false;
  if (!Aligned(out, 8) || out_stride % 2 != 0) return false;
  return (n + kMinBlockM - 1) / kMinBlockM <= kMaxQueryTiles;
}

CudaStatus PrefillAttentionMmaCudaRows(int rows_per_warp, const float* q, int64_t q_stride,
                                       const float* k, const float* v, int64_t kv_stride, int64_t n,
                                       int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                                       float* out, int64_t out_stride, cudaStream_t stream) {
  if (n <= 0) return CudaStatus::Ok();
  if (num_kv_heads <= 0 || num_heads <= 0 || num_heads % num_kv_heads != 0) {
    return CudaStatus::Error(
        "PrefillAttentionMmaCuda: num_heads must be a positive multiple of num_kv_heads");
  }
  if (!PrefillAttentionMmaSupports(q, q_stride, k, v, kv_stride, n, head_dim, out, out_stride)) {
    return CudaStatus::Error(
        "PrefillAttentionMmaCuda: needs head_dim 64 or 128, 16-byte aligned q/k/v rows, "
        "8-byte aligned out rows, < 65536 query tiles");
  }
  const int32_t group = num_heads / num_kv_heads;
  if (rows_per_warp == 0) rows_per_warp = PrefillAttentionMmaDefaultRowsPerWarp(n, num_heads);
  if (rows_per_warp != 16 && rows_per_warp != 32) {
    return CudaStatus::Error("PrefillAttentionMmaCuda: rows_per_warp must be 16 or 32");
  }
  if (head_dim == 64) {
    return rows_per_warp == 16 ? LaunchMma<64, 1>(q, q_stride, k, v, kv_stride, n, num_heads, group,
                                                  out, out_stride, stream)
                               : LaunchMma<64, 2>(q, q_stride, k, v, kv_stride, n, num_heads, group,
                                                  out, out_stride, stream);
  }
  return rows_per_warp == 16 ? LaunchMma<128, 1>(q, q_stride, k, v, kv_stride, n, num_heads, group,
                                                 out, out_stride, stream)
                             : LaunchMma<128, 2>(q, q_stride, k, v, kv_stride, n, num_heads, group,
                                                 out, out_stride, stream);
}

CudaStatus PrefillAttentionMmaCuda(const float* q, int64_t q_stride, const float* k, const float* v,
                                   int64_t kv_stride, int64_t n, int32_t num_heads,
                                   int32_t num_kv_heads, int32_t head_dim, float* out,
                                   int64_t out_stride, cudaStream_t stream) {
  return PrefillAttentionMmaCudaRows(0, q, q_stride, k, v, kv_stride, n, num_heads, num_kv_heads,
                                     head_dim, out, out_stride, stream);
}

}  // namespace witcert
