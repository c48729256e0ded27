// Where the batch-1 GEMV chain's time goes between kernels: the same bf16 GEMV phases (a layer's
// O, gate|up and down shapes of Llama-3.1-8B, each reading the previous phase's output) run
//  (a) one launch per phase, each a programmatic dependent launch that issues its first weight
//      loads before waiting for its predecessor (as the engine's GEMVs do);
//  (b) one persistent cooperative launch per layer, phases separated by grid barriers, each warp
//      issuing its next phase's first weight loads before the barrier;
//  (c) one persistent launch for every layer;
//  (d) as (a), but each CTA reads whole rows, its warps splitting the columns;
//  (e) one persistent launch per layer, each CTA streaming its rows of every phase through one
//      shared-memory ring of whole-row stages (cp.async.bulk) that runs on across the phases;
//  (f) as (a), with each lane's weight loads in its own shared-memory slots (cp.async), 2 to 4
//      loop steps in flight instead of the one (a) holds in registers; (a)'s bits;
//  (g) (a) under each preferred shared-memory carveout, and (a) with a no-work kernel between the
//      phases that holds little or much shared memory (an attention kernel's place in the step).
// Times are per layer (median over graph replays of `layers` layers), against the bytes read.
// Usage: bench_gemv_chain [layers=16] [replays=9]. Needs only CUDA.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/decode_gpu/bulk_copy.cuh"
#include "kernels/cuda/dependent_launch.cuh"

namespace cg = cooperative_groups;
using witcert::CudaStatus;

#define CHECK(x)                                                                         \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));    \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

#define CHECK_OK(x)                                                                      \
  do {                                                                                   \
    const CudaStatus s_ = (x);                                                           \
    if (!s_.ok) {                                                                        \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, s_.message.c_str());        \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

namespace {

constexpr int kWarps = 8, kThreads = 256, kUnroll = 4, kMaxCols = 14336;

struct Phase {
  const uint16_t* w;  // [rows, cols] bf16
  int rows, cols;
  const float* x;     // [cols] fp32 (rounded to bf16 in shared memory)
  float* y;           // [rows]
};
struct Chain {
  Phase ph[64];
  int n;
};

__device__ __forceinline__ float Lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float Hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }
__device__ __forceinline__ float Dot8(uint4 a, uint4 b, float acc) {
  acc = fmaf(Lo(a.x), Lo(b.x), acc); acc = fmaf(Hi(a.x), Hi(b.x), acc);
  acc = fmaf(Lo(a.y), Lo(b.y), acc); acc = fmaf(Hi(a.y), Hi(b.y), acc);
  acc = fmaf(Lo(a.z), Lo(b.z), acc); acc = fmaf(Hi(a.z), Hi(b.z), acc);
  acc = fmaf(Lo(a.w), Lo(b.w), acc); acc = fmaf(Hi(a.w), Hi(b.w), acc);
  return acc;
}
// Round to nearest even bf16, for finite f (the inputs here always are). Not cuda_ops::ToBf16Bits:
// with __float2bfloat16_rn the measured kernels took 74-78 registers instead of 64, i.e. 3 CTAs per
// SM instead of the 4 that bench/RESULTS.md's figures ran with.
__device__ __forceinline__ uint32_t Bf16(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
// x [cols] fp32 → xs [cols / 8] bf16, by the whole CTA.
__device__ __forceinline__ void StageInput(const float* x, int cols, uint4* xs) {
  for (int j = threadIdx.x; j < cols / 4; j += kThreads) {
    const float4 v = reinterpret_cast<const float4*>(x)[j];
    reinterpret_cast<uint2*>(xs)[j] = make_uint2(Bf16(v.x) | (Bf16(v.y) << 16), Bf16(v.z) | (Bf16(v.w) << 16));
  }
  __syncthreads();
}

// The first loads of the warp's first row pair of phase `ph` (weights only: no dependency).
__device__ __forceinline__ void Prefetch(const Phase& ph, int64_t wg, int lane, uint4 (&wv)[2][kUnroll]) {
  const int64_t r0 = 2 * wg;
  if (r0 >= ph.rows) return;
  const uint4* w0 = reinterpret_cast<const uint4*>(ph.w + r0 * ph.cols);
  const uint4* w1 = reinterpret_cast<const uint4*>(ph.w + (r0 + 1) * ph.cols);
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    wv[0][u] = __ldcs(w0 + lane + 32 * u);
    wv[1][u] = __ldcs(w1 + lane + 32 * u);
  }
}

// One loop step of a warp's row pair: chunks u·32 of xs (already offset to the step and lane)
// against the pair's weights wv, into the running sums.
__device__ __forceinline__ void StepDot(const uint4 (&wv)[2][kUnroll], const uint4* xs, float& a0, float& a1) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const uint4 xv = xs[32 * u];
    a0 = Dot8(wv[0][u], xv, a0);
    a1 = Dot8(wv[1][u], xv, a1);
  }
}
// The pair's sums over the warp, stored by lane 0 at y[row] and y[row + 1].
__device__ __forceinline__ void StorePair(float* y, int64_t row, float a0, float a1, int lane) {
  for (int o = 16; o > 0; o >>= 1) {
    a0 += __shfl_xor_sync(0xffffffffu, a0, o);
    a1 += __shfl_xor_sync(0xffffffffu, a1, o);
  }
  if (lane == 0) {
    y[row] = a0;
    y[row + 1] = a1;
  }
}

