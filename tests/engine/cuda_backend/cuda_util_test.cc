// The CUDA backend's error mapping (engine/backend/cuda/cuda_util.h): a failed device
// allocation reaches callers as ResourceExhausted (a configuration that does not fit), every
// other CUDA failure as Internal. No device needed.
#include "engine/backend/cuda/cuda_util.h"

#include "gtest/gtest.h"

namespace witcert {
namespace {

TEST(CudaUtil, FailedAllocationIsResourceExhaustedOtherFailuresInternal) {
  const absl::Status oom = FromCudaStatus(CudaErrorStatus(cudaErrorMemoryAllocation, "cudaMalloc(p, n)", "f.cu", 7));
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted) << oom;
  EXPECT_NE(oom.message().find("f.cu:7"), std::string::npos) << oom;
  const absl::Status launch = FromCudaStatus(CudaErrorStatus(cudaErrorInvalidValue, "Kernel<<<...>>>", "g.cu", 9));
  EXPECT_EQ(launch.code(), absl::StatusCode::kInternal) << launch;
  EXPECT_EQ(FromCudaStatus(CudaStatus::Error("checked argument")).code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(FromCudaStatus(CudaStatus::Ok()).ok());
  EXPECT_EQ(CudaError(cudaErrorMemoryAllocation, "cudaMalloc").code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace witcert
