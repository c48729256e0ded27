// Tensor element types as GGUF numbers them, with their block geometry.
//
// Quantized GGML types pack `block_elems` values into `block_bytes` bytes. The loader uses
// this table to validate tensor sizes against the file; the CPU kernels use the block
// layouts in kernels/cpu/quant_blocks.h. Values match the GGUF specification's ggml_type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace witcert {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kBF16 = 30,
};

struct GgmlTypeInfo {
  std::string_view name;
  size_t block_elems;  // values per block (1 for plain floats)
  size_t block_bytes;  // bytes per block
  bool supported;      // this build can dequantize and multiply it
};

inline constexpr GgmlTypeInfo kGgmlF32{"F32", 1, 4, true};
inline constexpr GgmlTypeInfo kGgmlF16{"F16", 1, 2, true};
inline constexpr GgmlTypeInfo kGgmlBF16{"BF16", 1, 2, true};
inline constexpr GgmlTypeInfo kGgmlQ4_0{"Q4_0", 32, 18, true};
inline constexpr GgmlTypeInfo kGgmlQ4_1{"Q4_1", 32, 20, true};
inline constexpr GgmlTypeInfo kGgmlQ5_0{"Q5_0", 32, 22, true};
inline constexpr GgmlTypeInfo kGgmlQ5_1{"Q5_1", 32, 24, true};
inline constexpr GgmlTypeInfo kGgmlQ8_0{"Q8_0", 32, 34, true};
inline constexpr GgmlTypeInfo kGgmlQ8_1{"Q8_1", 32, 36, false};
inline constexpr GgmlTypeInfo kGgmlQ2_K{"Q2_K", 256, 84, true};
inline constexpr GgmlTypeInfo kGgmlQ3_K{"Q3_K", 256, 110, true};
inline constexpr GgmlTypeInfo kGgmlQ4_K{"Q4_K", 256, 144, true};
inline constexpr GgmlTypeInfo kGgmlQ5_K{"Q5_K", 256, 176, true};
inline constexpr GgmlTypeInfo kGgmlQ6_K{"Q6_K", 256, 210, true};
inline constexpr GgmlTypeInfo kGgmlQ8_K{"Q8_K", 256, 292, false};
inline constexpr GgmlTypeInfo kGgmlIQ4_NL{"IQ4_NL", 32, 18, true};
inline constexpr GgmlTypeInfo kGgmlIQ4_XS{"IQ4_XS", 256, 136, true};

// Returns nullptr for a type number this build does not know.
constexpr const GgmlTypeInfo* GetGgmlTypeInfo(uint32_t type) {
  switch (type) {
    case 0: return &kGgmlF32;
    case 1: return &kGgmlF16;
    case 2: return &kGgmlQ4_0;
    case 3: return &kGgmlQ4_1;
    case 6: return &kGgmlQ5_0;
    case 7: return &kGgmlQ5_1;
    case 8: return &kGgmlQ8_0;
    case 9: return &kGgmlQ8_1;
    case 10: return &kGgmlQ2_K;
    case 11: return &kGgmlQ3_K;
    case 12: return &kGgmlQ4_K;
    case 13: return &kGgmlQ5_K;
    case 14: return &kGgmlQ6_K;
    case 15: return &kGgmlQ8_K;
    case 20: return &kGgmlIQ4_NL;
    case 23: return &kGgmlIQ4_XS;
    case 30: return &kGgmlBF16;
    default: return nullptr;
  }
}

// Bytes of one row of `elems` values, or 0 when `elems` is not a whole number of blocks.
constexpr size_t GgmlRowBytes(const GgmlTypeInfo& info, size_t elems) {
  return elems % info.block_elems == 0 ? elems / info.block_elems * info.block_bytes : 0;
}

}  // namespace witcert
