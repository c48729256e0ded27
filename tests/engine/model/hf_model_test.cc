// Hugging Face checkpoint folders (config.json parsing: hf_config_test.cc): tensor binding and
// shape checks, tied/untied heads, sharded folders, and the decisive check: the HF model run
// through the CPU backend gives the same logits as the same weights written as GGUF.
//
// The equivalence test is what proves the RoPE pairing logic. The GGUF "llama" copy has its
// Q/K rows permuted to interleaved pairing (as llama.cpp's converter does) and is run with
// interleaved RoPE; the HF copy keeps HF's row order and must be run half-split. Permuting
// rows only reorders the q and k components, so q·k is the same sum in another order:
// the logits agree up to fp32 summation-order rounding. Tolerance: 2e-4 absolute on logits
// of magnitude ~1-5 (fp32 has ~6e-8 relative precision; a few hundred accumulations and two
// layers stay well below 1e-5 relative). A GGUF copy written WITHOUT the permutation must
// differ by far more than that, which shows the comparison can fail.
#include "engine/model/hf_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model/gguf.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_source.h"
#include "engine/model/rope_scaling.h"
#include "engine/runtime/loaded_engine.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/model/tiny_hf_model.h"

namespace witcert {
namespace {

using testing::TempFolder;
using testing::TinyHfSpec;

constexpr float kLogitAtol = 2e-4f;

TEST(HfModelTest, LoadsUntiedAndTied) {
  for (bool tied : {false, true}) {
    TempFolder dir("hf_tie");
    TinyHfSpec spec;
    spec.tied = tied;
    testing::WriteTinyHfFolder(spec, dir.path());
    auto model = HfModelLoader::Load(dir.str());
    ASSERT_TRUE(model.ok()) << model.status();
    const Model& m = **model;
    EXPECT_EQ(m.config().tied_embeddings, tied);
    EXPECT_EQ(m.weights().output.data == m.weights().token_embd.data, tied);
    EXPECT_EQ(m.gguf(), nullptr);
    EXPECT_EQ(m.weights().token_embd.type, GgmlType::kBF16);
    EXPECT_EQ(m.weights().token_embd.rows, spec.vocab);
    EXPECT_EQ(m.weights().token_embd.row_bytes, static_cast<size_t>(spec.hidden) * 2);
    EXPECT_EQ(m.weights().layers.size(), static_cast<size_t>(spec.layers));
    EXPECT_EQ(m.weights().layers[1].w_down.rows, spec.hidden);
    EXPECT_EQ(m.weights().layers[1].w_down.cols, spec.ffn);
    EXPECT_EQ(m.config().name, dir.path().filename().string());
  }
}

TEST(HfModelTest, UntiedConfigWithoutLmHeadFallsBackToEmbeddings) {
  TempFolder dir("hf_nohead");
  TinyHfSpec spec;
  spec.write_lm_head = false;
  testing::WriteTinyHfFolder(spec, dir.path());
  auto model = HfModelLoader::Load(dir.str());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE((*model)->config().tied_embeddings);
  EXPECT_EQ((*model)->weights().output.data, (*model)->weights().token_embd.data);
}

TEST(HfModelTest, VectorsAreWidenedToF32Exactly) {
  TempFolder dir("hf_vec");
  TinyHfSpec spec;
  spec.arch = "qwen2";
  spec.vector_dtype = "BF16";
  spec.matrix_dtype = "F16";
  testing::WriteTinyHfFolder(spec, dir.path());
  auto model = HfModelLoader::Load(dir.str());
  ASSERT_TRUE(model.ok()) << model.status();
  const auto tensors = testing::TinyHfTensors(spec);
  const LayerWeights& l = (*model)->weights().layers[1];
  ASSERT_EQ(l.bk.type, GgmlType::kF32);
  ASSERT_EQ(l.attn_norm.type, GgmlType::kF32);
  const auto& bk = tensors.at("model.layers.1.self_attn.k_proj.bias").values;
  const auto& norm = tensors.at("model.layers.1.input_layernorm.weight").values;
  for (size_t i = 0; i < bk.size(); ++i) {
    EXPECT_EQ(reinterpret_cast<const float*>(l.bk.data)[i], bk[i]) << i;
  }
  for (size_t i = 0; i < norm.size(); ++i) {
    EXPECT_EQ(reinterpret_cast<const float*>(l.attn_norm.data)[i], norm[i]) << i;
  }
  EXPECT_EQ(l.wq.type, GgmlType::kF16);
}

TEST(HfModelTest, MissingMisShapedAndWrongDtypeTensorsAreNamed) {
  {  // the config says ffn 96, the tensors were written for ffn 80
    TempFolder dir("hf_shape");
    TinyHfSpec written;
    written.ffn = 80;
    testing::WriteTinyHfFolder(written, dir.path());
    TinyHfSpec claimed;
    testing::WriteFile(dir.path() / "config.json", testing::TinyHfConfigJson(claimed));
    auto model = HfModelLoader::Load(dir.str());
    ASSERT_FALSE(model.ok());
    EXPECT_TRUE(absl::StrContains(model.status().message(), "mlp.")) << model.status();
    EXPECT_TRUE(absl::StrContains(model.status().message(), "[80, 64]")) << model.status();
  }
  {  // a layer more in the config than in the checkpoint
    TempFolder dir("hf_missing");
    TinyHfSpec spec;
    testing::WriteTinyHfFolder(spec, dir.path());
    spec.layers = 3;
    testing::WriteFile(dir.path() / "config.json", testing::TinyHfConfigJson(spec));
    auto model = HfModelLoader::Load(dir.str());
    ASSERT_FALSE(model.ok());
    EXPECT_TRUE(absl::StrContains(model.status().message(), "num_hidden_layers = 3"))
        << model.status();
  }
  {  // one tensor absent
    TempFolder dir("hf_absent");
    TinyHfSpec spec;
    testing::WriteTinyHfFolder(spec, dir.path());
    testing::SafetensorsWriter w;
    for (const auto& [name, t] : testing::TinyHfTensors(spec)) {
      if (name == "model.layers.1.self_attn.o_proj.weight") continue;
      const std::string dtype = t.matrix ? "BF16" : "F32";
      w.Add({name, dtype, t.shape, testing::Encode(t.values, dtype)});
    }
    testing::WriteFile(dir.path() / "model.safetensors", w.Build());
    auto model = HfModelLoader::Load(dir.str());
    ASSERT_FALSE(model.ok());
    EXPECT_TRUE(absl::StrContains(model.status().message(),
                                  "missing tensor 'model.layers.1.self_attn.o_proj.weight'"))
        << model.status();
  }
  {  // an integer matrix
    TempFolder dir("hf_dtype");
    TinyHfSpec spec;
    spec.layers = 1;
    testing::WriteTinyHfFolder(spec, dir.path());
    testing::SafetensorsWriter w;
    for (const auto& [name, t] : testing::TinyHfTensors(spec)) {
      const bool bad = name == "model.layers.0.mlp.up_proj.weight";
      std::string dtype = bad ? "I16" : (t.matrix ? "BF16" : "F32");
      w.Add({name, dtype, t.shape, testing::Encode(t.values, bad ? "BF16" : dtype)});
    }
    testing::WriteFile(dir.path() / "model.safetensors", w.Build());
    auto model = HfModelLoader::Load(dir.str());
    ASSERT_FALSE(model.ok());
    EXPECT_TRUE(absl::StrContains(model.status().message(), "up_proj")) << model.status();
    EXPECT_TRUE(absl::StrContains(model.status().message(), "I16")) << model.status();
  }
}

TEST(HfModelTest, ShardedWithAndWithoutIndex) {
  for (bool index : {true, false}) {
    TempFolder dir("hf_shards");
    TinyHfSpec spec;
    spec.shards = 3;
    spec.write_index = index;
    testing::WriteTinyHfFolder(spec, dir.path());
    auto model = LoadModel(dir.str());
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->config().num_layers, spec.layers);
  }
}

// ---- HF vs GGUF through the CPU backend ----

struct LogitTrace {
  std::vector<std::vector<float>> logits;  // prefill, then each decode step: [vocab] each
};

LogitTrace RunModel(const Model& model, bool exact) {
  KvConfig kv;
  kv.k_scheme = kv.v_scheme = "fp32";
  kv.memory_bytes = 4ll << 20;
  auto options = MakeKvOptions(model.config(), kv);
  EXPECT_TRUE(options.ok()) << options.status();
  auto backend = CpuBackend::Create(model, *options, {.num_threads = 1, .exact_matmul = exact});
  EXPECT_TRUE(backend.ok()) << backend.status();
  LogitTrace run;
  if (!backend.ok()) return run;
  const std::vector<TokenId> prompt = {3, 17, 5, 40, 22, 9, 31};
  const std::vector<TokenId> next = {11, 2};
  KvCache& cache = (*backend)->kv_cache();
  EXPECT_TRUE(cache.AddSequence(1).ok());
  EXPECT_TRUE(cache.Reserve(1, static_cast<int64_t>(prompt.size() + next.size())).ok());
  ForwardItem item;
  item.seq = 1;
  item.tokens = prompt;
  ForwardResult result;
  EXPECT_TRUE((*backend)->Forward({&item, 1}, &result).ok());
  run.logits.push_back(result.logits);
  for (size_t i = 0; i < next.size(); ++i) {
    ForwardItem step;
    step.seq = 1;
    step.tokens = absl::Span<const TokenId>(&next[i], 1);
    step.start_pos = static_cast<int64_t>(prompt.size() + i);
    step.decode_step = static_cast<int64_t>(i);
    ForwardResult r;
    EXPECT_TRUE((*backend)->Forward({&step, 1}, &r).ok());
    run.logits.push_back(r.logits);
  }
  return run;
}

float MaxAbsDiff(const LogitTrace& a, const LogitTrace& b) {
  float m = 0.0f;
  EXPECT_EQ(a.logits.size(), b.logits.size());
  for (size_t s = 0; s < std::min(a.logits.size(), b.logits.size()); ++s) {
    EXPECT_EQ(a.logits[s].size(), b.logits[s].size());
    for (size_t i = 0; i < std::min(a.logits[s].size(), b.logits[s].size()); ++i) {
      EXPECT_TRUE(std::isfinite(a.logits[s][i]) && std::isfinite(b.logits[s][i]));
      m = std::max(m, std::abs(a.logits[s][i] - b.logits[s][i]));
    }
  }
  return m;
}

float MaxAbs(const LogitTrace& a) {
  float m = 0.0f;
  for (const auto& l : a.logits) {
    for (float x : l) m = std::max(m, std::abs(x));
  }
  return m;
}

class HfVsGgufTest : public ::testing::TestWithParam<std::tuple<std::string, bool, bool>> {};

TEST_P(HfVsGgufTest, SameLogits) {
  const auto [arch, tied, exact] = GetParam();
  TinyHfSpec spec;
  spec.arch = arch;
  spec.tied = tied;
  if (arch == "qwen2") {  // exercise the F16 matrix and BF16 vector paths too
    spec.matrix_dtype = "F16";
    spec.vector_dtype = "BF16";
  }
  TempFolder dir("hf_vs_gguf");
  testing::WriteTinyHfFolder(spec, dir.path());
  auto hf = LoadModel(dir.str());
  ASSERT_TRUE(hf.ok()) << hf.status();
  auto gguf_file = GgufFile::FromBytes(testing::TinyHfAsGguf(spec));
  ASSERT_TRUE(gguf_file.ok()) << gguf_file.status();
  auto gguf = ModelLoader::FromGguf(std::move(*gguf_file));
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  EXPECT_EQ((*hf)->config().rope_pairing, RopePairing::kHalfSplit);
  EXPECT_EQ((*gguf)->config().rope_pairing,
            arch == "llama" ? RopePairing::kInterleaved : RopePairing::kHalfSplit);

  const LogitTrace a = RunModel(**hf, exact);
  const LogitTrace b = RunModel(**gguf, exact);
  ASSERT_EQ(a.logits.size(), 3u);
  const float diff = MaxAbsDiff(a, b);
  EXPECT_LE(diff, kLogitAtol) << "max |logit| " << MaxAbs(a);
  EXPECT_GT(MaxAbs(a), 0.1f) << "logits too small for the comparison to mean anything";
  std::printf("%s tied=%d exact=%d: max |HF - GGUF| = %.3g (max |logit| %.3g)\n", arch.c_str(),
              tied, exact, diff, MaxAbs(a));

  if (arch == "llama") {  // without the permutation the pairing is wrong: must be detected
    auto unpermuted = GgufFile::FromBytes(testing::TinyHfAsGguf(spec, /*permute_qk=*/false));
    ASSERT_TRUE(unpermuted.ok());
    auto wrong = ModelLoader::FromGguf(std::move(*unpermuted));
    ASSERT_TRUE(wrong.ok());
    EXPECT_GT(MaxAbsDiff(a, RunModel(**wrong, exact)), 100 * kLogitAtol);
  }
}

// RoPE scaling end to end on the CPU backend: an HF folder declaring llama3 (or linear) scaling
// gives the logits of the same weights as a GGUF carrying the factors as its rope_freqs tensor
// (or its rope.scaling metadata), and both differ from the unscaled model by far more than the
// tolerance, so a loader or backend that dropped the factors would fail here. The tiny model's
// original context (16) puts nearly every pair past the llama3 blend: positions 0-8 move.
TEST(HfModelTest, RopeScalingReachesTheForwardPass) {
  TinyHfSpec base;
  TempFolder plain_dir("rope_plain");
  testing::WriteTinyHfFolder(base, plain_dir.path());
  auto plain = LoadModel(plain_dir.str());
  ASSERT_TRUE(plain.ok()) << plain.status();
  const LogitTrace unscaled = RunModel(**plain, /*exact=*/true);

  struct Case {
    const char* name;
    std::string hf_json;
    std::string gguf_type;
    float gguf_factor;
    bool gguf_tensor;  // llama3: the factors as rope_freqs
    int gguf_original_context = 0;
    std::map<std::string, float> gguf_f32 = {};
  };
  // yarn over an original window of 64: head_dim 16 and θ 10^4 put its ramp over pairs 0-3.
  // "yarn-attn" gives the attention factor explicitly in HF's form (it replaces 1 + 0.1·ln 4)
  // and as ggml's multiplier of it in the GGUF.
  const float yarn_mscale = 1.0f + 0.1f * std::log(4.0f);
  const Case cases[] = {
      {"llama3",
       R"({"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,)"
       R"("original_max_position_embeddings":16})",
       "", 1.0f, true},
      {"linear", R"({"type":"linear","factor":4.0})", "linear", 4.0f, false},
      {"yarn", R"({"type":"yarn","factor":4.0,"original_max_position_embeddings":64})", "yarn",
       4.0f, false, 64},
      {"yarn-attn",
       R"({"type":"yarn","factor":4.0,"original_max_position_embeddings":64,"attention_factor":1.5})",
       "yarn", 4.0f, false, 64, {{"yarn_attn_factor", 1.5f / yarn_mscale}}},
  };
  std::map<std::string, LogitTrace> logits;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TinyHfSpec spec = base;
    spec.rope_scaling = c.hf_json;
    TempFolder dir("rope_scaled");
    testing::WriteTinyHfFolder(spec, dir.path());
    auto hf = LoadModel(dir.str());
    ASSERT_TRUE(hf.ok()) << hf.status();
    ASSERT_EQ((*hf)->config().rope_freq_factors.size(), static_cast<size_t>(spec.head_dim() / 2));
    TinyHfSpec gspec = base;
    gspec.gguf_rope_scaling_type = c.gguf_type;
    gspec.gguf_rope_scaling_factor = c.gguf_factor;
    gspec.gguf_rope_original_context = c.gguf_original_context;
    gspec.gguf_rope_scaling_f32 = c.gguf_f32;
    if (c.gguf_tensor) gspec.gguf_rope_freqs = (*hf)->config().rope_freq_factors;
    auto file = GgufFile::FromBytes(testing::TinyHfAsGguf(gspec));
    ASSERT_TRUE(file.ok()) << file.status();
    auto gguf = ModelLoader::FromGguf(std::move(*file));
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    EXPECT_EQ((*gguf)->config().rope_freq_factors, (*hf)->config().rope_freq_factors);
    EXPECT_NEAR((*gguf)->config().rope_attn_factor, (*hf)->config().rope_attn_factor, 4e-7f);
    EXPECT_EQ((*gguf)->config().context_length, (*hf)->config().context_length);
    const LogitTrace a = RunModel(**hf, /*exact=*/true);
    const LogitTrace b = RunModel(**gguf, /*exact=*/true);
    EXPECT_LE(MaxAbsDiff(a, b), kLogitAtol);
    EXPECT_GT(MaxAbsDiff(a, unscaled), 100 * kLogitAtol);
    logits[c.name] = a;
  }
  // The attention factor reaches attention: the same frequencies with 1.5 instead of 1.139.
  EXPECT_GT(MaxAbsDiff(logits["yarn"], logits["yarn-attn"]), 100 * kLogitAtol);
}