// y = W·bf16(x) over the phase's rows, two rows per warp per step, warps grid-strided; the
// first step's loads are in wv already.
__device__ void RunPhase(const Phase& ph, int64_t wg, int64_t nwarps, int lane, uint4 (&wv)[2][kUnroll], uint4* xs) {
  const int c8 = ph.cols / 8;
  StageInput(ph.x, ph.cols, xs);
  bool first = true;
  for (int64_t pair = wg; 2 * pair < ph.rows; pair += nwarps) {
    const uint4* w0 = reinterpret_cast<const uint4*>(ph.w + 2 * pair * ph.cols);
    const uint4* w1 = reinterpret_cast<const uint4*>(ph.w + (2 * pair + 1) * ph.cols);
    float a0 = 0.0f, a1 = 0.0f;
    for (int i = lane; i < c8; i += 32 * kUnroll) {
      if (!first) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          wv[0][u] = __ldcs(w0 + i + 32 * u);
          wv[1][u] = __ldcs(w1 + i + 32 * u);
        }
      }
      first = false;
      StepDot(wv, xs + i, a0, a1);
    }
    StorePair(ph.y, 2 * pair, a0, a1, lane);
  }
  __syncthreads();  // xs is rewritten by the next phase
}

// One phase per launch (programmatic dependent launch: prefetch, then wait for the predecessor).
__global__ void __launch_bounds__(kThreads) PhaseKernel(const Phase ph) {
  __shared__ uint4 xs[kMaxCols / 8];
  const int lane = threadIdx.x & 31;
  const int64_t wg = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int64_t nwarps = static_cast<int64_t>(gridDim.x) * kWarps;
  uint4 wv[2][kUnroll];
  Prefetch(ph, wg, lane, wv);
  witcert::cuda_launch::WaitForPreviousKernel();
  witcert::cuda_launch::AllowNextKernelToStart();
  RunPhase(ph, wg, nwarps, lane, wv, xs);
}

// (d) The same phase with the CTA's warps splitting each row's columns: at every step the CTA
// reads kRowsD whole rows, so its loads form one contiguous run of kRowsD·cols·2 bytes (instead of
// 16 rows advancing 512 bytes at a time), then reduces the 8 warps' partial sums in shared memory.
constexpr int kRowsD = 4;
template <int PER>  // chunks per thread per row: cols / 8 / kThreads
__global__ void __launch_bounds__(kThreads) PhaseKernelRowsPerCta(const Phase ph) {
  __shared__ uint4 xs[kMaxCols / 8];
  __shared__ float part[kWarps][kRowsD];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRowsD;
  uint4 wv[kRowsD][PER];
#pragma unroll
  for (int r = 0; r < kRowsD; ++r) {
    const uint4* wr = reinterpret_cast<const uint4*>(ph.w + (r0 + r) * ph.cols);
#pragma unroll
    for (int k = 0; k < PER; ++k) wv[r][k] = __ldcs(wr + threadIdx.x + k * kThreads);
  }
  witcert::cuda_launch::WaitForPreviousKernel();
  witcert::cuda_launch::AllowNextKernelToStart();
  StageInput(ph.x, ph.cols, xs);
  float acc[kRowsD] = {};
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const uint4 xv = xs[threadIdx.x + k * kThreads];
#pragma unroll
    for (int r = 0; r < kRowsD; ++r) acc[r] = Dot8(wv[r][k], xv, acc[r]);
  }
