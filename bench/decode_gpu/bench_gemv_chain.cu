// Where the batch-1 GEMV chain's time goes between kernels: the same bf16 GEMV phases (a layer's
// O, gate|up and down shapes of Llama-3.1-8B, each reading the previous phase's output) run
//  (a) one launch per phase, each a programmatic dependent launch that issues its first weight
//      loads before waiting for its predecessor (as the engine's GEMVs do);
//  (b) one persistent cooperative launch per layer, phases separated by grid barriers, each warp
//      issuing its next phase's first weight loads before the barrier;
//  (c) one persistent launch for every layer;
//  (d) as (a), but each CTA reads whole rows, its warps splitting the columns.
// Times are per layer (median over graph replays of `layers` layers), against the bytes read.
// Usage: bench_gemv_chain [layers=16] [replays=9]. Needs only CUDA.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

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
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint4 xv = xs[i + 32 * u];
        a0 = Dot8(wv[0][u], xv, a0);
        a1 = Dot8(wv[1][u], xv, a1);
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      a0 += __shfl_xor_sync(0xffffffffu, a0, o);
      a1 += __shfl_xor_sync(0xffffffffu, a1, o);
    }
    if (lane == 0) {
      ph.y[2 * pair] = a0;
      ph.y[2 * pair + 1] = a1;
    }
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
  return 0;
}