// An operator's rope_scaling override (model.rope_scaling / --rope-scaling) makes an unscaled
// GGUF the model its scaled HF folder declares: the same config and the same logits. A bad
// override is an error naming where it came from and leaves the model as it was; "default"
// removes a scaling the checkpoint declared.
TEST(HfModelTest, RopeScalingOverrideReplacesTheModels) {
  const std::string yarn = R"({"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":64})";
  TinyHfSpec spec;
  spec.rope_scaling = yarn;
  TempFolder dir("rope_override");
  testing::WriteTinyHfFolder(spec, dir.path());
  auto hf = LoadModel(dir.str());
  ASSERT_TRUE(hf.ok()) << hf.status();
  auto file = GgufFile::FromBytes(testing::TinyHfAsGguf(TinyHfSpec{}));
  ASSERT_TRUE(file.ok()) << file.status();
  auto gguf = ModelLoader::FromGguf(std::move(*file));
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  const LogitTrace unscaled = RunModel(**gguf, /*exact=*/true);

  for (const char* bad : {"{\"rope_type\":\"yarn\"}", "{\"rope_type\":\"dynamic\",\"factor\":2.0}", "{oops"}) {
    absl::Status s = (*gguf)->OverrideRopeScaling(bad, "--rope-scaling");
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_TRUE(absl::StrContains(s.message(), "--rope-scaling")) << s;
    EXPECT_TRUE((*gguf)->config().rope_freq_factors.empty()) << bad;
    EXPECT_EQ((*gguf)->config().context_length, 256) << bad;
  }
  ASSERT_TRUE((*gguf)->OverrideRopeScaling(yarn, "--rope-scaling").ok());
  EXPECT_EQ((*gguf)->config().rope_freq_factors, (*hf)->config().rope_freq_factors);
  EXPECT_EQ((*gguf)->config().rope_attn_factor, (*hf)->config().rope_attn_factor);
  EXPECT_EQ((*gguf)->config().context_length, (*hf)->config().context_length);
  const LogitTrace scaled = RunModel(**gguf, /*exact=*/true);
  EXPECT_LE(MaxAbsDiff(scaled, RunModel(**hf, /*exact=*/true)), kLogitAtol);
  EXPECT_GT(MaxAbsDiff(scaled, unscaled), 100 * kLogitAtol);

  ASSERT_TRUE((*hf)->OverrideRopeScaling(R"({"rope_type":"default"})", "cfg").ok());
  EXPECT_TRUE((*hf)->config().rope_freq_factors.empty());
  EXPECT_EQ((*hf)->config().rope_attn_factor, 1.0f);
  EXPECT_LE(MaxAbsDiff(RunModel(**hf, /*exact=*/true), unscaled), kLogitAtol);
}