#pragma unroll
  for (int r = 0; r < kRowsD; ++r) {
    for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    if (lane == 0) part[warp][r] = acc[r];
  }
  __syncthreads();
  if (threadIdx.x < kRowsD) {
    float t = 0.0f;
    for (int w = 0; w < kWarps; ++w) t += part[w][threadIdx.x];
    ph.y[r0 + threadIdx.x] = t;
  }
}

// (e) One persistent launch per layer whose weights stream through one shared-memory ring that
// runs on across the phase boundaries: thread 0 issues each stage (whole rows of one phase, one
// bulk copy) as soon as its slot is free, whatever phase it belongs to, so the copies of the next
// phase are in flight while the CTAs wait at the grid barrier for its input. One CTA per SM, the
// ring 192 KB (two CTAs' worth of bytes in flight let a copy-engine ring stream the head's GEMV
// at 4.4 TB/s). Measured 3.0 TB/s (bench/RESULTS.md, 2026-12-03, sixth session): one CTA of 8
// warps per SM consumes the stages too slowly.
constexpr int kRingSlots = 6, kSlotBytes = 32768, kMaxStageRows = 4, kMaxLocalRows = 256;
constexpr size_t kRingXOff = 64 + kRingSlots * kWarps * kMaxStageRows * 4 + kMaxLocalRows * 4;
constexpr size_t kRingOff = (kRingXOff + kMaxCols * 2 + 127) / 128 * 128;
constexpr size_t kRingSmem = kRingOff + size_t{kRingSlots} * kSlotBytes;

struct RingPhase {  // one CTA's share of one phase
  int64_t r0;
  int nrows, stage_rows, nst;
};
__device__ __forceinline__ RingPhase PhaseShare(const Phase& ph) {
  RingPhase q;
  q.r0 = int64_t{blockIdx.x} * ph.rows / gridDim.x;
  q.nrows = static_cast<int>(int64_t{blockIdx.x + 1} * ph.rows / gridDim.x - q.r0);
  q.stage_rows = max(1, min(kMaxStageRows, kSlotBytes / (ph.cols * 2)));
  q.nst = (q.nrows + q.stage_rows - 1) / q.stage_rows;
  return q;
}

