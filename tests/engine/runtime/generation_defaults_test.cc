// A checkpoint's generation_config.json as sampling defaults (engine/runtime/generation_defaults.h).
#include "engine/runtime/generation_defaults.h"

#include "gtest/gtest.h"

namespace witcert {
namespace {

// Qwen2.5-7B-Instruct's recommended sampling, as its generation_config.json states it.
TEST(GenerationDefaultsTest, ReadsTheSamplingKeys) {
  auto d = GenerationDefaultsFromJson(
      R"({"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
          "repetition_penalty": 1.05, "temperature": 0.7, "top_p": 0.8, "top_k": 20,
          "transformers_version": "4.37.0"})",
      "gen");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FLOAT_EQ(d->temperature, 0.7f);
  EXPECT_FLOAT_EQ(d->top_p, 0.8f);
  EXPECT_EQ(d->top_k, 20);
  EXPECT_FLOAT_EQ(d->repetition_penalty, 1.05f);
  EXPECT_EQ(d->min_p, 0.0f);

  auto none = GenerationDefaultsFromJson("", "gen");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->temperature, SamplingParams{}.temperature);
  auto only_ids = GenerationDefaultsFromJson(R"({"eos_token_id": 2, "temperature": null})", "gen");
  ASSERT_TRUE(only_ids.ok());
  EXPECT_EQ(only_ids->top_p, 1.0f);

  for (const char* bad : {R"({"temperature": 3})", R"({"top_p": 0})", R"({"repetition_penalty": "x"})",
                          R"({"top_k": -1})", "[1]"}) {
    auto r = GenerationDefaultsFromJson(bad, "gen");
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("gen"), std::string_view::npos) << r.status();
  }
}

}  // namespace
}  // namespace witcert