// GGUF RoPE scaling the forward pass cannot run is refused, naming it; a rope_freqs tensor of
// the wrong length or with a zero is refused too.
TEST(HfModelTest, GgufRopeScalingErrors) {
  auto load = [](const TinyHfSpec& spec) {
    auto file = GgufFile::FromBytes(testing::TinyHfAsGguf(spec));
    EXPECT_TRUE(file.ok()) << file.status();
    return ModelLoader::FromGguf(std::move(*file));
  };
  TinyHfSpec spec;
  spec.gguf_rope_scaling_type = "longrope";
  spec.gguf_rope_scaling_factor = 4.0f;
  auto longrope = load(spec);
  ASSERT_FALSE(longrope.ok());
  EXPECT_EQ(longrope.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(longrope.status().message(), "longrope")) << longrope.status();
  spec.gguf_rope_scaling_type = "yarn";  // DeepSeek's log multiplier is not this arithmetic
  spec.gguf_rope_scaling_f32 = {{"yarn_log_multiplier", 0.1f}};
  auto deepseek = load(spec);
  ASSERT_FALSE(deepseek.ok());
  EXPECT_EQ(deepseek.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(deepseek.status().message(), "yarn_log_multiplier")) << deepseek.status();
  spec.gguf_rope_scaling_f32 = {{"yarn_beta_fast", 0.5f}};  // below beta_slow
  auto betas = load(spec);
  ASSERT_FALSE(betas.ok());
  EXPECT_EQ(betas.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(betas.status().message(), "beta_fast")) << betas.status();
  TinyHfSpec zero;
  zero.gguf_rope_freqs.assign(static_cast<size_t>(zero.head_dim() / 2), 1.0f);
  zero.gguf_rope_freqs[3] = 0.0f;
  auto bad = load(zero);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "rope_freqs")) << bad.status();
  TinyHfSpec wrong;
  wrong.gguf_rope_freqs.assign(static_cast<size_t>(wrong.head_dim() / 2 + 1), 1.0f);
  auto shape = load(wrong);
  ASSERT_FALSE(shape.ok());
  EXPECT_TRUE(absl::StrContains(shape.status().message(), "rope_freqs")) << shape.status();
}

