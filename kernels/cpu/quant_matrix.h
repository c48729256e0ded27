// A read-only view of a weight matrix stored in one of the GGML block formats.
//
// Row-major: `rows` output features, each a contiguous run of `cols` input features encoded
// in `type` (GGUF shape [ne0 = cols, ne1 = rows]). The bytes usually live in an mmap'd model
// file; the view never owns them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/ggml_type.h"

namespace witcert {

struct QuantMatrix {
  GgmlType type = GgmlType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;          // bytes of one encoded row
  const uint8_t* data = nullptr; // [rows, row_bytes]
  // Optional row-interleaved copy of the same weights (Q4_0 / Q4_1 / Q8_0, packed_x8.h) that
  // Matmul prefers when set; owned by whoever packed it (the CPU backend).
  const uint8_t* packed_x8 = nullptr;

  bool empty() const { return data == nullptr; }
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

}  // namespace witcert