__global__ void __launch_bounds__(kThreads) RingChainKernel(const Chain c, int begin, int end, unsigned* arrivals,
                                                             int slots) {
  extern __shared__ __align__(128) unsigned char smem[];
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem);           // [slots]
  float* part = reinterpret_cast<float*>(smem + 64);            // [slots, kWarps, kMaxStageRows]
  float* sums = part + kRingSlots * kWarps * kMaxStageRows;     // [kMaxLocalRows]
  uint4* xs = reinterpret_cast<uint4*>(smem + kRingXOff);       // [cols / 8]
  unsigned char* ring = smem + kRingOff;                        // [slots, kSlotBytes]
  // Each phase's share of this CTA, computed once (the 64-bit divisions are slow on the issue path).
  __shared__ RingPhase share[64];
  for (int p = begin + static_cast<int>(threadIdx.x); p < end; p += kThreads) share[p - begin] = PhaseShare(c.ph[p]);
  __syncthreads();
  // The producer's cursor (thread 0 only): next phase and stage to issue, and stages issued.
  int ip = begin, is = 0, issued = 0;
  uint64_t policy = 0;
  auto issue_next = [&] {
    while (ip < end && is >= share[ip - begin].nst) { ++ip; is = 0; }
    if (ip >= end) return;
    const Phase& ph = c.ph[ip];
    const RingPhase q = share[ip - begin];
    const int rows = min(q.stage_rows, q.nrows - is * q.stage_rows);
    uint64_t* bar = &bars[issued % slots];
    const uint32_t bytes = static_cast<uint32_t>(rows) * ph.cols * 2;
    witcert::cuda_bulk::ExpectBytes(bar, bytes);
    witcert::cuda_bulk::CopyToShared(ring + size_t{static_cast<size_t>(issued % slots)} * kSlotBytes,
                                     ph.w + (q.r0 + int64_t{is} * q.stage_rows) * ph.cols, bytes, bar, policy);
    ++is;
    ++issued;
  };
  if (threadIdx.x == 0) {
    policy = witcert::cuda_bulk::EvictFirstPolicy();
    for (int s = 0; s < slots; ++s) witcert::cuda_bulk::InitBarrier(&bars[s]);
    witcert::cuda_bulk::FenceBarrierInit();
    for (int s = 0; s < slots; ++s) issue_next();
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int g = 0;  // stages consumed
  for (int p = begin; p < end; ++p) {
    const Phase& ph = c.ph[p];
    if (p > begin) {  // grid barrier: every CTA's rows of phase p - 1 are stored
      if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(arrivals, 1u);
        const unsigned target = static_cast<unsigned>(p - begin) * gridDim.x;
        while (atomicAdd(arrivals, 0u) < target) __nanosleep(64);
        __threadfence();
      }
      __syncthreads();
    }
    for (int j = threadIdx.x; j < ph.cols / 4; j += kThreads) {
      const float4 v = __ldcg(reinterpret_cast<const float4*>(ph.x) + j);
      reinterpret_cast<uint2*>(xs)[j] = make_uint2(Bf16(v.x) | (Bf16(v.y) << 16), Bf16(v.z) | (Bf16(v.w) << 16));
    }
    __syncthreads();
    const RingPhase q = share[p - begin];
    const int c8 = ph.cols / 8;
    for (int s = 0; s < q.nst; ++s, ++g) {
      const int slot = g % slots, l0 = s * q.stage_rows, n = min(q.stage_rows, q.nrows - l0);
      witcert::cuda_bulk::WaitPhase(&bars[slot], static_cast<uint32_t>(g / slots) & 1u);
      const uint4* st = reinterpret_cast<const uint4*>(ring + size_t{static_cast<size_t>(slot)} * kSlotBytes);
      float* ps = part + slot * kWarps * kMaxStageRows;
      for (int r = 0; r < n; ++r) {
        float acc = 0.0f;
        for (int k = threadIdx.x; k < c8; k += kThreads) acc = Dot8(st[r * c8 + k], xs[k], acc);
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) ps[warp * kMaxStageRows + r] = acc;
      }
      __syncthreads();
      if (threadIdx.x < n) {
        float t = 0.0f;
        for (int w = 0; w < kWarps; ++w) t += ps[w * kMaxStageRows + threadIdx.x];
        sums[l0 + threadIdx.x] = t;
      }
      if (threadIdx.x == 0) issue_next();
    }
    __syncthreads();
    for (int r = threadIdx.x; r < q.nrows; r += kThreads) ph.y[q.r0 + r] = sums[r];
  }
}

