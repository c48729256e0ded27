// Shared by the CUDA-only GPU benches (bench_gemv, bench_l2_prefetch).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

// CHECK(expr): a non-zero status (cudaError_t, cublasStatus_t, or `!status.ok`) prints the
// expression and its place and exits; a bench has nothing to recover.
#define CHECK(x)                                                              \
  do {                                                                        \
    if ((x) != 0) {                                                           \
      std::fprintf(stderr, "%s failed at %s:%d\n", #x, __FILE__, __LINE__); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

// Copies of one bf16 weight matrix, ≥ 256 MB in all, so a bench that cycles through them finds
// none in L2 (as a decode step, whose weights stream through once).
class WeightCopies {
 public:
  explicit WeightCopies(size_t bytes) : p_(static_cast<size_t>((size_t{256} << 20) / bytes + 1)) {
    for (auto& p : p_) {
      CHECK(cudaMalloc(&p, bytes));
      CHECK(cudaMemset(p, 0x3c, bytes));
    }
  }
  ~WeightCopies() {
    for (auto p : p_) cudaFree(p);
  }
  WeightCopies(const WeightCopies&) = delete;
  WeightCopies& operator=(const WeightCopies&) = delete;
  int size() const { return static_cast<int>(p_.size()); }
  uint16_t* operator[](int i) const { return p_[static_cast<size_t>(i) % p_.size()]; }

 private:
  std::vector<uint16_t*> p_;
};
