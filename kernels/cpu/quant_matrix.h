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

  bool empty() const { return data == nullptr; }
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

}  // namespace witcert
