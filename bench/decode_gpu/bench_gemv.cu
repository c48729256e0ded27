// Batch-1 bf16 GEMV on the 8B model's shapes: cuBLAS (cublasGemmEx, n = 1, as the CUDA backend
// calls it) vs GemvBf16Cuda with 1, 2 and 4 rows per warp, side by side in one run. Each shape
// cycles through enough weight copies (≥ 256 MB) that no repetition finds them in L2, as in a
// decode step where the weights stream through once. Prints µs per call and TB/s of weights;
// then cuBLAS at n = 1 … 64 tokens, the batched step's path.
//   bench_gemv [reps=50]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "bench/decode_gpu/bench_gpu_util.h"
#include "kernels/cuda/ops/gemv_bf16_cuda.h"

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 50;
  struct Shape {
    const char* name;
    long rows, cols;
  };
  const Shape shapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate|up", 28672, 4096},
                          {"down", 4096, 14336}, {"head", 128256, 4096}};
  cublasHandle_t h;
  CHECK(cublasCreate(&h));
  void* ws = nullptr;
  CHECK(cudaMalloc(&ws, 32 << 20));
  CHECK(cublasSetWorkspace(h, ws, 32 << 20));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::printf("| shape | rows x cols | cuBLAS (us) | GEMV R=1 | R=2 | R=4 | best TB/s |\n|---|---|---|---|---|---|---|\n");
  for (const Shape& s : shapes) {
    const size_t bytes = static_cast<size_t>(s.rows) * s.cols * 2;
    const WeightCopies w(bytes);
    const int copies = w.size();
    uint16_t* x;
    float* y;
    CHECK(cudaMalloc(&x, s.cols * 2));
    CHECK(cudaMemset(x, 0x3c, s.cols * 2));
    CHECK(cudaMalloc(&y, s.rows * 4));
    double us[4];
    for (int v = 0; v < 4; ++v) {
      auto run = [&](int i) {
        if (v == 0) {
          const float alpha = 1.0f, beta = 0.0f;
          CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(s.rows), 1,
                             static_cast<int>(s.cols), &alpha, w[i], CUDA_R_16BF,
                             static_cast<int>(s.cols), x, CUDA_R_16BF, static_cast<int>(s.cols), &beta, y,
                             CUDA_R_32F, static_cast<int>(s.rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        } else {
          CHECK(!witcert::GemvBf16Cuda(x, s.cols, w[i], s.rows, y, 0.0f, nullptr, {1 << (v - 1)}).ok);
        }
      };
      for (int i = 0; i < copies; ++i) run(i);  // warm-up
      CHECK(cudaEventRecord(a));
      for (int i = 0; i < reps; ++i) run(i);
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, a, b));
      us[v] = 1e3 * ms / reps;
    }
    double best = us[0];
    for (double t : us) best = t < best ? t : best;
    std::printf("| %s | %ld x %ld | %.2f | %.2f | %.2f | %.2f | %.2f |\n", s.name, s.rows, s.cols, us[0], us[1],
                us[2], us[3], bytes / best * 1e-6);
    cudaFree(x);
    cudaFree(y);
  }

  // The batched decode step's GEMMs: cuBLAS at n tokens (the CUDA backend's path for n > 1),
  // µs per call and the weights' TB/s. A batch-n step streams each weight once, like n = 1, so
  // the bound is the same bytes; the table says how far from it the n > 1 path runs.
  const int ns[] = {1, 2, 4, 8, 16, 32, 64};
  std::printf("\n| shape | rows x cols |");
  for (int n : ns) std::printf(" n=%d us (TB/s) |", n);
  std::printf("\n|---|---|");
  for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); ++i) std::printf("---|");
  std::printf("\n");
  for (const Shape& s : shapes) {
    const size_t bytes = static_cast<size_t>(s.rows) * s.cols * 2;
    const WeightCopies w(bytes);
    const int copies = w.size();
    uint16_t* x;
    float* y;
    CHECK(cudaMalloc(&x, s.cols * 2 * 64));
    CHECK(cudaMemset(x, 0x3c, s.cols * 2 * 64));
    CHECK(cudaMalloc(&y, s.rows * 4 * 64));
    std::printf("| %s | %ld x %ld |", s.name, s.rows, s.cols);
    for (int n : ns) {
      auto run = [&](int i) {
        const float alpha = 1.0f, beta = 0.0f;
        CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(s.rows), n, static_cast<int>(s.cols),
                           &alpha, w[i], CUDA_R_16BF, static_cast<int>(s.cols), x, CUDA_R_16BF,
                           static_cast<int>(s.cols), &beta, y, CUDA_R_32F, static_cast<int>(s.rows),
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      };
      for (int i = 0; i < copies; ++i) run(i);  // warm-up
      CHECK(cudaEventRecord(a));
      for (int i = 0; i < reps; ++i) run(i);
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, a, b));
      const double us = 1e3 * ms / reps;
      std::printf(" %.2f (%.2f) |", us, bytes / us * 1e-6);
    }
    std::printf("\n");
    cudaFree(x);
    cudaFree(y);
  }
  return 0;
}
