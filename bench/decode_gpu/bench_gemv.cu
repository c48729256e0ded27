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

namespace {

// y [n, rows] = x [n, cols] · W [rows, cols]ᵀ, as CudaBackend::Gemm calls cuBLAS.
void CublasGemm(cublasHandle_t h, const uint16_t* w, const uint16_t* x, float* y, long rows, long cols, int n) {
  const float alpha = 1.0f, beta = 0.0f;
  CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), n, static_cast<int>(cols), &alpha, w,
                     CUDA_R_16BF, static_cast<int>(cols), x, CUDA_R_16BF, static_cast<int>(cols), &beta, y, CUDA_R_32F,
                     static_cast<int>(rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// µs per call of run(i), i = 0 … reps − 1, after one warm-up pass over the `copies` weight copies.
template <class Run>
double MicrosPerCall(Run run, int copies, int reps, cudaEvent_t a, cudaEvent_t b) {
  for (int i = 0; i < copies; ++i) run(i);
  CHECK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) run(i);
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  return 1e3 * ms / reps;
}

// One shape's operands: weight copies, x [n, cols] bf16, y [n, rows] fp32.
struct Operands {
  Operands(long rows, long cols, int n) : w(static_cast<size_t>(rows) * cols * 2) {
    CHECK(cudaMalloc(&x, cols * 2 * n));
    CHECK(cudaMemset(x, 0x3c, cols * 2 * n));
    CHECK(cudaMalloc(&y, rows * 4 * n));
  }
  ~Operands() {
    cudaFree(x);
    cudaFree(y);
  }
  Operands(const Operands&) = delete;
  Operands& operator=(const Operands&) = delete;
  WeightCopies w;
  uint16_t* x = nullptr;
  float* y = nullptr;
};

}  // namespace

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
    const Operands o(s.rows, s.cols, 1);
    double us[4];
    for (int v = 0; v < 4; ++v) {
      auto run = [&](int i) {
        if (v == 0) {
          CublasGemm(h, o.w[i], o.x, o.y, s.rows, s.cols, 1);
        } else {
          CHECK(!witcert::GemvBf16Cuda(o.x, s.cols, o.w[i], s.rows, o.y, 0.0f, nullptr, {1 << (v - 1)}).ok);
        }
      };
      us[v] = MicrosPerCall(run, o.w.size(), reps, a, b);
    }
    double best = us[0];
    for (double t : us) best = t < best ? t : best;
    std::printf("| %s | %ld x %ld | %.2f | %.2f | %.2f | %.2f | %.2f |\n", s.name, s.rows, s.cols, us[0], us[1],
                us[2], us[3], bytes / best * 1e-6);
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
    const Operands o(s.rows, s.cols, 64);
    std::printf("| %s | %ld x %ld |", s.name, s.rows, s.cols);
    for (int n : ns) {
      const double us =
          MicrosPerCall([&](int i) { CublasGemm(h, o.w[i], o.x, o.y, s.rows, s.cols, n); }, o.w.size(), reps, a, b);
      std::printf(" %.2f (%.2f) |", us, bytes / us * 1e-6);
    }
    std::printf("\n");
  }
  return 0;
}
