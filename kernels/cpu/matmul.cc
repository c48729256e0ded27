// Matmul driver: activation quantization, row-tile loop, threading; plus the reference.
//
// Loop order: each thread owns a contiguous range of weight rows; for each weight row it
// walks the activation rows in tiles of kMaxTile (kMaxWideTile for AVX-512), so the row (≤ a few
// KB) stays in L1 while the quantized activations (n × ~1.1·cols bytes) stream from L2. Decode (n =
// 1) is then a single pass over the weights, which is what bounds its speed. Each output element is
// produced by exactly one kernel call whose arithmetic does not depend on the thread count
// or the tile position, so results are bit-identical across pool sizes and batch sizes.
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/packed_x8.h"
#include "kernels/cpu/parallel.h"

namespace witcert {
namespace {

using matmul_internal::BlockQ8_Kx;
using matmul_internal::kMaxTile;
using matmul_internal::kMaxWideTile;
using matmul_internal::RowDotFn;

enum class ActFormat { kF32, kQ8_1, kQ8_K };

struct Plan {
  RowDotFn dot = nullptr;
  int tile = kMaxTile;  // activation rows per kernel call
  ActFormat act = ActFormat::kF32;
};

Plan PlanFor(GgmlType type) {
  const matmul_internal::RowDot rd =
      matmul_internal::RowDotFor(type, matmul_internal::SelectedCpuKernel());
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kIQ4_NL:
      return {rd.dot, rd.max_tile, ActFormat::kQ8_1};
    case GgmlType::kIQ4_XS:
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return {rd.dot, rd.max_tile, ActFormat::kQ8_K};
    default:
      return {rd.dot, rd.max_tile, ActFormat::kF32};
  }
}

// Work (multiply-adds) below which a chunk is not worth a thread hand-off (~10 µs).
constexpr int64_t kMinMacsPerChunk = 1 << 16;

// The packed kernel when every matrix has an x8 copy and a SIMD variant is selected: the
// selected variant's build (the VNNI builds give the AVX2 build's bits). The scalar variant
// keeps the plain rows: DotQ4_*Scalar computes the same bits anyway.
matmul_internal::PackedDotFn PackedDotFor(const QuantMatrix* const* ws, int count) {
  using matmul_internal::CpuKernel;
  const CpuKernel k = matmul_internal::SelectedCpuKernel();
  if (k == CpuKernel::kScalar) return nullptr;
  for (int m = 0; m < count; ++m) {
    if (ws[m]->packed_x8 == nullptr) return nullptr;
  }
  matmul_internal::PackedDotFn dot = nullptr;
  if (k == CpuKernel::kAvx512Vnni) dot = matmul_internal::DotPackedX8Avx512Vnni();
  if (k == CpuKernel::kAvxVnni) dot = matmul_internal::DotPackedX8AvxVnni();
  return dot != nullptr ? dot : matmul_internal::DotPackedX8Avx2();
}

// y_k for the packed matrices: work units are 8-row groups, stacked over the matrices like
// the plain path's rows; each group is dotted with the activations in tiles of up to
// kPackedMaxTile rows.
void PackedPass(const uint8_t* act, size_t act_stride, int64_t n, const QuantMatrix* const* ws,
                float* const* ys, int count, matmul_internal::PackedDotFn dot, ThreadPool* pool) {
  using matmul_internal::kPackedMaxTile;
  const int64_t cols = ws[0]->cols;
  const GgmlType type = ws[0]->type;
  const size_t group_bytes = static_cast<size_t>(cols / kQk) * PackedX8BlockBytes(type);
  int64_t total_groups = 0;
  for (int m = 0; m < count; ++m) total_groups += PackedX8Groups(ws[m]->rows);
  auto groups_fn = [&](int64_t g0, int64_t g1) {
    float tile_out[kPackedMaxTile * kPackRows];  // [nx, 8]
    int m = 0;
    int64_t base = 0;  // first stacked group of matrix m
    for (int64_t g = g0; g < g1; ++g) {
      while (g >= base + PackedX8Groups(ws[m]->rows)) base += PackedX8Groups(ws[m++]->rows);
      const QuantMatrix& w = *ws[m];
      const int64_t row0 = (g - base) * kPackRows;
      const int rows_here = static_cast<int>(std::min<int64_t>(kPackRows, w.rows - row0));
      const uint8_t* group = w.packed_x8 + static_cast<size_t>(g - base) * group_bytes;
      for (int64_t t = 0; t < n; t += kPackedMaxTile) {
        const int nx = static_cast<int>(std::min<int64_t>(kPackedMaxTile, n - t));
        dot(group, act + t * act_stride, act_stride, nx, cols, type, tile_out);
        for (int j = 0; j < nx; ++j) {
          float* y = ys[m] + (t + j) * w.rows + row0;
          std::copy(tile_out + kPackRows * j, tile_out + kPackRows * j + rows_here, y);
        }
      }
    }
  };
  const int64_t min_chunk =
      std::max<int64_t>(1, kMinMacsPerChunk / std::max<int64_t>(1, cols * n * kPackRows));
  if (pool != nullptr && total_groups >= 2 * min_chunk) {
    pool->ParallelFor(total_groups, min_chunk, groups_fn);
  } else {
    groups_fn(0, total_groups);
  }
}

}  // namespace