// A head size that is not hidden / heads (Mistral Nemo's shape, here 64 / 4 heads with 32 per
// head): the HF folder's head_dim and the GGUF's attention.key_length give the same model, and
// q_dim = 128 ≠ hidden = 64 runs through the CPU backend.
TEST(HfModelTest, ExplicitHeadDimFolderAndGgufAgree) {
  TinyHfSpec spec;
  spec.explicit_head_dim = 32;
  TempFolder dir("hf_head_dim");
  testing::WriteTinyHfFolder(spec, dir.path());
  auto hf = LoadModel(dir.str());
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ((*hf)->config().head_dim, 32);
  EXPECT_EQ((*hf)->config().q_dim(), 128);
  auto file = GgufFile::FromBytes(testing::TinyHfAsGguf(spec));
  ASSERT_TRUE(file.ok()) << file.status();
  auto gguf = ModelLoader::FromGguf(std::move(*file));
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  EXPECT_EQ((*gguf)->config().head_dim, 32);
  const LogitTrace a = RunModel(**hf, /*exact=*/true);
  const LogitTrace b = RunModel(**gguf, /*exact=*/true);
  EXPECT_LE(MaxAbsDiff(a, b), kLogitAtol);
  EXPECT_GT(MaxAbs(a), 0.1f);
}

