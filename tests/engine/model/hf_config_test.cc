// Hugging Face config.json parsing (ParseHfConfig, engine/model/hf_model.h): the fields each
// architecture names its dimensions by (Llama, Qwen2, Mistral), head_dim and tied heads,
// rope_scaling (linear, llama3, yarn) turned into per-pair factors, an attention factor and a
// context, and a clear error naming the field for each malformed or unsupported config (dynamic
// and longrope scaling, unknown architectures).
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/model/hf_model.h"
#include "engine/model/rope_scaling.h"
#include "gtest/gtest.h"

namespace witcert {
namespace {

std::string Config(const std::string& extra, const std::string& arch = "LlamaForCausalLM") {
  return R"({"architectures":[")" + arch +
         R"("],"hidden_size":256,"num_hidden_layers":3,"num_attention_heads":8,)"
         R"("num_key_value_heads":2,"intermediate_size":512,"vocab_size":1000,)"
         R"("max_position_embeddings":8192,"rope_theta":500000.0,"rms_norm_eps":1e-05)" +
         extra + "}";
}

TEST(HfConfigTest, LlamaFields) {
  auto c = ParseHfConfig(Config(""), "cfg");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_EQ(c->hidden_dim, 256);
  EXPECT_EQ(c->num_layers, 3);
  EXPECT_EQ(c->num_heads, 8);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_EQ(c->ffn_dim, 512);
  EXPECT_EQ(c->vocab_size, 1000);
  EXPECT_EQ(c->context_length, 8192);
  EXPECT_EQ(c->rope_theta, 500000.0f);
  EXPECT_EQ(c->rms_norm_eps, 1e-5f);
  EXPECT_EQ(c->rope_pairing, RopePairing::kHalfSplit);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->tied_embeddings);
}

TEST(HfConfigTest, QwenMistralHeadDimAndTies) {
  auto q = ParseHfConfig(Config(R"(,"tie_word_embeddings":true,"use_sliding_window":false)",
                                "Qwen2ForCausalLM"), "cfg");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->architecture, "qwen2");
  EXPECT_TRUE(q->qkv_bias);
  EXPECT_TRUE(q->tied_embeddings);
  EXPECT_EQ(q->rope_pairing, RopePairing::kHalfSplit);

  auto m = ParseHfConfig(Config(R"(,"sliding_window":4096,"head_dim":64)", "MistralForCausalLM"),
                         "cfg");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->architecture, "llama");
  EXPECT_EQ(m->head_dim, 64);  // explicit head_dim wins over hidden / heads
  EXPECT_EQ(m->q_dim(), 512);
  EXPECT_EQ(m->context_length, 4096);  // capped by the sliding window

  auto d = ParseHfConfig(Config(R"(,"rope_scaling":{"rope_type":"default"},"head_dim":null)"),
                         "cfg");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->head_dim, 32);
}

// rope_scaling "llama3" (Llama 3.1+) and "linear" become per-pair frequency factors
// (engine/model/rope_scaling.h; the factors' values are tested in rope_scaling_test); "default"
// and null leave RoPE unscaled.
TEST(HfConfigTest, RopeScalingBecomesFactors) {
  auto llama3 = ParseHfConfig(Config(R"(,"rope_scaling":{"factor":8.0,"low_freq_factor":1.0,)"
                                     R"("high_freq_factor":4.0,"original_max_position_embeddings":8192,)"
                                     R"("rope_type":"llama3"})"),
                              "cfg");
  ASSERT_TRUE(llama3.ok()) << llama3.status();
  std::vector<float> want;
  ASSERT_TRUE(Llama3RopeFactors({8.0, 1.0, 4.0, 8192.0}, 500000.0, 32, &want).ok());
  EXPECT_EQ(llama3->rope_freq_factors, want);
  EXPECT_EQ(want.front(), 1.0f);
  EXPECT_EQ(want.back(), 8.0f);
  auto linear = ParseHfConfig(Config(R"(,"rope_scaling":{"type":"linear","factor":2.0})"), "cfg");
  ASSERT_TRUE(linear.ok()) << linear.status();
  EXPECT_EQ(linear->rope_freq_factors, std::vector<float>(16, 2.0f));
  EXPECT_EQ(linear->rope_attn_factor, 1.0f);
  for (const char* none : {R"(,"rope_scaling":null)", R"(,"rope_scaling":{"rope_type":"default"})", "",
                           R"(,"rope_scaling":{"type":"linear","factor":1.0})"}) {
    auto c = ParseHfConfig(Config(none), "cfg");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->rope_freq_factors.empty()) << none;
    EXPECT_EQ(c->rope_attn_factor, 1.0f) << none;
    EXPECT_EQ(c->context_length, 8192) << none;
  }
}

