// A gtest fixture holding the real default model and its tokenizer (skipped or failed as
// model_path.h says when the file is absent), with CPU backends made from it.
#pragma once

#include <memory>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/runtime/loaded_engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/testing/model_path.h"

namespace witcert::testing {

class DefaultModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WITCERT_REQUIRE_MODEL_OR_SKIP();
    auto model = Model::LoadGguf(DefaultModelPath());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    auto tok = Tokenizer::FromGguf(*model_->gguf());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
  }

  // A CPU backend over the model with a KV cache made from `kv` (its pool sized by
  // kv.memory_bytes).
  std::unique_ptr<CpuBackend> MakeCpuBackend(const KvConfig& kv, CpuBackend::Options options) {
    auto kv_options = MakeKvOptions(model_->config(), kv);
    EXPECT_TRUE(kv_options.ok()) << kv_options.status();
    auto backend = CpuBackend::Create(*model_, *kv_options, options);
    EXPECT_TRUE(backend.ok()) << backend.status();
    return std::move(*backend);
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

}  // namespace witcert::testing
