// What the CUDA backend's end-to-end tests share (cuda_backend_test.cc, cuda_backend_repair_test.cc):
// the synthetic model configs with GPU-sized heads, a CPU and a CUDA backend over the same weights
// (Pair), running one batch through both, and the comparisons of logits and of certificate cells
// whose tolerances the test files' comments explain.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model/model_source.h"
#include "engine/model/synthetic_model.h"
#include "gtest/gtest.h"

#define SKIP_WITHOUT_GPU() \
  if (!CudaBackend::DeviceAvailable()) GTEST_SKIP() << "no CUDA device"

namespace witcert::testing {

inline ModelConfig TestConfig(bool qwen, int32_t head_dim = 64) {
  ModelConfig c;
  c.architecture = qwen ? "qwen2" : "llama";
  c.name = qwen ? "gpu-test-qwen2" : "gpu-test-llama";
  c.num_layers = 2;
  c.hidden_dim = 256;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = head_dim;
  c.ffn_dim = 512;
  c.vocab_size = 512;
  c.context_length = 4096;
  c.rope_theta = qwen ? 1000000.0f : 10000.0f;
  c.rms_norm_eps = qwen ? 1e-6f : 1e-5f;
  c.rope_pairing = qwen ? RopePairing::kHalfSplit : RopePairing::kInterleaved;
  c.qkv_bias = qwen;
  c.tied_embeddings = qwen;
  return c;
}

inline KvCacheOptions KvOptions(const ModelConfig& c, const std::string& scheme, int32_t outlier_channels = 0) {
  KvCacheOptions o = KvCacheOptionsFor(c);
  o.block_size = 16;
  o.num_blocks = 64;
  o.k_scheme = o.v_scheme = scheme;
  o.backing_store_bytes = 64 << 20;
  o.outlier_channels = outlier_channels;
  return o;
}

inline std::vector<TokenId> Prompt(int32_t len, int32_t seed, int32_t vocab) {
  std::vector<TokenId> p(len);
  for (int32_t i = 0; i < len; ++i) p[i] = (seed * 131 + i * 37 + i * i * 7) % vocab;
  return p;
}

struct Pair {
  std::unique_ptr<Model> model;
  std::unique_ptr<CpuBackend> cpu;
  std::unique_ptr<CudaBackend> gpu;
};

inline Pair MakePair(std::unique_ptr<Model> model, const std::string& scheme,
              CpuBackend::Options cpu_options = {.num_threads = 2}, int32_t outlier_channels = 0) {
  Pair p;
  p.model = std::move(model);
  auto cpu = CpuBackend::Create(*p.model, KvOptions(p.model->config(), scheme, outlier_channels), cpu_options);
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  p.cpu = std::move(*cpu);
  auto gpu = CudaBackend::Create(*p.model, KvOptions(p.model->config(), scheme, outlier_channels));
  EXPECT_TRUE(gpu.ok()) << gpu.status();
  p.gpu = std::move(*gpu);
  return p;
}

inline Pair MakePair(bool qwen, const std::string& scheme, int32_t head_dim = 64) {
  auto m = SyntheticModelLoader::FromConfig(TestConfig(qwen, head_dim), 1234, {}, 2);
  EXPECT_TRUE(m.ok()) << m.status();
  return MakePair(std::move(*m), scheme);
}

// The same step on both backends; both must succeed.
inline void ForwardBoth(Pair& p, const std::vector<ForwardItem>& items, ForwardResult* rc, ForwardResult* rg) {
  ASSERT_TRUE(p.cpu->Forward(items, rc).ok());
  const absl::Status st = p.gpu->Forward(items, rg);
  ASSERT_TRUE(st.ok()) << st;
}

inline void AddSeq(Backend& b, SeqId seq, int64_t tokens) {
  ASSERT_TRUE(b.kv_cache().AddSequence(seq).ok());
  ASSERT_TRUE(b.kv_cache().Reserve(seq, tokens).ok());
}

// Returns max |gpu − cpu| after checking the tolerances.
inline double ExpectClose(const std::vector<float>& gpu, const std::vector<float>& cpu, const char* what,
                   double max_rel_l2 = 2e-2, double max_abs_bound = 0.1, double* rel_l2 = nullptr) {
  EXPECT_EQ(gpu.size(), cpu.size()) << what;
  if (gpu.size() != cpu.size()) return INFINITY;
  double num = 0, den = 0, max_abs = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_TRUE(std::isfinite(gpu[i])) << what << " @" << i;
    num += (gpu[i] - cpu[i]) * double(gpu[i] - cpu[i]);
    den += double(cpu[i]) * cpu[i];
    max_abs = std::max(max_abs, std::fabs(double(gpu[i]) - cpu[i]));
  }
  EXPECT_LE(std::sqrt(num / den), max_rel_l2) << what;
  if (rel_l2 != nullptr) *rel_l2 = std::max(*rel_l2, std::sqrt(num / den));
  EXPECT_LE(max_abs, max_abs_bound) << what;
  return max_abs;
}

inline double RelL2(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size() && i < a.size(); ++i) {
    num += (a[i] - ref[i]) * double(a[i] - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

inline TokenId Argmax(const float* x, int32_t n, float* gap) {
  int32_t best = 0, second = -1;
  for (int32_t j = 1; j < n; ++j) {
    if (x[j] > x[best]) {
      second = best;
      best = j;
    } else if (second < 0 || x[j] > x[second]) {
      second = j;
    }
  }
  *gap = x[best] - x[second];
  return best;
}

// The GPU's cells against the CPU's, int8 codes. They name the same (layer, head, step) and
// carry a real, non-vacuous bound. The GPU's K differs from the CPU's by bf16 rounding of the
// GEMM inputs (~0.5%), which re-draws each element's quantization residual, so the witnesses
// (residual band norms over d/B = 8 channels) differ per token although the bound, a sum over
// the context, stays close: within 25% (10% seen). Away from the threshold both certify alike.
// every_cell_stored: every cell reads some quantized KV (kivi2's context of staged blocks only
// reads exact rows, so its bound is 0 on both sides).
inline void ExpectCellsLikeCpu(const std::vector<CellRecord>& gc, const std::vector<CellRecord>& cc,
                        int64_t expected, const GatePolicy& policy, bool every_cell_stored = true) {
  ASSERT_EQ(gc.size(), cc.size());
  ASSERT_EQ(gc.size(), static_cast<size_t>(expected));
  for (size_t i = 0; i < gc.size(); ++i) {
    EXPECT_EQ(gc[i].layer, cc[i].layer);
    EXPECT_EQ(gc[i].head, cc[i].head);
    EXPECT_EQ(gc[i].step, cc[i].step);
    if (every_cell_stored || cc[i].tv_before > 0.0f) {
      EXPECT_GT(gc[i].tv_before, 0.0f) << i;
    }
    EXPECT_LT(gc[i].tv_before, 1.0f);
    EXPECT_NEAR(gc[i].tv_before, cc[i].tv_before, 0.25f * cc[i].tv_before + 1e-5f) << i;
    if (std::fabs(cc[i].tv_before - policy.tv_threshold) > 0.3f * cc[i].tv_before) {
      EXPECT_EQ(gc[i].certified, cc[i].certified) << i;
    }
  }
}

}  // namespace witcert::testing