// Qwen3 on the CPU backend against a forward written here from the architecture's definition,
// in double (so the per-head q/k RMSNorm's place, before RoPE, is checked against something the
// engine does not share): one layer, the RunModel sequence, every step's logits. Without the
// q/k norm the reference moves by far more than the tolerance, so dropping it would fail here.
std::vector<std::vector<double>> NaiveQwen3Logits(const TinyHfSpec& s, const std::vector<TokenId>& tokens,
                                                  bool qk_norm) {
  const auto t = testing::TinyHfTensors(s);
  auto m = [&](const std::string& name) -> const std::vector<float>& { return t.at(name).values; };
  const int H = s.hidden, nh = s.heads, nkv = s.kv_heads, d = s.head_dim(), F = s.ffn, V = s.vocab;
  auto matvec = [](const std::vector<float>& w, int rows, int cols, const std::vector<double>& x) {
    std::vector<double> y(rows, 0.0);
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) y[r] += static_cast<double>(w[r * cols + c]) * x[c];
    }
    return y;
  };
  auto rms = [](const double* x, const std::vector<float>& w, int n, double* out) {
    double ss = 0.0;
    for (int i = 0; i < n; ++i) ss += x[i] * x[i];
    const double inv = 1.0 / std::sqrt(ss / n + 1e-6);
    for (int i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
  };
  std::vector<std::vector<double>> xs, ks, vs, logits;
  for (size_t pos = 0; pos < tokens.size(); ++pos) {
    std::vector<double> x(H);
    for (int i = 0; i < H; ++i) x[i] = m("model.embed_tokens.weight")[tokens[pos] * H + i];
    for (int layer = 0; layer < s.layers; ++layer) {
      const std::string p = "model.layers." + std::to_string(layer) + ".";
      std::vector<double> xn(H);
      rms(x.data(), m(p + "input_layernorm.weight"), H, xn.data());
      std::vector<double> q = matvec(m(p + "self_attn.q_proj.weight"), nh * d, H, xn);
      std::vector<double> k = matvec(m(p + "self_attn.k_proj.weight"), nkv * d, H, xn);
      const std::vector<double> v = matvec(m(p + "self_attn.v_proj.weight"), nkv * d, H, xn);
      auto rotate = [&](double* h, const std::string& norm) {  // the head's norm, then half-split pairs
        if (qk_norm) rms(h, m(norm), d, h);
        for (int i = 0; i < d / 2; ++i) {
          const double a = static_cast<double>(pos) * std::pow(static_cast<double>(s.rope_theta), -2.0 * i / d);
          const double x0 = h[i], x1 = h[i + d / 2];
          h[i] = x0 * std::cos(a) - x1 * std::sin(a);
          h[i + d / 2] = x0 * std::sin(a) + x1 * std::cos(a);
        }
      };
      for (int h = 0; h < nh; ++h) rotate(&q[h * d], p + "self_attn.q_norm.weight");
      for (int h = 0; h < nkv; ++h) rotate(&k[h * d], p + "self_attn.k_norm.weight");
      if (layer == 0) {  // one layer: the cache is this layer's
        ks.push_back(k);
        vs.push_back(v);
      }
      std::vector<double> attn(nh * d, 0.0);
      for (int h = 0; h < nh; ++h) {
        const int g = h / (nh / nkv);
        std::vector<double> sc(pos + 1);
        double mx = -1e300;
        for (size_t j = 0; j <= pos; ++j) {
          double dot = 0.0;
          for (int c = 0; c < d; ++c) dot += q[h * d + c] * ks[j][g * d + c];
          sc[j] = dot / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, sc[j]);
        }
        double z = 0.0;
        for (double& v2 : sc) z += (v2 = std::exp(v2 - mx));
        for (size_t j = 0; j <= pos; ++j) {
          for (int c = 0; c < d; ++c) attn[h * d + c] += sc[j] / z * vs[j][g * d + c];
        }
      }
      const std::vector<double> o = matvec(m(p + "self_attn.o_proj.weight"), H, nh * d, attn);
      for (int i = 0; i < H; ++i) x[i] += o[i];
      rms(x.data(), m(p + "post_attention_layernorm.weight"), H, xn.data());
      const std::vector<double> gate = matvec(m(p + "mlp.gate_proj.weight"), F, H, xn);
      std::vector<double> act = matvec(m(p + "mlp.up_proj.weight"), F, H, xn);
      for (int i = 0; i < F; ++i) act[i] *= gate[i] / (1.0 + std::exp(-gate[i]));
      const std::vector<double> down = matvec(m(p + "mlp.down_proj.weight"), H, F, act);
      for (int i = 0; i < H; ++i) x[i] += down[i];
    }
    std::vector<double> xn(H);
    rms(x.data(), m("model.norm.weight"), H, xn.data());
    logits.push_back(matvec(m(s.tied ? "model.embed_tokens.weight" : "lm_head.weight"), V, H, xn));
  }
  return logits;
}