// (f) As (a), with each lane's weight loads going through its own shared-memory slots
// (cp.async, 16 bytes each) instead of registers: S steps of the (a) loop in flight per lane at
// all times (each step 2 rows × 4 chunks), the step after next issued as soon as a step is read.
// The same arithmetic as (a), so the same bits. Registers no longer bound the bytes in flight.
__device__ __forceinline__ void LaneCopy(uint4* dst, const uint4* src, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
               "l"(src), "l"(policy)
               : "memory");
}
template <int S>
__global__ void __launch_bounds__(kThreads) LaneRingKernel(const Phase ph) {
  extern __shared__ __align__(16) uint4 dyn[];
  uint4* ring = dyn;                          // [S, 2, kUnroll, kThreads]: each thread's own slots
  uint4* xs = dyn + S * 2 * kUnroll * kThreads;  // [cols / 8]
  const int lane = threadIdx.x & 31;
  const int64_t wg = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int64_t r0 = 2 * wg;
  const bool live = r0 < ph.rows;
  const int c8 = ph.cols / 8, steps = c8 / (32 * kUnroll);
  const uint4* w0 = reinterpret_cast<const uint4*>(ph.w + (live ? r0 : 0) * ph.cols);
  const uint4* w1 = reinterpret_cast<const uint4*>(ph.w + (live ? r0 + 1 : 0) * ph.cols);
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  auto slot = [&](int k, int r, int u) { return ring + (((k % S) * 2 + r) * kUnroll + u) * kThreads + threadIdx.x; };
  auto issue = [&](int k) {
    if (live && k < steps) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = lane + 32 * u + int64_t{k} * 32 * kUnroll;
        LaneCopy(slot(k, 0, u), w0 + i, policy);
        LaneCopy(slot(k, 1, u), w1 + i, policy);
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
#pragma unroll
  for (int k = 0; k < S; ++k) issue(k);  // weights only: before the wait
  witcert::cuda_launch::WaitForPreviousKernel();
  witcert::cuda_launch::AllowNextKernelToStart();
  StageInput(ph.x, ph.cols, xs);
  if (!live) return;
  float a0 = 0.0f, a1 = 0.0f;  // (a)'s order: one running sum per row over the chunks
  for (int k = 0; k < steps; ++k) {
    asm volatile("cp.async.wait_group %0;" ::"n"(S - 1) : "memory");
    uint4 wv[2][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      wv[0][u] = *slot(k, 0, u);
      wv[1][u] = *slot(k, 1, u);
    }
    issue(k + S);  // this thread's slot k % S is read: refill it
    StepDot(wv, xs + lane + k * 32 * kUnroll, a0, a1);
  }
  StorePair(ph.y, r0, a0, a1, lane);
}
template <int S>
void LaunchLaneRing(const Phase& ph, cudaStream_t st) {
  const size_t smem = size_t{S} * 2 * kUnroll * kThreads * 16 + ph.cols * 2;
  CHECK_OK(witcert::cuda_launch::Launch(LaneRingKernel<S>, dim3((ph.rows / 2 + kWarps - 1) / kWarps), kThreads, smem,
                                        st, true, ph));
}

// (g) A kernel with no work that holds `smem` bytes of shared memory on one CTA per SM, placed
// between GEMV phases as the batch-1 step's attention kernels sit between its GEMVs.
__global__ void __launch_bounds__(kThreads) SpacerKernel(int touch) {
  extern __shared__ uint4 held[];
  witcert::cuda_launch::WaitForPreviousKernel();
  witcert::cuda_launch::AllowNextKernelToStart();
  if (touch < 0) held[threadIdx.x] = make_uint4(0, 0, 0, 0);  // never: keeps the allocation honest
}

// Random bf16 weights and fp32 x, for the check that (e) computes what (a) does.
__global__ void FillRandom(uint16_t* w, int64_t n, float* x, int nx, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9e3779b9u ^ seed;
    h ^= h >> 15; h *= 0x85ebca6bu; h ^= h >> 13;
    w[i] = Bf16((static_cast<float>(h & 0xffff) / 65536.0f - 0.5f) * 0.1f);
    if (i < nx) x[i] = (static_cast<float>((h >> 16) & 0xff) / 256.0f - 0.5f) * 4.0f;
  }
}

// Phases [begin, end) in one cooperative launch, grid barriers between them.
__global__ void __launch_bounds__(kThreads) ChainKernel(const Chain c, int begin, int end) {
  __shared__ uint4 xs[kMaxCols / 8];
  cg::grid_group grid = cg::this_grid();
  const int lane = threadIdx.x & 31;
  const int64_t wg = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int64_t nwarps = static_cast<int64_t>(gridDim.x) * kWarps;
  uint4 wv[2][kUnroll];
  Prefetch(c.ph[begin], wg, lane, wv);
  for (int p = begin; p < end; ++p) {
    RunPhase(c.ph[p], wg, nwarps, lane, wv, xs);
    if (p + 1 < end) {
      Prefetch(c.ph[p + 1], wg, lane, wv);  // weights of the next phase: in flight across the barrier
      grid.sync();
    }
  }
}