void MatmulMany(const float* x, int64_t n, const QuantMatrix* const* ws, float* const* ys,
                int count, ThreadPool* pool) {
  if (n <= 0 || count <= 0) return;
  const QuantMatrix& w0 = *ws[0];
  for (int m = 1; m < count; ++m) {
    if (ws[m]->type != w0.type || ws[m]->cols != w0.cols) {
      for (int k = 0; k < count; ++k) Matmul(x, n, *ws[k], ys[k], pool);
      return;
    }
  }
  const Plan plan = PlanFor(w0.type);
  const int64_t cols = w0.cols;
  const GgmlTypeInfo* info = GetGgmlTypeInfo(static_cast<uint32_t>(w0.type));
  int64_t total_rows = 0;
  bool shape_ok = info != nullptr;
  for (int m = 0; m < count; ++m) {
    shape_ok = shape_ok && GgmlRowBytes(*info, cols) == ws[m]->row_bytes && ws[m]->row_bytes != 0;
    total_rows += ws[m]->rows;
  }
  if (plan.dot == nullptr || !shape_ok) {
    // Unsupported format or broken precondition: loud garbage, never plausible numbers.
    for (int m = 0; m < count; ++m)
      std::fill(ys[m], ys[m] + n * ws[m]->rows, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  if (total_rows <= 0) return;

  // Quantized activations, shared by every matrix and reused across calls on this thread.
  // [n, act_stride bytes]
  thread_local std::vector<uint8_t> act_buffer;
  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
  size_t act_stride = static_cast<size_t>(cols) * sizeof(float);
  if (plan.act != ActFormat::kF32) {
    act_stride = plan.act == ActFormat::kQ8_1
                     ? matmul_internal::Q8_1RowBytes(cols)
                     : static_cast<size_t>(cols / kQkK) * sizeof(BlockQ8_Kx);
    if (act_buffer.size() < act_stride * n) act_buffer.resize(act_stride * n);
    uint8_t* buf = act_buffer.data();
    const ActFormat fmt = plan.act;
    auto quantize = [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        if (fmt == ActFormat::kQ8_1) {
          matmul_internal::QuantizeRowQ8_1(x + i * cols, cols, buf + i * act_stride);
        } else {
          matmul_internal::QuantizeRowQ8_K(x + i * cols, cols,
                                           reinterpret_cast<BlockQ8_Kx*>(buf + i * act_stride));
        }
      }
    };
    const int64_t min_rows =
        std::max<int64_t>(1, kMinMacsPerChunk / 8 / std::max<int64_t>(1, cols));
    if (pool != nullptr && n >= 2 * min_rows) {
      pool->ParallelFor(n, min_rows, quantize);
    } else {
      quantize(0, n);
    }
    act = buf;
  }

  if (const matmul_internal::PackedDotFn packed = PackedDotFor(ws, count); packed != nullptr) {
    PackedPass(act, act_stride, n, ws, ys, count, packed, pool);
    return;
  }
  // One pass over the rows of all matrices, as if they were stacked: each output element is
  // still computed by one thread, in the same order as a separate Matmul call.
  const RowDotFn dot = plan.dot;
  const int64_t tile = plan.tile;
  auto rows_fn = [&](int64_t r0, int64_t r1) {
    float tile_out[kMaxWideTile];
    int m = 0;
    int64_t base = 0;  // first stacked row of matrix m
    for (int64_t r = r0; r < r1; ++r) {
      while (r >= base + ws[m]->rows) base += ws[m++]->rows;
      const QuantMatrix& w = *ws[m];
      const int64_t local = r - base;
      const uint8_t* w_row = w.row(local);
      for (int64_t t = 0; t < n; t += tile) {
        const int nx = static_cast<int>(std::min<int64_t>(tile, n - t));
        dot(w_row, act + t * act_stride, act_stride, nx, cols, tile_out);
        for (int j = 0; j < nx; ++j) ys[m][(t + j) * w.rows + local] = tile_out[j];
      }
    }
  };
  const int64_t min_chunk = std::max<int64_t>(1, kMinMacsPerChunk / std::max<int64_t>(1, cols * n));
  if (pool != nullptr && total_rows >= 2 * min_chunk) {
    pool->ParallelFor(total_rows, min_chunk, rows_fn);
  } else {
    rows_fn(0, total_rows);
  }
}

void Matmul(const float* x, int64_t n, const QuantMatrix& w, float* y, ThreadPool* pool) {
  const QuantMatrix* ws[1] = {&w};
  float* ys[1] = {y};
  MatmulMany(x, n, ws, ys, 1, pool);
}

void MatmulReference(const float* x, int64_t n, const QuantMatrix& w, float* y) {
  std::vector<float> row(static_cast<size_t>(w.cols));  // [cols]
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeRow(w, r, row.data());
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0.0;
      const float* xi = x + i * w.cols;
      for (int64_t c = 0; c < w.cols; ++c) sum += static_cast<double>(xi[c]) * row[c];
      y[i * w.rows + r] = static_cast<float>(sum);
    }
  }
}

}  // namespace witcert
