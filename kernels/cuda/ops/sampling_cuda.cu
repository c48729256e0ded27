// Next-token sampling on the GPU (contract in sampling_cuda.h).
//
// Structure: one CTA of 1024 threads per row. The row (≤ a few hundred KB) stays in L2 across
// the passes: max; the top-k key threshold by a 4-pass radix select over order-preserving
// 32-bit keys of the logits; one pass writing the weights over the logits; the top-p weight
// threshold by a 4-pass radix select on the weights' bits with fixed-point mass histograms;
// chunk sums, a block scan, and one thread walking the chunk that holds the draw. With the
// argmax scratch, the max comes from a first launch over chunks of the rows (many CTAs a row)
// instead of the row's CTA reading all of it.
#include "kernels/cuda/ops/sampling_cuda.h"

#include <cmath>
#include <string>

#include "kernels/cuda/dependent_launch.cuh"

namespace witcert {
namespace {

constexpr int kThreads = 1024;
constexpr double kFixedOne = 1099511627776.0;  // 2^40: weight 1 in fixed point

__device__ __forceinline__ uint32_t OrderKey(float x) {  // larger float → larger key; NaN → 0
  if (!(x == x)) return 0u;
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ uint64_t Fixed(float w) {
  return static_cast<uint64_t>(static_cast<double>(w) * kFixedOne);
}

struct Shared {
  unsigned long long mass[256];  // radix-select histogram: count or fixed-point mass per digit
  unsigned long long scan[kThreads];
  float fred[kThreads / 32];
  int32_t ired[kThreads / 32];
  uint32_t prefix, mask;
  unsigned long long remaining;
};

// (value, index) candidates for the first maximum: whether (ov, oi) beats (bv, bi) — a larger
// value, or the same at a smaller index; index −1 is no candidate (NaN skipped).
__device__ __forceinline__ bool Beats(float ov, int32_t oi, float bv, int32_t bi) {
  return oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi));
}

// The block's best of every thread's candidate (bv, bi), blockDim.x threads (a multiple of 32,
// ≤ kThreads): every thread gets it. red_v, red_i: [blockDim.x / 32] shared.
__device__ int32_t BlockBestOf(float bv, int32_t bi, float* red_v, int32_t* red_i, float* max_value) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (Beats(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
  if ((threadIdx.x & 31) == 0) {
    red_v[threadIdx.x >> 5] = bv;
    red_i[threadIdx.x >> 5] = bi;
  }
  __syncthreads();
  float rv = -INFINITY;
  int32_t ri = -1;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) {
    if (Beats(red_v[w], red_i[w], rv, ri)) {
      rv = red_v[w];
      ri = red_i[w];
    }
  }
  __syncthreads();
  *max_value = rv;
  return ri;
}

// The first index holding the maximum (NaN skipped; -1 when every entry is NaN) and the
// maximum itself, from the reduction: every thread gets both without reading the row again,
// which other threads may already be overwriting with weights. From the row, or from its
// chunks' partials [chunks] (RowArgmaxChunksKernel) when `partials` is set.
__device__ int32_t BlockArgmax(const float* row, int64_t vocab, const SampleArgmaxPartial* partials,
                               int64_t chunks, Shared& sh, float* max_value) {
  float bv = -INFINITY;
  int32_t bi = -1;
  if (partials != nullptr) {
    for (int64_t c = threadIdx.x; c < chunks; c += kThreads) {  // chunks in index order
      const SampleArgmaxPartial e = partials[c];
      if (Beats(e.value, e.index, bv, bi)) {
        bv = e.value;
        bi = e.index;
      }
    }
  } else {
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
      const float v = row[j];
      if (v == v && (bi < 0 || v > bv)) {
        bv = v;
        bi = static_cast<int32_t>(j);
      }
    }
  }
  return BlockBestOf(bv, bi, sh.fred, sh.ired, max_value);
}

// The argmax launch: CTA (c, r) takes chunk c of row r, kChunkLen logits, each thread
// kChunkPerThread of them with all its loads issued at once, and writes the chunk's first
// maximum. Rows with penalties are left to SampleRowsKernel (their logits change first).
constexpr int kChunkThreads = 256, kChunkPerThread = 16;
constexpr int64_t kChunkLen = int64_t{kChunkThreads} * kChunkPerThread;
int64_t ArgmaxChunks(int64_t vocab) { return (vocab + kChunkLen - 1) / kChunkLen; }