TEST(HfModelTest, Qwen3MatchesANaiveForward) {
  TinyHfSpec spec;
  spec.arch = "qwen3";
  spec.layers = 1;
  spec.matrix_dtype = "F32";
  TempFolder dir("hf_qwen3");
  testing::WriteTinyHfFolder(spec, dir.path());
  auto model = LoadModel(dir.str());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE((*model)->config().qk_norm);
  const LogitTrace got = RunModel(**model, /*exact=*/true);
  ASSERT_EQ(got.logits.size(), 3u);
  const std::vector<TokenId> seq = {3, 17, 5, 40, 22, 9, 31, 11, 2};  // RunModel's prompt, then its steps
  const auto want = NaiveQwen3Logits(spec, seq, /*qk_norm=*/true);
  const auto without = NaiveQwen3Logits(spec, seq, /*qk_norm=*/false);
  double err = 0.0, moved = 0.0, mag = 0.0;
  for (size_t step = 0; step < 3; ++step) {
    const size_t pos = 6 + step;
    for (int i = 0; i < spec.vocab; ++i) {
      err = std::max(err, std::fabs(got.logits[step][i] - want[pos][i]));
      moved = std::max(moved, std::fabs(want[pos][i] - without[pos][i]));
      mag = std::max(mag, std::fabs(want[pos][i]));
    }
  }
  std::printf("qwen3 vs naive: max |err| %.3g, q/k norm moves logits by %.3g (max |logit| %.3g)\n", err, moved, mag);
  EXPECT_LE(err, 1e-4) << "max |logit| " << mag;
  EXPECT_GT(moved, 100 * 1e-4) << "the q/k norm must move these logits for the check to mean anything";
  EXPECT_GT(mag, 0.1);
}

