#include "engine/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "engine/backend/cell_buffers.h"
#include "engine/common/status.h"
#include "engine/gate/metered_decode.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_x8.h"
#include "kernels/cpu/transformer_ops.h"

namespace witcert {
namespace {

const float* F32(const QuantMatrix& m) { return reinterpret_cast<const float*>(m.data); }

void AddBias(float* rows, int64_t n, const QuantMatrix& bias) {
  if (bias.empty()) return;
  for (int64_t i = 0; i < n; ++i) AddInPlace(rows + i * bias.cols, F32(bias), bias.cols);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(const Model& model,
                                                               const KvCacheOptions& kv_options,
                                                               Options options) {
  RETURN_IF_ERROR(CheckKvMatchesModel(model.config(), kv_options));
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv, KvCache::Create(kv_options));
  return std::unique_ptr<CpuBackend>(new CpuBackend(model, std::move(kv), options));
}

CpuBackend::CpuBackend(const Model& model, std::unique_ptr<KvCache> kv, Options options)
    : model_(model),
      config_(model.config()),
      kv_(std::move(kv)),
      pool_(options.num_threads),
      exact_matmul_(options.exact_matmul),
      weights_(model.weights()) {
  if (!exact_matmul_) PackWeights();
}

void CpuBackend::PackWeights() {
  std::vector<QuantMatrix*> targets;
  for (LayerWeights& lw : weights_.layers) {
    for (QuantMatrix* m : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down}) {
      if (PackableX8(*m)) targets.push_back(m);
    }
  }
  if (PackableX8(weights_.output)) targets.push_back(&weights_.output);
  packed_.resize(targets.size());
  pool_.ParallelFor(static_cast<int64_t>(targets.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      packed_[i].resize(PackedX8Bytes(targets[i]->type, targets[i]->rows, targets[i]->cols));
      PackX8(*targets[i], packed_[i].data());
    }
  });
  for (size_t i = 0; i < targets.size(); ++i) targets[i]->packed_x8 = packed_[i].data();
}

void CpuBackend::MatmulRowsMany(const float* x, int64_t n,
                                std::initializer_list<const QuantMatrix*> ws,
                                std::initializer_list<float*> ys) {
  if (exact_matmul_) {
    auto y = ys.begin();
    for (const QuantMatrix* w : ws) MatmulRows(x, n, *w, *y++);
    return;
  }
  MatmulMany(x, n, ws.begin(), ys.begin(), static_cast<int>(ws.size()), &pool_);
}

void CpuBackend::MatmulRows(const float* x, int64_t n, const QuantMatrix& w, float* y) {
  if (exact_matmul_) {
    // Reference arithmetic, split over rows of W: each thread multiplies a row slice into
    // its own [n, slice] buffer and scatters it into y [n, rows].
    pool_.ParallelFor(w.rows, 16, [&](int64_t begin, int64_t end) {
      QuantMatrix slice = w;
      slice.data = w.row(begin);
      slice.rows = end - begin;
      std::vector<float> part(static_cast<size_t>(n * slice.rows));
      MatmulReference(x, n, slice, part.data());
      for (int64_t i = 0; i < n; ++i)
        std::copy(&part[i * slice.rows], &part[(i + 1) * slice.rows], &y[i * w.rows + begin]);
    });
  } else {
    Matmul(x, n, w, y, &pool_);
  }
}

void CpuBackend::CausalAttention(int64_t first_row, int64_t num_tokens, int64_t prefix_len) {
  const int64_t d = config_.head_dim;
  const int64_t hq = config_.num_heads;
  const int64_t q_dim = config_.q_dim();
  const int64_t kv_dim = config_.kv_dim();
  const int64_t group = config_.group_size();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // One work unit per (head, query token): independent rows, no shared writes.
  pool_.ParallelFor(hq * num_tokens, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(prefix_len + num_tokens);
    for (int64_t w = begin; w < end; ++w) {
      const int64_t h = w / num_tokens;
      const int64_t i = w % num_tokens;
      const int64_t g = h / group;
      // Positions [0, prefix_len) from the exact prefix, then this chunk's fresh rows.
      const float* pk = prefix_len > 0 ? &prefix_k_[g * prefix_len * d] : nullptr;
      const float* pv = prefix_len > 0 ? &prefix_v_[g * prefix_len * d] : nullptr;
      const float* fk = &k_[first_row * kv_dim + g * d];
      const float* fv = &v_[first_row * kv_dim + g * d];
      const float* q = &q_[(first_row + i) * q_dim + h * d];
      const int64_t n = prefix_len + i + 1;
      if (prefix_len > 0) DotRows(q, pk, d, prefix_len, d, scale, scores.data());
      DotRows(q, fk, kv_dim, i + 1, d, scale, scores.data() + prefix_len);
      Softmax(scores.data(), n);
      float* out = &attn_[(first_row + i) * q_dim + h * d];
      std::fill(out, out + d, 0.0f);
      if (prefix_len > 0) AccumulateRows(scores.data(), pv, d, prefix_len, d, out);
      AccumulateRows(scores.data() + prefix_len, fv, kv_dim, i + 1, d, out);
    }
  });
}

