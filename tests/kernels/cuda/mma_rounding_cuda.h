// Runs one mma.m16n8k16 (fp16 or bf16 inputs, fp32 accumulator: ops/mma_f16.cuh's Mma16F32, as
// the decode kernel calls it) per tile on the device, for mma_rounding_model_test.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_status.h"

namespace witcert::testing {

// Per tile: a [16 rows, 16 k] and b [16 k, 8 cols] as 16-bit patterns, row-major; c and d
// [16, 8] fp32, row-major. d = the device's a·b + c.
CudaStatus MmaTilesCuda(bool bf16, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                        const std::vector<float>& c, int64_t tiles, std::vector<float>* d);

}  // namespace witcert::testing
