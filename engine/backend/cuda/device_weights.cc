#include "engine/backend/cuda/device_weights.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/common/status.h"
#include "kernels/cpu/matmul.h"

namespace witcert {
namespace {

// Host staging: this many rows' worth of bf16 at a time (bounds host memory at ~64 MiB).
constexpr int64_t kStagingBytes = int64_t{64} << 20;

// Uploads rows [0, m.rows) of `m` as bf16 into dst [m.rows, m.cols] (device).
absl::Status UploadBf16(const QuantMatrix& m, uint16_t* dst) {
  if (m.empty()) return absl::InvalidArgumentError("missing weight matrix");
  const int64_t cols = m.cols;
  if (m.type == GgmlType::kBF16 && m.row_bytes == static_cast<size_t>(cols) * 2) {
    WITCERT_CUDA_OK(cudaMemcpy(dst, m.data, static_cast<size_t>(m.rows) * m.row_bytes,
                               cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }
  const int64_t rows_per_chunk = std::max<int64_t>(1, kStagingBytes / (2 * cols));
  std::vector<float> row(static_cast<size_t>(cols));  // [cols]
  std::vector<uint16_t> chunk;                       // [rows_per_chunk, cols] bf16
  for (int64_t r0 = 0; r0 < m.rows; r0 += rows_per_chunk) {
    const int64_t nr = std::min(rows_per_chunk, m.rows - r0);
    chunk.resize(static_cast<size_t>(nr * cols));
    for (int64_t r = 0; r < nr; ++r) {
      DequantizeRow(m, r0 + r, row.data());
      for (int64_t c = 0; c < cols; ++c) chunk[r * cols + c] = FloatToBf16Bits(row[c]);
    }
    WITCERT_CUDA_OK(cudaMemcpy(dst + r0 * cols, chunk.data(), chunk.size() * 2,
                               cudaMemcpyHostToDevice));
  }
  return absl::OkStatus();
}

// Uploads an F32 vector [1, n] (norm weight or bias) into dst [n].
absl::Status UploadF32(const QuantMatrix& m, float* dst) {
  if (m.empty() || m.type != GgmlType::kF32) {
    return absl::InvalidArgumentError("norm / bias tensors must be F32");
  }
  WITCERT_CUDA_OK(cudaMemcpy(dst, m.data, static_cast<size_t>(m.rows * m.cols) * 4,
                             cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

template <class T>
absl::Status Alloc(DeviceArray<T>& a, int64_t n, int64_t* bytes) {
  RETURN_IF_ERROR(a.Grow(static_cast<size_t>(n)));
  *bytes += n * static_cast<int64_t>(sizeof(T));
  return absl::OkStatus();
}

}  // namespace

uint16_t FloatToBf16Bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

absl::Status UploadWeights(const Model& model, DeviceWeights* out,
                           const std::function<void(const std::string&)>& progress) {
  const ModelConfig& c = model.config();
  const Weights& w = model.weights();
  const int64_t h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim(), ffn = c.ffn_dim;
  int64_t bytes = 0;
  RETURN_IF_ERROR(Alloc(out->token_embd, int64_t{c.vocab_size} * h, &bytes));
  RETURN_IF_ERROR(UploadBf16(w.token_embd, out->token_embd.get()));
  if (w.output.data == w.token_embd.data) {
    out->output = out->token_embd.get();
  } else {
    RETURN_IF_ERROR(Alloc(out->output_own, int64_t{c.vocab_size} * h, &bytes));
    RETURN_IF_ERROR(UploadBf16(w.output, out->output_own.get()));
    out->output = out->output_own.get();
  }
  RETURN_IF_ERROR(Alloc(out->output_norm, h, &bytes));
  RETURN_IF_ERROR(UploadF32(w.output_norm, out->output_norm.get()));
  out->layers.clear();
  out->layers.resize(c.num_layers);
  int last_decile = 0;
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    DeviceLayerWeights& d = out->layers[l];
    RETURN_IF_ERROR(Alloc(d.wqkv, (q + 2 * kv) * h, &bytes));
    RETURN_IF_ERROR(UploadBf16(lw.wq, d.wqkv.get()));
    RETURN_IF_ERROR(UploadBf16(lw.wk, d.wqkv.get() + q * h));
    RETURN_IF_ERROR(UploadBf16(lw.wv, d.wqkv.get() + (q + kv) * h));
    if (c.qkv_bias) {
      RETURN_IF_ERROR(Alloc(d.bqkv, q + 2 * kv, &bytes));
      RETURN_IF_ERROR(UploadF32(lw.bq, d.bqkv.get()));
      RETURN_IF_ERROR(UploadF32(lw.bk, d.bqkv.get() + q));
      RETURN_IF_ERROR(UploadF32(lw.bv, d.bqkv.get() + q + kv));
    }
    RETURN_IF_ERROR(Alloc(d.wo, h * q, &bytes));
    RETURN_IF_ERROR(UploadBf16(lw.wo, d.wo.get()));
    RETURN_IF_ERROR(Alloc(d.w_gate_up, 2 * ffn * h, &bytes));
    RETURN_IF_ERROR(UploadBf16(lw.w_gate, d.w_gate_up.get()));
    RETURN_IF_ERROR(UploadBf16(lw.w_up, d.w_gate_up.get() + ffn * h));
    RETURN_IF_ERROR(Alloc(d.w_down, h * ffn, &bytes));
    RETURN_IF_ERROR(UploadBf16(lw.w_down, d.w_down.get()));
    RETURN_IF_ERROR(Alloc(d.attn_norm, h, &bytes));
    RETURN_IF_ERROR(UploadF32(lw.attn_norm, d.attn_norm.get()));
    RETURN_IF_ERROR(Alloc(d.ffn_norm, h, &bytes));
    RETURN_IF_ERROR(UploadF32(lw.ffn_norm, d.ffn_norm.get()));
    if (c.qk_norm) {
      RETURN_IF_ERROR(Alloc(d.q_norm, c.head_dim, &bytes));
      RETURN_IF_ERROR(UploadF32(lw.q_norm, d.q_norm.get()));
      RETURN_IF_ERROR(Alloc(d.k_norm, c.head_dim, &bytes));
      RETURN_IF_ERROR(UploadF32(lw.k_norm, d.k_norm.get()));
    }
    const int decile = static_cast<int>(10 * (l + 1) / c.num_layers);
    if (progress && decile > last_decile) {
      last_decile = decile;
      progress(absl::StrFormat("gpu weights: %d%% (%d/%d layers, %.2f GiB)", 10 * decile, l + 1,
                               c.num_layers, static_cast<double>(bytes) / (1 << 30)));
    }
  }
  out->bytes = bytes;
  return absl::OkStatus();
}

}  // namespace witcert
