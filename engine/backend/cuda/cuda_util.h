// CUDA plumbing of the CUDA backend: CUDA / cuBLAS / kernel errors as absl::Status, and an
// owning device array (grow-only scratch, freed on destruction). Nothing here aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "kernels/cuda/cuda_status.h"

namespace witcert {

inline absl::Status FromCudaStatus(const CudaStatus& st) {
  if (st.ok) return absl::OkStatus();
  return st.out_of_memory ? absl::ResourceExhaustedError(st.message) : absl::InternalError(st.message);
}

// Clears the runtime's last-error state as CudaErrorStatus does (a failed cudaMalloc must not
// fail the next kernel's launch check).
inline absl::Status CudaError(cudaError_t err, const char* expr) {
  if (err == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  const std::string msg = absl::StrCat(expr, ": ", cudaGetErrorName(err), " (",
                                       cudaGetErrorString(err), ")");
  return err == cudaErrorMemoryAllocation ? absl::ResourceExhaustedError(msg)
                                          : absl::InternalError(msg);
}

inline absl::Status CublasError(cublasStatus_t st, const char* expr) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(expr, ": cuBLAS status ", static_cast<int>(st)));
}

}  // namespace witcert

// Evaluates a cudaError_t / cublasStatus_t / CudaStatus expression and returns an
// absl::Status from the enclosing function on failure.
#define WITCERT_CUDA_OK(expr) RETURN_IF_ERROR(::witcert::CudaError((expr), #expr))
#define WITCERT_CUBLAS_OK(expr) RETURN_IF_ERROR(::witcert::CublasError((expr), #expr))
#define WITCERT_KERNEL_OK(expr) RETURN_IF_ERROR(::witcert::FromCudaStatus(expr))

namespace witcert {

// A device array of T. Grow() keeps the allocation when it is already large enough (the
// contents are then NOT preserved either way: it is scratch).
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray() { Reset(); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      Reset();
      p_ = o.p_, n_ = o.n_;
      o.p_ = nullptr, o.n_ = 0;
    }
    return *this;
  }

  [[nodiscard]] absl::Status Grow(size_t n) {
    if (n <= n_) return absl::OkStatus();
    Reset();
    void* p = nullptr;
    RETURN_IF_ERROR(CudaError(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc"));
    p_ = static_cast<T*>(p);
    n_ = n;
    return absl::OkStatus();
  }
  void Reset() {
    if (p_ != nullptr) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// Page-locked host scratch (fast async copies), grow-only like DeviceArray.
template <class T>
class PinnedArray {
 public:
  PinnedArray() = default;
  ~PinnedArray() {
    if (p_ != nullptr) cudaFreeHost(p_);
  }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  [[nodiscard]] absl::Status Grow(size_t n) {
    if (n <= n_) return absl::OkStatus();
    if (p_ != nullptr) cudaFreeHost(p_);
    p_ = nullptr;
    n_ = 0;
    void* p = nullptr;
    RETURN_IF_ERROR(CudaError(cudaMallocHost(&p, n * sizeof(T)), "cudaMallocHost"));
    p_ = static_cast<T*>(p);
    n_ = n;
    return absl::OkStatus();
  }
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace witcert
