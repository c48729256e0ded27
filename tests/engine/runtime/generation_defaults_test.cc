// A checkpoint's generation_config.json as sampling defaults (engine/runtime/generation_defaults.h).
#include "engine/runtime/generation_defaults.h"

#include "gtest/gtest.h"
#include "tests/engine/model/gguf_writer.h"

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

// GGUF files converted with a generation_config carry it as general.sampling.* (llama.cpp's keys).
TEST(GenerationDefaultsTest, ReadsGgufSamplingKeys) {
  testing::GgufWriter w;
  w.AddF32("general.sampling.temp", 0.6f);
  w.AddF32("general.sampling.top_p", 0.95f);
  w.AddU32("general.sampling.top_k", 20);
  w.AddF32("general.sampling.penalty_repeat", 1.05f);
  w.AddU32("general.sampling.mirostat", 0);  // not a default here: ignored
  auto file = GgufFile::FromBytes(w.Build());
  ASSERT_TRUE(file.ok()) << file.status();
  auto d = GenerationDefaultsFromGguf(**file);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FLOAT_EQ(d->temperature, 0.6f);
  EXPECT_FLOAT_EQ(d->top_p, 0.95f);
  EXPECT_EQ(d->top_k, 20);
  EXPECT_FLOAT_EQ(d->repetition_penalty, 1.05f);
  EXPECT_EQ(d->min_p, 0.0f);

  testing::GgufWriter none;
  none.AddString("general.architecture", "llama");
  auto plain = GgufFile::FromBytes(none.Build());
  ASSERT_TRUE(plain.ok());
  auto p = GenerationDefaultsFromGguf(**plain);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->temperature, SamplingParams{}.temperature);

  testing::GgufWriter bad;
  bad.AddF32("general.sampling.temp", 7.0f);
  auto bad_file = GgufFile::FromBytes(bad.Build());
  ASSERT_TRUE(bad_file.ok());
  auto b = GenerationDefaultsFromGguf(**bad_file);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("general.sampling.temp"), std::string_view::npos) << b.status();
}

}  // namespace
}  // namespace witcert