float Median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int layers = argc > 1 ? std::atoi(argv[1]) : 16;
  const int replays = argc > 2 ? std::atoi(argv[2]) : 9;
  const int shapes[3][2] = {{4096, 4096}, {28672, 4096}, {4096, 14336}};  // O, gate|up, down (rows, cols)
  // Weights per layer (distinct per layer, so nothing is served from L2), activations.
  std::vector<uint16_t*> w(3 * layers);
  double bytes_per_layer = 0;
  for (int s = 0; s < 3; ++s) bytes_per_layer += 2.0 * shapes[s][0] * shapes[s][1];
  for (int l = 0; l < layers; ++l) {
    for (int s = 0; s < 3; ++s) {
      const size_t n = size_t{static_cast<size_t>(shapes[s][0])} * shapes[s][1];
      CHECK(cudaMalloc(&w[3 * l + s], n * 2));
      CHECK(cudaMemset(w[3 * l + s], 0x3c, n * 2));  // bf16 ≈ 0.0115
    }
  }
  float *x = nullptr, *y[3] = {};
  CHECK(cudaMalloc(&x, kMaxCols * 4));
  CHECK(cudaMemset(x, 0, kMaxCols * 4));
  for (int s = 0; s < 3; ++s) CHECK(cudaMalloc(&y[s], 28672 * 4));
  Chain all{};
  all.n = 3 * layers;
  if (all.n > 64) { std::fprintf(stderr, "at most 21 layers\n"); return 1; }
  for (int l = 0; l < layers; ++l) {
    for (int s = 0; s < 3; ++s) {
      // O reads x (as wide as its cols), gate|up reads O's output, down reads gate|up's first cols.
      const float* in = s == 0 ? (l == 0 ? x : y[2]) : y[s - 1];
      all.ph[3 * l + s] = Phase{w[3 * l + s], shapes[s][0], shapes[s][1], in, y[s]};
    }
  }
  int dev = 0, sms = 0, per_sm = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ChainKernel, kThreads, 0));
  const int coop_grid = sms * per_sm;
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device %s, %d SMs, %d chain CTAs per SM; %d layers of O %dx%d, gate|up %dx%d, down %dx%d (%.1f MB/layer)\n",
              prop.name, sms, per_sm, layers, shapes[0][0], shapes[0][1], shapes[1][0], shapes[1][1], shapes[2][0],
              shapes[2][1], bytes_per_layer / 1e6);
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));

  // Graph replays where the launches can be captured; else the launches themselves, back to back
  // (each kernel is ≫ its launch, so the GPU stays fed).
  auto time_graph = [&](auto enqueue, const char* name, int grid_note) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    bool graph = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
    if (graph) {
      enqueue();
      graph = cudaStreamEndCapture(st, &g) == cudaSuccess && g != nullptr &&
              cudaGraphInstantiate(&ge, g, 0) == cudaSuccess;
      if (!graph) (void)cudaGetLastError();
    }
    std::vector<float> t;
    for (int i = 0; i < replays + 2; ++i) {
      CHECK(cudaEventRecord(e0, st));
      if (graph) {
        CHECK(cudaGraphLaunch(ge, st));
      } else {
        enqueue();
      }
      CHECK(cudaEventRecord(e1, st));
      CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (i >= 2) t.push_back(ms);
    }
    const double us = 1e3 * Median(t) / layers;
    std::printf("%-44s grid %5d %s: %8.2f us/layer  %.3f TB/s\n", name, grid_note, graph ? "graph " : "direct", us,
                bytes_per_layer / (us * 1e-6) / 1e12);
    if (ge != nullptr) cudaGraphExecDestroy(ge);
    if (g != nullptr) cudaGraphDestroy(g);
  };

  CHECK(cudaFuncSetAttribute(RingChainKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kRingSmem)));
  unsigned* arrivals = nullptr;  // one grid-barrier counter per layer, zeroed before each replay
  CHECK(cudaMalloc(&arrivals, 64 * sizeof(unsigned)));
  auto launch_ring = [&](const Chain& c, int b, int e, int slots) {
    unsigned* counter = arrivals + b / 3;
    void* args[] = {const_cast<Chain*>(&c), &b, &e, &counter, &slots};
    CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(RingChainKernel), sms, kThreads, args, kRingSmem, st));
  };
  for (auto* k : {LaneRingKernel<2>, LaneRingKernel<3>, LaneRingKernel<4>}) {
    CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 160 * 1024));
  }
  // (e) and (f) against (a) on random data, layer 0's three phases: the same sums up to fp32 order.
  {
    float* x0 = nullptr;
    std::vector<float*> ya(3), ye(3);
    CHECK(cudaMalloc(&x0, kMaxCols * 4));
    for (int p = 0; p < 3; ++p) {
      const Phase& ph = all.ph[p];
      CHECK(cudaMalloc(&ya[p], 28672 * 4));
      CHECK(cudaMalloc(&ye[p], 28672 * 4));
      FillRandom<<<1024, 256, 0, st>>>(const_cast<uint16_t*>(ph.w), int64_t{ph.rows} * ph.cols, x0, p == 0 ? ph.cols : 0, 17u + p);
    }
    Chain ca = all, ce = all;
    for (int p = 0; p < 3; ++p) {
      ca.ph[p].x = p == 0 ? x0 : ya[p - 1];
      ca.ph[p].y = ya[p];
      ce.ph[p].x = p == 0 ? x0 : ye[p - 1];
      ce.ph[p].y = ye[p];
      CHECK_OK(witcert::cuda_launch::Launch(PhaseKernel, dim3((ca.ph[p].rows / 2 + kWarps - 1) / kWarps), kThreads, 0,
                                            st, false, ca.ph[p]));
    }
    CHECK(cudaMemsetAsync(arrivals, 0, 64 * sizeof(unsigned), st));
    launch_ring(ce, 0, 3, kRingSlots);
    CHECK(cudaStreamSynchronize(st));
    for (int p = 0; p < 3; ++p) {
      const int rows = all.ph[p].rows;
      std::vector<float> ha(rows), he(rows);
      CHECK(cudaMemcpy(ha.data(), ya[p], rows * 4, cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(he.data(), ye[p], rows * 4, cudaMemcpyDeviceToHost));
      double worst = 0, scale = 0;
      for (int r = 0; r < rows; ++r) {
        worst = std::max(worst, static_cast<double>(std::fabs(ha[r] - he[r])));
        scale = std::max(scale, static_cast<double>(std::fabs(ha[r])));
      }
      std::printf("check phase %d (%dx%d): max |(a) - (e)| %.3g (max |y| %.3g)%s\n", p, rows, all.ph[p].cols, worst,
                  scale, worst <= 1e-3 * scale + 1e-6 ? "" : "  MISMATCH");
    }
    // (f) runs (a)'s arithmetic: the same bits, phase by phase on (a)'s inputs.
    for (int p = 0; p < 3; ++p) {
      Phase pf = ca.ph[p];
      pf.y = ye[p];
      LaunchLaneRing<3>(pf, st);
      CHECK(cudaStreamSynchronize(st));  // st does not synchronize with the legacy stream's copies
      const int rows = all.ph[p].rows;
      std::vector<float> ha(rows), hf(rows);
      CHECK(cudaMemcpy(ha.data(), ya[p], rows * 4, cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(hf.data(), ye[p], rows * 4, cudaMemcpyDeviceToHost));
      std::printf("check phase %d: (f) %s (a) bit for bit\n", p,
                  std::memcmp(ha.data(), hf.data(), rows * 4) == 0 ? "equals" : "DIFFERS FROM");
    }
    CHECK(cudaFree(x0));
    for (int p = 0; p < 3; ++p) {
      CHECK(cudaFree(ya[p]));
      CHECK(cudaFree(ye[p]));
    }
  }
  for (int round = 0; round < 2; ++round) {
    CHECK(cudaGetLastError());
    // (a) a launch per phase, dependent launches, one CTA per 8 row pairs (as the engine's GEMV).
    time_graph([&] {
      for (int p = 0; p < all.n; ++p) {
        const dim3 grid((all.ph[p].rows / 2 + kWarps - 1) / kWarps);
        CHECK_OK(witcert::cuda_launch::Launch(PhaseKernel, grid, kThreads, 0, st, true, all.ph[p]));
      }
    }, "(a) a launch per phase (PDL)", (all.ph[1].rows / 2 + kWarps - 1) / kWarps);
    // (d) a launch per phase, kRowsD whole rows per CTA (columns split across the warps).
    time_graph([&] {
      for (int p = 0; p < all.n; ++p) {
        const dim3 grid(all.ph[p].rows / kRowsD);
        auto* kernel = all.ph[p].cols == 4096 ? PhaseKernelRowsPerCta<2> : PhaseKernelRowsPerCta<7>;
        CHECK_OK(witcert::cuda_launch::Launch(kernel, grid, kThreads, 0, st, true, all.ph[p]));
      }
    }, "(d) a launch per phase, 4 whole rows per CTA", all.ph[1].rows / kRowsD);
    for (int slots : {6, 4}) {
      char name[64];
      std::snprintf(name, sizeof name, "(e) ring chain, %d x 32 KB per SM", slots);
      time_graph([&] {
        CHECK(cudaMemsetAsync(arrivals, 0, 64 * sizeof(unsigned), st));
        for (int l = 0; l < layers; ++l) launch_ring(all, 3 * l, 3 * l + 3, slots);
      }, name, sms);
    }
    time_graph([&] {
      for (int p = 0; p < all.n; ++p) launch_ring(all, p, p + 1, kRingSlots);
    }, "(e') the same kernel, a launch per phase", sms);
    time_graph([&] { for (int p = 0; p < all.n; ++p) LaunchLaneRing<2>(all.ph[p], st); }, "(f) lane slots, 2 steps", 0);
    time_graph([&] { for (int p = 0; p < all.n; ++p) LaunchLaneRing<3>(all.ph[p], st); }, "(f) lane slots, 3 steps", 0);
    time_graph([&] { for (int p = 0; p < all.n; ++p) LaunchLaneRing<4>(all.ph[p], st); }, "(f) lane slots, 4 steps", 0);
    // (b) one cooperative launch per layer.
    time_graph([&] {
      for (int l = 0; l < layers; ++l) {
        int b = 3 * l, e = 3 * l + 3;
        void* args[] = {&all, &b, &e};
        (void)cudaLaunchCooperativeKernel(reinterpret_cast<void*>(ChainKernel), coop_grid, kThreads, args, 0, st);
      }
    }, "(b) a persistent launch per layer", coop_grid);
    // (c) one cooperative launch for every layer.
    time_graph([&] {
      int b = 0, e = all.n;
      void* args[] = {&all, &b, &e};
      (void)cudaLaunchCooperativeKernel(reinterpret_cast<void*>(ChainKernel), coop_grid, kThreads, args, 0, st);
    }, "(c) one persistent launch for all layers", coop_grid);
  }
  // (g) Added after this session's device time was spent; not run yet. (a) under each preferred
  // shared-memory carveout (the engine's register GEMV got 0.40-0.51 ms a step slower at the
  // largest), then (a) with a spacer between the phases holding little or much shared memory.
  const int carveouts[] = {cudaSharedmemCarveoutDefault, cudaSharedmemCarveoutMaxL1, 50, cudaSharedmemCarveoutMaxShared};
  auto chain_a = [&](bool spacer, int spacer_smem) {
    for (int p = 0; p < all.n; ++p) {
      const dim3 grid((all.ph[p].rows / 2 + kWarps - 1) / kWarps);
      CHECK_OK(witcert::cuda_launch::Launch(PhaseKernel, grid, kThreads, 0, st, true, all.ph[p]));
      if (spacer) {
        CHECK_OK(witcert::cuda_launch::Launch(SpacerKernel, dim3(sms), kThreads, static_cast<size_t>(spacer_smem), st,
                                              true, 0));
      }
    }
  };
  for (int c : carveouts) {
    CHECK(cudaFuncSetAttribute(PhaseKernel, cudaFuncAttributePreferredSharedMemoryCarveout, c));
    char name[64];
    std::snprintf(name, sizeof name, "(g) (a), carveout preference %d", c);
    time_graph([&] { chain_a(false, 0); }, name, 0);
  }
  CHECK(cudaFuncSetAttribute(PhaseKernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutDefault));
  CHECK(cudaFuncSetAttribute(SpacerKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  for (int kb : {0, 16, 100, 200}) {
    char name[64];
    std::snprintf(name, sizeof name, "(g) (a), a spacer with %d KB between phases", kb);
    time_graph([&] { chain_a(true, kb * 1024); }, name, sms);
  }
  return 0;
}
