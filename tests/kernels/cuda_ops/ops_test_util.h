// Helpers of the CUDA op tests: device detection (tests skip without a GPU), a device vector,
// seeded random inputs.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_status.h"

namespace witcert::testing {

inline bool GpuPresent() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!::witcert::testing::GpuPresent()) GTEST_SKIP() << "no CUDA device"
#define EXPECT_KERNEL_OK(expr)                          \
  do {                                                  \
    ::witcert::CudaStatus st_ = (expr);                 \
    ASSERT_TRUE(st_.ok) << st_.message;                 \
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);    \
  } while (0)

// A device copy of a host vector; Get() copies back.
template <class T>
class Dev {
 public:
  explicit Dev(const std::vector<T>& h) : n_(h.size()) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(1, n_) * sizeof(T)), cudaSuccess);
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  explicit Dev(size_t n, int poison_byte = 0x7f) : n_(n) {  // poisoned: unwritten shows
    EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(1, n_) * sizeof(T)), cudaSuccess);
    cudaMemset(p_, poison_byte, std::max<size_t>(1, n_) * sizeof(T));
  }
  ~Dev() { cudaFree(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  T* get() const { return p_; }
  std::vector<T> Get() const {
    std::vector<T> h(n_);
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace witcert::testing