__global__ void __launch_bounds__(kChunkThreads) RowArgmaxChunksKernel(const float* logits, int64_t vocab,
                                                                       const SampleRowParams* params,
                                                                       SampleArgmaxPartial* partials) {
  __shared__ float red_v[kChunkThreads / 32];
  __shared__ int32_t red_i[kChunkThreads / 32];
  cuda_launch::AllowNextKernelToStart();  // SampleRowsKernel waits for this launch to end
  const int64_t r = blockIdx.y;
  if (params[r].penalty_count > 0) return;
  const float* row = logits + r * vocab;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kChunkLen + threadIdx.x;
  float v[kChunkPerThread];
#pragma unroll
  for (int k = 0; k < kChunkPerThread; ++k) {
    const int64_t j = base + int64_t{k} * kChunkThreads;
    v[k] = j < vocab ? row[j] : NAN;
  }
  float bv = -INFINITY;
  int32_t bi = -1;
#pragma unroll
  for (int k = 0; k < kChunkPerThread; ++k) {  // increasing index: the first maximum stays
    if (v[k] == v[k] && (bi < 0 || v[k] > bv)) {
      bv = v[k];
      bi = static_cast<int32_t>(base + int64_t{k} * kChunkThreads);
    }
  }
  float top = 0.0f;
  const int32_t best = BlockBestOf(bv, bi, red_v, red_i, &top);
  if (threadIdx.x == 0) partials[r * gridDim.x + blockIdx.x] = SampleArgmaxPartial{top, best};
}

// Inclusive prefix sum of one value per thread (Hillis–Steele in shared memory); returns this
// thread's inclusive sum, the block total is sh.scan[kThreads − 1] until the next call.
__device__ unsigned long long BlockInclusiveScan(unsigned long long v, Shared& sh) {
  sh.scan[threadIdx.x] = v;
  __syncthreads();
  for (int o = 1; o < kThreads; o <<= 1) {
    const unsigned long long add = threadIdx.x >= o ? sh.scan[threadIdx.x - o] : 0ull;
    __syncthreads();
    sh.scan[threadIdx.x] += add;
    __syncthreads();
  }
  return sh.scan[threadIdx.x];
}

// Radix select from the most significant byte: the key K of the element at which the
// descending accumulation of `measure` (1 per element for a count, its fixed-point weight for
// a mass) first reaches `target`. Elements take part when `key_of(j)` is defined (≠ 0 here).
template <class KeyOf, class MeasureOf>
__device__ uint32_t RadixSelect(int64_t vocab, unsigned long long target, KeyOf key_of,
                                MeasureOf measure_of, Shared& sh) {
  if (threadIdx.x == 0) {
    sh.prefix = 0;
    sh.mask = 0;
    sh.remaining = target;
  }
  __syncthreads();
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kThreads) sh.mass[i] = 0;
    __syncthreads();
    const uint32_t prefix = sh.prefix, mask = sh.mask;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
      const uint32_t key = key_of(j);
      if (key == 0 || (key & mask) != prefix) continue;
      const unsigned long long m = measure_of(j);
      if (m > 0) atomicAdd(&sh.mass[(key >> shift) & 255u], m);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long cum = 0;
      uint32_t chosen = 0;
      for (int d = 255; d >= 0; --d) {
        if (cum + sh.mass[d] >= sh.remaining) {
          chosen = static_cast<uint32_t>(d);
          sh.remaining -= cum;
          break;
        }
        cum += sh.mass[d];
      }
      sh.prefix |= chosen << shift;
      sh.mask |= 255u << shift;
    }
    __syncthreads();
  }
  return sh.prefix;
}