// rope_scaling "yarn" (Qwen2.5 / Qwen3 long context): the ramped factors, the attention factor
// (1 + 0.1·ln(factor) unless attention_factor, or DeepSeek's mscale pair, says otherwise) and
// the window it was made for, original_max_position_embeddings × factor (the original window
// defaults to max_position_embeddings).
TEST(HfConfigTest, YarnBecomesFactorsAttentionFactorAndContext) {
  auto yarn = ParseHfConfig(
      Config(R"(,"rope_scaling":{"type":"yarn","factor":4.0,"original_max_position_embeddings":8192})"),
      "cfg");
  ASSERT_TRUE(yarn.ok()) << yarn.status();
  std::vector<float> want;
  ASSERT_TRUE(YarnRopeFactors({.factor = 4.0, .original_context = 8192.0}, 500000.0, 32, &want).ok());
  EXPECT_EQ(yarn->rope_freq_factors, want);
  EXPECT_FLOAT_EQ(yarn->rope_attn_factor, 1.0f + 0.1f * std::log(4.0f));
  EXPECT_EQ(yarn->context_length, 32768);

  auto defaults = ParseHfConfig(Config(R"(,"rope_scaling":{"rope_type":"yarn","factor":2.0,)"
                                       R"("beta_fast":16,"beta_slow":2,"truncate":false})"),
                                "cfg");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  ASSERT_TRUE(YarnRopeFactors({.factor = 2.0, .original_context = 8192.0, .beta_fast = 16.0,
                               .beta_slow = 2.0, .truncate = false},
                              500000.0, 32, &want)
                  .ok());
  EXPECT_EQ(defaults->rope_freq_factors, want);
  EXPECT_EQ(defaults->context_length, 16384);

  auto given = ParseHfConfig(
      Config(R"(,"rope_scaling":{"type":"yarn","factor":4.0,"attention_factor":1.25})"), "cfg");
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->rope_attn_factor, 1.25f);
  auto deepseek = ParseHfConfig(Config(R"(,"rope_scaling":{"type":"yarn","factor":40.0,)"
                                       R"("mscale":1.0,"mscale_all_dim":0.5})"),
                                "cfg");
  ASSERT_TRUE(deepseek.ok()) << deepseek.status();
  EXPECT_FLOAT_EQ(deepseek->rope_attn_factor,
                  static_cast<float>((1 + 0.1 * std::log(40.0)) / (1 + 0.05 * std::log(40.0))));
}

TEST(HfConfigTest, ClearErrors) {
  struct Case {
    std::string json;
    absl::StatusCode code;
    const char* mention;
  };
  const std::vector<Case> cases = {
      {Config(R"(,"rope_scaling":{"factor":8.0,"rope_type":"llama3"})"),
       absl::StatusCode::kInvalidArgument, "low_freq_factor"},
      {Config(R"(,"rope_scaling":{"type":"linear","factor":0.5})"),
       absl::StatusCode::kInvalidArgument, "factor"},
      {Config(R"(,"rope_scaling":{"type":"longrope","short_factor":[1.0],"long_factor":[1.0]})"),
       absl::StatusCode::kUnimplemented, "longrope"},
      {Config(R"(,"rope_scaling":{"type":"yarn"})"), absl::StatusCode::kInvalidArgument, "factor"},
      {Config(R"(,"rope_scaling":{"type":"yarn","factor":4.0,"beta_fast":1.0})"),
       absl::StatusCode::kInvalidArgument, "beta_fast"},
      {Config(R"(,"rope_scaling":"yarn")"), absl::StatusCode::kInvalidArgument, "not an object"},
      {Config(R"(,"rope_scaling":{"type":"dynamic","factor":2.0})"),
       absl::StatusCode::kUnimplemented, "dynamic"},
      {Config("", "GPT2LMHeadModel"), absl::StatusCode::kInvalidArgument, "GPT2LMHeadModel"},
      {Config(R"(,"attention_bias":true)"), absl::StatusCode::kUnimplemented, "attention_bias"},
      {Config(R"(,"hidden_act":"gelu")"), absl::StatusCode::kUnimplemented, "hidden_act"},
      {Config(R"(,"use_sliding_window":true)", "Qwen2ForCausalLM"),
       absl::StatusCode::kUnimplemented, "use_sliding_window"},
      {R"({"architectures":["LlamaForCausalLM"],"num_hidden_layers":2})",
       absl::StatusCode::kInvalidArgument, "hidden_size"},
      {Config(R"(,"num_key_value_heads":3)"), absl::StatusCode::kInvalidArgument, "multiple"},
      {Config(R"(,"vocab_size":-5)"), absl::StatusCode::kInvalidArgument, "vocab_size"},
      // Beyond float's range (a duplicate key: the last one counts).
      {Config(R"(,"rms_norm_eps":1e39)"), absl::StatusCode::kInvalidArgument, "rms_norm_eps"},
      {Config(R"(,"rope_theta":1e300)"), absl::StatusCode::kInvalidArgument, "rope_theta"},
      {"[1,2]", absl::StatusCode::kInvalidArgument, "JSON object"},
  };
  for (const Case& c : cases) {
    auto r = ParseHfConfig(c.json, "folder/config.json");
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(r.status().code(), c.code) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), c.mention)) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "folder/config.json")) << r.status();
  }
}

}  // namespace
}  // namespace witcert
