// Causal prefill attention on the GPU: the tensor-core kernel next to the exact fp32 kernel it
// replaced, in one run, so the speedup is read off one table.
//
// Shapes: Llama-3.1-8B (Hq 32, Hkv 8, d 128) and SmolLM2 (Hq 9, Hkv 3, d 64), chunk lengths
// n ∈ {2048, 8192, 32768}, dense rows (strides = widths). Inputs are hashed uniform values in
// [-1.5, 1.5] (never zeros). Timing: cudaEvents around each call on one stream, warm-ups
// first, median of the timed calls. FLOPs counted as causal: 4·(n²/2)·Hq·d (QKᵀ and PV, the
// masked half excluded). Also prints max |new − old| over all outputs, a sanity check of the
// fast path against the exact one (expected ~1e-3: fp16 operands). "rows" is the tensor-core
// kernel's query rows per warp (its default pick unless --rows-per-warp says).
// Usage: bench_prefill_attention [--quick] [--no-fp32] [--rows-per-warp 16|32]
//   --quick    n = 2048 only;  --no-fp32   skip the old kernel (it takes seconds at 32k).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/cuda/ops/prefill_attention_paths.h"

namespace witcert {
namespace {

#define BENCH_CUDA(expr)                                                                         \
  do {                                                                                           \
    cudaError_t e_ = (expr);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      return false;                                                                              \
    }                                                                                            \
  } while (0)
#define BENCH_OK(expr)                                                             \
  do {                                                                             \
    CudaStatus st_ = (expr);                                                       \
    if (!st_.ok) {                                                                 \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, st_.message.c_str()); \
      return false;                                                                \
    }                                                                              \
  } while (0)

__device__ uint64_t HashIndex(uint64_t x) {  // a 64-bit finalizer: well-mixed, stateless
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

__global__ void FillUniform(float* x, int64_t n, uint64_t salt) {  // [-1.5, 1.5)
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t h = HashIndex(salt * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i));
    x[i] = 3.0f * (static_cast<float>(h >> 40) * 5.9604645e-8f) - 1.5f;
  }
}

__device__ float max_abs_diff;  // scratch of MaxAbsDiff

__global__ void MaxAbsDiff(const float* a, const float* b, int64_t n) {
  float m = 0.0f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float d = fabsf(a[i] - b[i]);
    m = d > m || d != d ? d : m;  // NaN wins
  }
  // Non-negative floats order like their bit patterns, a positive NaN above +inf.
  unsigned bits = __float_as_uint(m);
  for (int o = 16; o > 0; o >>= 1) bits = max(bits, __shfl_xor_sync(~0u, bits, o));
  if (threadIdx.x % 32 == 0) atomicMax(reinterpret_cast<unsigned*>(&max_abs_diff), bits);
}

struct Model {
  const char* name;
  int32_t hq, hkv, d;
};

int rows_per_warp = 0;  // --rows-per-warp; 0: the kernel's default

CudaStatus MmaWithRows(const float* q, int64_t q_stride, const float* k, const float* v,
                       int64_t kv_stride, int64_t n, int32_t hq, int32_t hkv, int32_t d, float* out,
                       int64_t out_stride, cudaStream_t stream) {
  return PrefillAttentionMmaCudaRows(rows_per_warp, q, q_stride, k, v, kv_stride, n, hq, hkv, d,
                                     out, out_stride, stream);
}

struct Timing {
  double ms = 0;
  bool ran = false;
};

using AttentionFn = CudaStatus (*)(const float*, int64_t, const float*, const float*, int64_t,
                                   int64_t, int32_t, int32_t, int32_t, float*, int64_t,
                                   cudaStream_t);

// Median of `iters` event-timed calls after `warmups` untimed ones.
bool TimeCalls(AttentionFn fn, const Model& m, int64_t n, const float* q, const float* k,
               const float* v, float* out, int warmups, int iters, cudaStream_t stream,
               Timing* result) {
  const int64_t q_w = int64_t{m.hq} * m.d, kv_w = int64_t{m.hkv} * m.d;
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int it = 0; it < warmups + iters; ++it) {
    BENCH_CUDA(cudaEventRecord(start, stream));
    BENCH_OK(fn(q, q_w, k, v, kv_w, n, m.hq, m.hkv, m.d, out, q_w, stream));
    BENCH_CUDA(cudaEventRecord(stop, stream));
    BENCH_CUDA(cudaEventSynchronize(stop));
    float t = 0;
    BENCH_CUDA(cudaEventElapsedTime(&t, start, stop));
    if (it >= warmups) ms.push_back(t);
  }
  BENCH_CUDA(cudaEventDestroy(start));
  BENCH_CUDA(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  result->ms = ms[ms.size() / 2];
  result->ran = true;
  return true;
}