INSTANTIATE_TEST_SUITE_P(All, HfVsGgufTest,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3"),
                                            ::testing::Bool(), ::testing::Bool()));

// One CPU thread and a 4 MiB KV pool: enough for these tiny models.
EngineConfig TinyEngineConfig(const std::string& model_path) {
  EngineConfig config;
  config.model_path = model_path;
  config.threads = 1;
  config.kv.memory_bytes = 4ll << 20;
  return config;
}

// Runs `prompt` greedily for `max_tokens` (EOS ignored) on the loaded engine; the tokens it
// produced, or -1 when the request could not be submitted.
int GreedyTokens(LoadedEngine& loaded, const std::vector<TokenId>& prompt, int32_t max_tokens) {
  Request request;
  request.id = "hf";
  request.prompt = prompt;
  request.sampling.temperature = 0.0f;
  request.stop.max_tokens = max_tokens;
  request.stop.ignore_eos = true;
  auto stream = loaded.engine->Submit(request);
  EXPECT_TRUE(stream.ok()) << stream.status();
  if (!stream.ok()) return -1;
  int tokens = 0;
  while (true) {
    RequestEvent e = *(*stream)->Next();
    if (e.kind == RequestEvent::Kind::kToken) ++tokens;
    if (e.kind == RequestEvent::Kind::kFinish) {
      EXPECT_TRUE(e.status.ok()) << e.status;
      return tokens;
    }
  }
}

TEST(HfModelTest, LoadEngineRunsAFolderWithItsTokenizerAndTemplate) {
  TempFolder dir("hf_engine");
  TinyHfSpec spec;
  testing::WriteTinyHfFolder(spec, dir.path());
  // Byte-level vocabulary of the letters a-z (ids 0..25) plus two ChatML specials.
  std::string vocab;
  for (int i = 0; i < 26; ++i) {
    if (i > 0) vocab += ',';
    vocab += '"';
    vocab += static_cast<char>('a' + i);
    vocab += "\":";
    vocab += std::to_string(i);
  }
  testing::WriteFile(dir.path() / "tokenizer.json",
                     R"({"added_tokens":[{"id":26,"content":"<|im_start|>","special":true},)"
                     R"({"id":27,"content":"<|im_end|>","special":true}],)"
                     R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},)"
                     R"("decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{)" +
                         vocab + R"(},"merges":[]}})");
  testing::WriteFile(dir.path() / "tokenizer_config.json",
                     R"({"eos_token":"<|im_end|>","chat_template":"{% for m in messages %})"
                     R"({{'<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>'}})"
                     R"({% endfor %}"})");
  EngineConfig config = TinyEngineConfig(dir.str());
  auto loaded = LoadEngine(config);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->chat_template.name(), "chatml");
  EXPECT_EQ((*loaded)->tokenizer->eos_id(), 27);
  const auto prompt = (*loaded)->tokenizer->Encode(
      (*loaded)->chat_template.Apply({{"user", "hi"}}, true), true);
  ASSERT_GE(prompt.size(), 4u);
  EXPECT_EQ(prompt[0], 26);
  EXPECT_EQ(GreedyTokens(**loaded, prompt, 3), 3);

  EXPECT_EQ((*loaded)->sampling_defaults.temperature, SamplingParams{}.temperature);  // no generation_config.json

  // generation_config.json's sampling becomes the defaults requests start from; a bad value
  // fails the load naming the file.
  testing::WriteFile(dir.path() / "generation_config.json", R"({"temperature": 0.6, "top_p": 0.9, "top_k": 40})");
  auto with_defaults = LoadEngine(config);
  ASSERT_TRUE(with_defaults.ok()) << with_defaults.status();
  EXPECT_FLOAT_EQ((*with_defaults)->sampling_defaults.temperature, 0.6f);
  EXPECT_FLOAT_EQ((*with_defaults)->sampling_defaults.top_p, 0.9f);
  EXPECT_EQ((*with_defaults)->sampling_defaults.top_k, 40);
  config.model_sampling_defaults = false;  // model.sampling_defaults: false → the built-in ones
  auto builtin = LoadEngine(config);
  ASSERT_TRUE(builtin.ok()) << builtin.status();
  EXPECT_EQ((*builtin)->sampling_defaults.temperature, SamplingParams{}.temperature);
  EXPECT_EQ((*builtin)->sampling_defaults.top_k, 0);
  config.model_sampling_defaults = true;
  testing::WriteFile(dir.path() / "generation_config.json", R"({"temperature": 9})");
  auto bad_defaults = LoadEngine(config);
  ASSERT_FALSE(bad_defaults.ok());
  EXPECT_TRUE(absl::StrContains(bad_defaults.status().message(), "generation_config.json")) << bad_defaults.status();
  std::filesystem::remove(dir.path() / "generation_config.json");

  // The configuration's rope_scaling reaches the model the engine runs; a bad one fails the load.
  config.rope_scaling = R"({"rope_type":"linear","factor":2.0})";
  auto scaled = LoadEngine(config);
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  EXPECT_EQ((*scaled)->model->config().rope_freq_factors,
            std::vector<float>(static_cast<size_t>(spec.head_dim() / 2), 2.0f));
  config.rope_scaling = R"({"rope_type":"linear","factor":0.5})";
  auto refused = LoadEngine(config);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "model.rope_scaling")) << refused.status();
  config.rope_scaling.clear();

  // No template in the folder and no override: the same clear error as for GGUF.
  std::filesystem::remove(dir.path() / "tokenizer_config.json");
  EXPECT_FALSE(LoadEngine(config).ok());
  config.chat_template = "llama3";
  EXPECT_TRUE(LoadEngine(config).ok());
}