absl::Status CpuBackend::ExactPrefixAttention(const ForwardItem& item, int64_t first_row,
                                              int32_t layer) {
  const int64_t d = config_.head_dim, hkv = config_.num_kv_heads, s = item.start_pos;
  prefix_k_.resize(hkv * s * d);
  prefix_v_.resize(hkv * s * d);
  for (int32_t g = 0; g < hkv; ++g) {
    RETURN_IF_ERROR(
        kv_->GatherExactHead(item.seq, layer, g, s, &prefix_k_[g * s * d], &prefix_v_[g * s * d]));
  }
  CausalAttention(first_row, static_cast<int64_t>(item.tokens.size()), s);
  return absl::OkStatus();
}

absl::Status CpuBackend::StoredAttention(const ForwardItem& item, int64_t first_row,
                                         int32_t layer, std::vector<CellRecord>* cells,
                                         ThreadPool* pool) {
  const int64_t n = static_cast<int64_t>(item.tokens.size());
  const int64_t hq = config_.num_heads;
  const int64_t q_dim = config_.q_dim();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = first_row + i;
    DecodeAttentionRequest request;
    request.seq = item.seq;
    request.layer = layer;
    request.step = item.decode_step + i;
    request.context_len = item.start_pos + i + 1;
    request.q = &q_[row * q_dim];
    request.out = &attn_[row * q_dim];
    request.policy = item.policy;
    request.delta_loc = item.delta_loc;
    CellRecord* cell_out = nullptr;
    if (cells != nullptr) {
      const size_t base = cells->size();
      cells->resize(base + hq);
      cell_out = cells->data() + base;
    }
    request.cells = cell_out;
    RETURN_IF_ERROR(MeteredDecodeAttention(*kv_, request, config_.num_heads, nullptr, pool));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Forward(absl::Span<const ForwardItem> batch, ForwardResult* result) {
  const Weights& w = weights_;
  const int64_t hidden = config_.hidden_dim;
  const int64_t q_dim = config_.q_dim();
  const int64_t kv_dim = config_.kv_dim();
  const int64_t ffn = config_.ffn_dim;
  const bool interleaved = config_.rope_pairing == RopePairing::kInterleaved;

  int64_t total = 0;
  std::vector<int64_t> first_row(batch.size());
  for (size_t b = 0; b < batch.size(); ++b) {
    if (batch[b].tokens.empty()) return absl::InvalidArgumentError("empty forward item");
    first_row[b] = total;
    total += static_cast<int64_t>(batch[b].tokens.size());
  }
  x_.resize(total * hidden);
  xn_.resize(total * hidden);
  q_.resize(total * q_dim);
  k_.resize(total * kv_dim);
  v_.resize(total * kv_dim);
  attn_.resize(total * q_dim);
  proj_.resize(total * hidden);
  gate_.resize(total * ffn);
  up_.resize(total * ffn);

  for (size_t b = 0; b < batch.size(); ++b) {
    for (size_t i = 0; i < batch[b].tokens.size(); ++i) {
      const TokenId token = batch[b].tokens[i];
      if (token < 0 || token >= config_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrFormat("token id %d out of range", token));
      }
      EmbeddingLookup(w.token_embd, token, &x_[(first_row[b] + i) * hidden]);
    }
  }
  ResetCellBuffers(std::vector<int64_t>(batch.size(), 0), &result->cells);  // appended per layer below
  absl::flat_hash_set<SeqId> seqs;
  for (const ForwardItem& item : batch) seqs.insert(item.seq);
  const bool distinct_seqs = seqs.size() == batch.size();
  rope_cs_.resize(total * config_.head_dim);  // each row's RoPE table, shared by all layers
  for (size_t b = 0; b < batch.size(); ++b) {
    for (size_t i = 0; i < batch[b].tokens.size(); ++i) {
      RopeCosSin(config_.head_dim, batch[b].start_pos + static_cast<int64_t>(i),
                 config_.rope_theta, &rope_cs_[(first_row[b] + i) * config_.head_dim],
                 config_.rope_freq_factors.empty() ? nullptr : config_.rope_freq_factors.data(),
                 config_.rope_attn_factor);
    }
  }

  for (int32_t layer = 0; layer < config_.num_layers; ++layer) {
    const LayerWeights& lw = w.layers[layer];
    RmsNorm(x_.data(), F32(lw.attn_norm), total, hidden, config_.rms_norm_eps, xn_.data());
    MatmulRowsMany(xn_.data(), total, {&lw.wq, &lw.wk, &lw.wv}, {q_.data(), k_.data(), v_.data()});
    AddBias(q_.data(), total, lw.bq);
    AddBias(k_.data(), total, lw.bk);
    AddBias(v_.data(), total, lw.bv);
    if (config_.qk_norm) {  // qwen3: every q and k head RMS-normed before RoPE (rows of head_dim)
      RmsNorm(q_.data(), F32(lw.q_norm), total * config_.num_heads, config_.head_dim, config_.rms_norm_eps, q_.data());
      RmsNorm(k_.data(), F32(lw.k_norm), total * config_.num_kv_heads, config_.head_dim, config_.rms_norm_eps,
              k_.data());
    }

    // RoPE and the KV write, per item; items of different sequences run concurrently
    // (KvCache::Write is safe across sequences).
    auto rope_and_write = [&](size_t b) -> absl::Status {
      const ForwardItem& item = batch[b];
      for (size_t i = 0; i < item.tokens.size(); ++i) {
        const int64_t row = first_row[b] + i;
        const int64_t pos = item.start_pos + static_cast<int64_t>(i);
        const float* cs = &rope_cs_[row * config_.head_dim];
        ApplyRopeTable(&q_[row * q_dim], config_.num_heads, config_.head_dim, cs, interleaved);
        ApplyRopeTable(&k_[row * kv_dim], config_.num_kv_heads, config_.head_dim, cs, interleaved);
        RETURN_IF_ERROR(kv_->Write(item.seq, layer, pos, &k_[row * kv_dim], &v_[row * kv_dim]));
      }
      return absl::OkStatus();
    };
    // In batch order, one item after another, while the layer's outlier channels are not chosen:
    // the first block to fill chooses them (engine/kv/outlier_channels.h), so which one that is,
    // and which blocks begin before the choice (staged) or after it, must not depend on threads.
    const OutlierChannels& outliers = kv_->outliers();
    const bool choosing = outliers.count() > 0 && !outliers.chosen(layer);
    if (batch.size() == 1 || !distinct_seqs || choosing) {
      for (size_t b = 0; b < batch.size(); ++b) RETURN_IF_ERROR(rope_and_write(b));
    } else {
      std::vector<absl::Status> statuses(batch.size());
      pool_.ParallelFor(static_cast<int64_t>(batch.size()), 1, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) statuses[b] = rope_and_write(static_cast<size_t>(b));
      });
      for (const absl::Status& st : statuses) RETURN_IF_ERROR(st);
    }
    // Prompt chunks at position 0 (or after an exact cached prefix) attend over their fresh
    // K/V (parallel inside); items that read stored K/V run in parallel across sequences, or
    // across KV heads when alone.
    std::vector<size_t> stored;
    for (size_t b = 0; b < batch.size(); ++b) {
      if (batch[b].start_pos == 0) {
        CausalAttention(first_row[b], static_cast<int64_t>(batch[b].tokens.size()), 0);
      } else if (batch[b].exact_prefix) {
        RETURN_IF_ERROR(ExactPrefixAttention(batch[b], first_row[b], layer));
      } else {
        stored.push_back(b);
      }
    }
    auto attend = [&](size_t b, ThreadPool* pool) {
      return StoredAttention(batch[b], first_row[b], layer,
                             batch[b].policy ? &result->cells[b] : nullptr, pool);
    };
    if (stored.size() == 1) {
      RETURN_IF_ERROR(attend(stored[0], &pool_));
    } else if (stored.size() > 1) {
      std::vector<absl::Status> statuses(stored.size());
      pool_.ParallelFor(static_cast<int64_t>(stored.size()), 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) statuses[i] = attend(stored[i], nullptr);
      });
      for (const absl::Status& st : statuses) RETURN_IF_ERROR(st);
    }
    MatmulRows(attn_.data(), total, lw.wo, proj_.data());
    AddInPlace(x_.data(), proj_.data(), total * hidden);

    RmsNorm(x_.data(), F32(lw.ffn_norm), total, hidden, config_.rms_norm_eps, xn_.data());
    MatmulRowsMany(xn_.data(), total, {&lw.w_gate, &lw.w_up}, {gate_.data(), up_.data()});
    SwiGlu(gate_.data(), up_.data(), total * ffn, gate_.data());
    MatmulRows(gate_.data(), total, lw.w_down, proj_.data());
    AddInPlace(x_.data(), proj_.data(), total * hidden);
  }

  // Logits of the last token of each item that asks for them.
  std::vector<float> last;  // [items with logits, hidden]
  for (size_t b = 0; b < batch.size(); ++b) {
    if (!batch[b].compute_logits) continue;
    const int64_t row = first_row[b] + static_cast<int64_t>(batch[b].tokens.size()) - 1;
    last.insert(last.end(), &x_[row * hidden], &x_[(row + 1) * hidden]);
  }
  const int64_t num_logits = static_cast<int64_t>(last.size()) / hidden;
  result->logits.resize(num_logits * config_.vocab_size);
  if (num_logits > 0) {
    RmsNorm(last.data(), F32(w.output_norm), num_logits, hidden, config_.rms_norm_eps,
            last.data());
    MatmulRows(last.data(), num_logits, w.output, result->logits.data());
  }
  return absl::OkStatus();
}

}  // namespace witcert