bool RunShape(const Model& m, int64_t n, bool with_fp32, cudaStream_t stream) {
  const int64_t q_elems = n * m.hq * m.d, kv_elems = n * m.hkv * m.d;
  float *q, *k, *v, *out_new, *out_old;
  BENCH_CUDA(cudaMalloc(&q, q_elems * sizeof(float)));
  BENCH_CUDA(cudaMalloc(&k, kv_elems * sizeof(float)));
  BENCH_CUDA(cudaMalloc(&v, kv_elems * sizeof(float)));
  BENCH_CUDA(cudaMalloc(&out_new, q_elems * sizeof(float)));
  BENCH_CUDA(cudaMalloc(&out_old, q_elems * sizeof(float)));
  FillUniform<<<1024, 256, 0, stream>>>(q, q_elems, 1);
  FillUniform<<<1024, 256, 0, stream>>>(k, kv_elems, 2);
  FillUniform<<<1024, 256, 0, stream>>>(v, kv_elems, 3);
  BENCH_CUDA(cudaGetLastError());

  const double flops = 4.0 * (static_cast<double>(n) * n / 2) * m.hq * m.d;
  const int iters = n >= 32768 ? 5 : 10;
  Timing mma, fp32;
  if (!TimeCalls(MmaWithRows, m, n, q, k, v, out_new, 2, iters, stream, &mma)) {
    return false;
  }
  float diff = NAN;
  if (with_fp32) {
    const int old_iters = n >= 8192 ? 3 : 5;
    if (!TimeCalls(PrefillAttentionFp32Cuda, m, n, q, k, v, out_old, 1, old_iters, stream, &fp32)) {
      return false;
    }
    const float zero = 0.0f;
    BENCH_CUDA(cudaMemcpyToSymbolAsync(max_abs_diff, &zero, sizeof(zero), 0, cudaMemcpyHostToDevice,
                                       stream));
    MaxAbsDiff<<<1024, 256, 0, stream>>>(out_new, out_old, q_elems);
    BENCH_CUDA(cudaGetLastError());
    BENCH_CUDA(cudaMemcpyFromSymbolAsync(&diff, max_abs_diff, sizeof(diff), 0,
                                         cudaMemcpyDeviceToHost, stream));
    BENCH_CUDA(cudaStreamSynchronize(stream));
  }
  const int rows =
      rows_per_warp != 0 ? rows_per_warp : PrefillAttentionMmaDefaultRowsPerWarp(n, m.hq);
  std::printf("%-8s %6lld %3d %3d %4d | %4d %10.3f %8.1f |", m.name, static_cast<long long>(n),
              m.hq, m.hkv, m.d, rows, mma.ms, flops / (mma.ms * 1e-3) / 1e12);
  if (fp32.ran) {
    std::printf(" %10.2f %8.2f | %8.1fx | %.2e\n", fp32.ms, flops / (fp32.ms * 1e-3) / 1e12,
                fp32.ms / mma.ms, diff);
  } else {
    std::printf(" %10s %8s | %9s | %s\n", "-", "-", "-", "-");
  }
  std::fflush(stdout);
  for (float* p : {q, k, v, out_new, out_old}) BENCH_CUDA(cudaFree(p));
  return true;
}

int Main(int argc, char** argv) {
  bool quick = false, with_fp32 = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--no-fp32") == 0) {
      with_fp32 = false;
    } else if (std::strcmp(argv[i], "--rows-per-warp") == 0 && i + 1 < argc) {
      rows_per_warp = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--no-fp32] [--rows-per-warp 16|32]\n", argv[0]);
      return 2;
    }
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  std::printf("device: %s, %d SMs; mma rows per warp: %d (0 = default)\n", prop.name,
              prop.multiProcessorCount, rows_per_warp);
  cudaStream_t stream;
  if (cudaStreamCreate(&stream) != cudaSuccess) return 1;
  std::printf("%-8s %6s %3s %3s %4s | %4s %10s %8s | %10s %8s | %9s | %s\n", "model", "n", "Hq",
              "Hkv", "d", "rows", "mma ms", "TFLOP/s", "fp32 ms", "TFLOP/s", "speedup",
              "max|new-old|");
  const Model models[] = {{"llama8b", 32, 8, 128}, {"smollm2", 9, 3, 64}};
  std::vector<int64_t> lengths = {2048, 8192, 32768};
  if (quick) lengths = {2048};
  for (const Model& m : models) {
    for (int64_t n : lengths) {
      if (!RunShape(m, n, with_fp32, stream)) return 1;
    }
  }
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace witcert

int main(int argc, char** argv) { return witcert::Main(argc, argv); }
