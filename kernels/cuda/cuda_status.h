// Errors of the CUDA kernels without Abseil, so witcert_kernels_cuda builds on the GPU host.
//
// The engine wraps a failed CudaStatus into absl::Status at its boundary. WITCERT_CUDA_CALL
// returns the failure (with file:line and CUDA's error string) from the enclosing function;
// nothing here ever exits or aborts.
#pragma once

#include <string>
#include <utility>

#include <cuda_runtime.h>

namespace witcert {

struct [[nodiscard]] CudaStatus {
  bool ok = true;
  std::string message;
  bool out_of_memory = false;  // a failed allocation: the engine reports it as ResourceExhausted

  static CudaStatus Ok() { return CudaStatus(); }
  static CudaStatus Error(std::string msg) { return CudaStatus{false, std::move(msg)}; }
};

// Also clears the runtime's last-error state: a non-sticky error (a failed allocation, a bad
// launch configuration) is reported here once, not again by the next unrelated check.
inline CudaStatus CudaErrorStatus(cudaError_t err, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();
  CudaStatus st = CudaStatus::Error(std::string(expr) + " failed at " + file + ":" + std::to_string(line) +
                                    ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  st.out_of_memory = err == cudaErrorMemoryAllocation;
  return st;
}

}  // namespace witcert

// Evaluates a cudaError_t expression; on failure returns a CudaStatus from the caller.
#define WITCERT_CUDA_CALL(expr)                                                        \
  do {                                                                                 \
    cudaError_t witcert_cuda_err_ = (expr);                                            \
    if (witcert_cuda_err_ != cudaSuccess) {                                            \
      return ::witcert::CudaErrorStatus(witcert_cuda_err_, #expr, __FILE__, __LINE__); \
    }                                                                                  \
  } while (0)

// Propagates a failed CudaStatus.
#define WITCERT_CUDA_RETURN_IF_ERROR(expr)           \
  do {                                               \
    ::witcert::CudaStatus witcert_cuda_st_ = (expr); \
    if (!witcert_cuda_st_.ok) return witcert_cuda_st_; \
  } while (0)