__global__ void __launch_bounds__(kThreads) SampleRowsKernel(float* logits, int64_t vocab,
                                                             const SampleRowParams* params,
                                                             const int32_t* pen_tokens,
                                                             const int32_t* pen_counts,
                                                             int32_t* out,
                                                             const SampleArgmaxPartial* partials,
                                                             int64_t chunks) {
  __shared__ Shared sh;
  cuda_launch::WaitForPreviousKernel();  // the argmax launch, when there is one
  const SampleRowParams p = params[blockIdx.x];
  float* row = logits + blockIdx.x * vocab;  // [vocab]
  for (int32_t e = threadIdx.x; e < p.penalty_count; e += kThreads) {
    const int32_t t = pen_tokens[p.penalty_offset + e];
    if (t >= 0 && t < vocab) {
      row[t] -= p.presence_penalty +
                p.frequency_penalty * static_cast<float>(pen_counts[p.penalty_offset + e]);
    }
  }
  __syncthreads();
  float top = 0.0f;
  const SampleArgmaxPartial* row_partials =
      partials != nullptr && p.penalty_count == 0 ? partials + blockIdx.x * chunks : nullptr;
  const int32_t best = BlockArgmax(row, vocab, row_partials, chunks, sh, &top);
  if (p.temperature <= 0.0f || best < 0) {
    if (threadIdx.x == 0) out[blockIdx.x] = best < 0 ? 0 : best;
    return;
  }
  // Top-k: keep logits whose key is ≥ the k-th largest key.
  uint32_t kth = 1;  // keys are ≥ 1 for every non-NaN logit
  if (p.top_k > 0 && p.top_k < vocab) {
    kth = RadixSelect(
        vocab, static_cast<unsigned long long>(p.top_k), [&](int64_t j) { return OrderKey(row[j]); },
        [](int64_t) { return 1ull; }, sh);
  }
  // Weights over the candidates (min-p applied), written over the logits.
  const float inv_t = 1.0f / p.temperature;
  unsigned long long local = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
    const float l = row[j];
    float w = 0.0f;
    if (l == l && OrderKey(l) >= kth) {
      w = expf((l - top) * inv_t);
      if (w < p.min_p) w = 0.0f;
    }
    row[j] = w;
    local += Fixed(w);
  }
  __syncthreads();
  // Top-p: the weight-bits threshold at which the kept mass first reaches top_p of the total.
  uint32_t wmin = 1;  // bits of the smallest kept weight (every positive weight has bits ≥ 1)
  if (p.top_p < 1.0f) {
    BlockInclusiveScan(local, sh);
    const unsigned long long total = sh.scan[kThreads - 1];
    __syncthreads();
    const unsigned long long target =
        static_cast<unsigned long long>(ceil(static_cast<double>(p.top_p) * static_cast<double>(total)));
    if (target > 0) {
      wmin = RadixSelect(
          vocab, target, [&](int64_t j) { return row[j] > 0.0f ? __float_as_uint(row[j]) : 0u; },
          [&](int64_t j) { return static_cast<unsigned long long>(Fixed(row[j])); }, sh);
    }
  }
  // Draw: chunk sums of the kept weights, a block scan, one thread walks its chunk.
  const int64_t chunk = (vocab + kThreads - 1) / kThreads;
  const int64_t begin = threadIdx.x * chunk, end = min(vocab, begin + chunk);
  unsigned long long mine = 0;
  for (int64_t j = begin; j < end; ++j) {
    const float w = row[j];
    if (w > 0.0f && __float_as_uint(w) >= wmin) mine += Fixed(w);
  }
  const unsigned long long inclusive = BlockInclusiveScan(mine, sh);
  const unsigned long long total = sh.scan[kThreads - 1];
  // The maximum, unless the walk below finds the draw (it does whenever total > 0; total is 0
  // only when every kept weight rounded to 0).
  if (threadIdx.x == 0) out[blockIdx.x] = best;
  __syncthreads();
  if (total == 0) return;
  unsigned long long r = static_cast<unsigned long long>(p.uniform * static_cast<double>(total));
  if (r >= total) r = total - 1;
  const unsigned long long before = inclusive - mine;
  if (r >= before && r < before + mine) {
    unsigned long long acc = before;
    for (int64_t j = begin; j < end; ++j) {
      const float w = row[j];
      if (!(w > 0.0f && __float_as_uint(w) >= wmin)) continue;
      acc += Fixed(w);
      if (acc > r) {
        out[blockIdx.x] = static_cast<int32_t>(j);
        break;
      }
    }
  }
}

}  // namespace

int64_t SampleArgmaxScratchEntries(int64_t n, int64_t vocab) { return n * ArgmaxChunks(vocab); }

CudaStatus SampleRowsCuda(float* logits, int64_t n, int64_t vocab, const SampleRowParams* params,
                          const int32_t* penalty_tokens, const int32_t* penalty_counts,
                          int32_t* out, cudaStream_t stream, SampleArgmaxPartial* argmax_scratch) {
  if (n <= 0) return CudaStatus::Ok();
  if (vocab <= 0 || vocab >= (int64_t{1} << 31) || n > 0x7fffffff) {
    return CudaStatus::Error("SampleRowsCuda: vocab must be in [1, 2^31) and rows < 2^31");
  }
  if (argmax_scratch != nullptr && n > 0xffff) {  // the argmax launch's grid rows
    return CudaStatus::Error("SampleRowsCuda: at most 65535 rows with the argmax scratch");
  }
  if (logits == nullptr || params == nullptr || out == nullptr) {
    return CudaStatus::Error("SampleRowsCuda: null argument");
  }
  const int64_t chunks = ArgmaxChunks(vocab);
  if (argmax_scratch != nullptr) {
    RowArgmaxChunksKernel<<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(n)), kChunkThreads, 0,
                            stream>>>(logits, vocab, params, argmax_scratch);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return CudaStatus::Error(std::string("RowArgmaxChunksKernel: ") + cudaGetErrorString(err));
  }
  return cuda_launch::Launch(SampleRowsKernel, dim3(static_cast<unsigned>(n)), dim3(kThreads), 0, stream,
                             /*overlap_previous=*/argmax_scratch != nullptr, logits, vocab, params, penalty_tokens,
                             penalty_counts, out, static_cast<const SampleArgmaxPartial*>(argmax_scratch), chunks);
}

}  // namespace witcert