// A Mistral-7B-style folder: a SentencePiece tokenizer.json (the tokenizer fixture's legacy
// layout: Prepend/Replace normalizer, byte fallback) and the v0.1 [INST] template. The engine
// picks the mistral template, the rendered prompt starts with BOS (the "<s>" text matched as
// its control token), and generation runs.
TEST(HfModelTest, LoadEngineRunsASentencePieceFolderWithTheMistralTemplate) {
  std::ifstream in("tests/engine/tokenizer/fixtures/sentencepiece_bpe.json");
  ASSERT_TRUE(in.good()) << "run from the repository root";
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json fx = nlohmann::json::parse(ss.str());
  const nlohmann::json& legacy = fx["variants"]["legacy"];
  const nlohmann::json doc = {{"version", "1.0"}, {"added_tokens", fx["added_tokens"]},
                              {"normalizer", legacy["normalizer"]}, {"pre_tokenizer", nullptr},
                              {"decoder", legacy["decoder"]}, {"model", fx["model"]}};
  TempFolder dir("hf_mistral");
  TinyHfSpec spec;
  spec.vocab = 640;  // ≥ the fixture's 612 ids
  testing::WriteTinyHfFolder(spec, dir.path());
  testing::WriteFile(dir.path() / "tokenizer.json", doc.dump());
  testing::WriteFile(
      dir.path() / "tokenizer_config.json",
      nlohmann::json({{"bos_token", "<s>"},
                      {"eos_token", "</s>"},
                      {"add_bos_token", true},
                      {"chat_template",
                       "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
                       "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
                       "'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}"}})
          .dump());
  EngineConfig config = TinyEngineConfig(dir.str());
  auto loaded = LoadEngine(config);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->chat_template.name(), "mistral");
  const Tokenizer& tok = *(*loaded)->tokenizer;
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  const std::string text = (*loaded)->chat_template.Apply({{"user", "Hello world"}}, true);
  EXPECT_EQ(text, "<s>[INST] Hello world [/INST]");
  const std::vector<TokenId> prompt = tok.Encode(text, /*parse_special=*/true);
  ASSERT_GE(prompt.size(), 3u);
  EXPECT_EQ(prompt[0], 1);
  // [INST] and [/INST] are control tokens in this vocabulary (as in v0.3's); the text between
  // them is a segment of its own, which the legacy Prepend normalizer prefixes with "▁".
  const TokenId inst = tok.Find("[INST]"), inst_end = tok.Find("[/INST]");
  ASSERT_GE(inst, 0);
  EXPECT_EQ(prompt[1], inst);
  EXPECT_EQ(prompt.back(), inst_end);
  EXPECT_EQ(tok.Decode(std::vector<TokenId>(prompt.begin() + 2, prompt.end() - 1)), "  Hello world ");
  EXPECT_EQ(GreedyTokens(**loaded, prompt, 4), 4);
}

TEST(HfModelTest, SpecDispatch) {
  TempFolder dir("hf_spec");
  auto no_config = ParseModelSpec(dir.str());
  EXPECT_TRUE(absl::IsNotFound(no_config.status())) << no_config.status();
  testing::WriteTinyHfFolder(TinyHfSpec{}, dir.path());
  auto hf = ParseModelSpec(dir.str());
  ASSERT_TRUE(hf.ok());
  EXPECT_EQ(hf->kind, ModelSourceKind::kHuggingFace);
  auto gguf = ParseModelSpec("models/x.gguf");
  ASSERT_TRUE(gguf.ok());
  EXPECT_EQ(gguf->kind, ModelSourceKind::kGguf);
  EXPECT_FALSE(LoadModel("/nonexistent/x.gguf").ok());
}

}  // namespace
}  // namespace witcert
