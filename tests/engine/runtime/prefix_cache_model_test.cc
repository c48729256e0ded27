// Prefix caching on the default model: a prompt that starts from cached blocks computes the
// same logits, bit for bit, as the same prompt computed from position 0, and so do the
// decode steps after it (CPU backend: the cached prefix is attended exact).
#include <memory>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/runtime/loaded_engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/testing/default_model_test.h"

namespace witcert {
namespace {

class PrefixCacheModelTest : public testing::DefaultModelTest {
 protected:
  std::unique_ptr<CpuBackend> MakeBackend(const std::string& scheme, bool prefix_caching) {
    KvConfig kv;
    kv.k_scheme = kv.v_scheme = scheme;
    kv.memory_bytes = 32ll << 20;
    kv.prefix_caching = prefix_caching;
    return MakeCpuBackend(kv, {.num_threads = 2});
  }
};

int32_t Argmax(const float* x, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) best = x[i] > x[best] ? i : best;
  return best;
}

// Runs `prompt` for `seq` from `start` (attached before) and then `steps` greedy decodes;
// returns every logits row it produced.
std::vector<std::vector<float>> PromptThenDecode(CpuBackend& backend, SeqId seq,
                                                 const std::vector<TokenId>& prompt, int64_t start,
                                                 int steps, const GatePolicy* policy) {
  KvCache& kv = backend.kv_cache();
  const int32_t vocab = backend.config().vocab_size;
  std::vector<std::vector<float>> rows;
  std::vector<TokenId> tokens = prompt;
  EXPECT_TRUE(kv.Reserve(seq, static_cast<int64_t>(tokens.size())).ok());
  ForwardItem item;
  item.seq = seq;
  item.tokens = absl::Span<const TokenId>(tokens).subspan(start);
  item.start_pos = start;
  item.exact_prefix = start > 0;
  item.policy = policy;
  ForwardResult r;
  EXPECT_TRUE(backend.Forward({&item, 1}, &r).ok());
  rows.push_back(r.logits);
  kv.PublishPrefix(seq, tokens, static_cast<int64_t>(tokens.size()));
  for (int s = 0; s < steps; ++s) {
    tokens.push_back(Argmax(rows.back().data(), vocab));
    EXPECT_TRUE(kv.Reserve(seq, static_cast<int64_t>(tokens.size())).ok());
    ForwardItem d;
    d.seq = seq;
    d.tokens = absl::Span<const TokenId>(tokens).subspan(tokens.size() - 1);
    d.start_pos = static_cast<int64_t>(tokens.size()) - 1;
    d.decode_step = s;
    d.policy = policy;
    ForwardResult dr;
    EXPECT_TRUE(backend.Forward({&d, 1}, &dr).ok());
    rows.push_back(dr.logits);
  }
  return rows;
}

TEST_F(PrefixCacheModelTest, AHitComputesWhatAMissComputes) {
  const std::vector<TokenId> prompt = tokenizer_->Encode(
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n<|im_start|>user\nTell me a long story about a lighthouse keeper and "
      "the storm.<|im_end|>\n<|im_start|>assistant\n",
      /*parse_special=*/true);
  ASSERT_GT(prompt.size(), 40u);
  GatePolicy observe;
  observe.mode = GateMode::kObserve;
  for (const char* scheme : {"fp16", "int8-rtn"}) {
    SCOPED_TRACE(scheme);
    // The reference: a cache without prefix caching, prompt from position 0.
    auto plain = MakeBackend(scheme, false);
    ASSERT_TRUE(plain->kv_cache().AddSequence(1).ok());
    const auto want = PromptThenDecode(*plain, 1, prompt, 0, 4, &observe);

    auto cached = MakeBackend(scheme, true);
    KvCache& kv = cached->kv_cache();
    ASSERT_TRUE(kv.AddSequence(1).ok());
    EXPECT_EQ(*kv.AttachPrefix(1, prompt), 0);
    const auto first = PromptThenDecode(*cached, 1, prompt, 0, 4, &observe);
    ASSERT_TRUE(kv.AddSequence(2).ok());
    const int64_t hit = *kv.AttachPrefix(2, prompt);
    EXPECT_EQ(hit, (static_cast<int64_t>(prompt.size()) - 1) / 16 * 16);
    const auto second = PromptThenDecode(*cached, 2, prompt, hit, 4, &observe);
    ASSERT_EQ(want.size(), first.size());
    ASSERT_EQ(want.size(), second.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(first[i], want[i]) << "row " << i << " (no hit)";
      EXPECT_EQ(second[i], want[i]) << "row " << i << " (prefix hit)";
    }
    kv.FreeSequence(1);
    kv.FreeSequence(2);
    EXPECT_EQ(kv.num_free_blocks(), kv.num_total_blocks());
  }
}

// The engine with a pool too small for its requests: every prompt shares a long system
// prompt, the scheduler preempts and recomputes, and prefix hits (preempted sequences
// re-attaching their own published blocks included) must neither fail a request nor leak a
// block.
TEST_F(PrefixCacheModelTest, SharedPrefixesUnderPreemptionFinishAndFreeEveryBlock) {
  EngineConfig config;
  config.model_path = testing::DefaultModelPath();
  config.threads = 2;
  config.device = "cpu";
  config.kv.memory_bytes = 5ll << 20;  // ~12 blocks of 16 tokens for this model (fp16 KV)
  config.kv.prefix_caching = true;
  auto loaded = LoadEngine(config, nullptr);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  Engine& engine = *(*loaded)->engine;
  const std::string system =
      "<|im_start|>system\nYou are a patient assistant. You answer every question in full "
      "sentences, you explain each step, and you never skip the reasoning.<|im_end|>\n";
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) {
    Request request;
    request.id = "r" + std::to_string(i);
    request.prompt =
        tokenizer_->Encode(system + "<|im_start|>user\nQuestion number " + std::to_string(i) +
                               ": why is the sea salty?<|im_end|>\n<|im_start|>assistant\n",
                           /*parse_special=*/true);
    request.sampling.temperature = 0.0f;
    request.stop.max_tokens = 40;
    request.stop.ignore_eos = true;
    auto stream = engine.Submit(request);
    ASSERT_TRUE(stream.ok()) << stream.status();
    streams.push_back(*stream);
  }
  for (auto& stream : streams) {
    int tokens = 0;
    while (true) {
      RequestEvent e = *stream->Next();
      if (e.kind == RequestEvent::Kind::kToken) ++tokens;
      if (e.kind == RequestEvent::Kind::kFinish) {
        EXPECT_TRUE(e.status.ok()) << e.status;
        EXPECT_EQ(e.finish_reason, FinishReason::kLength);
        break;
      }
    }
    EXPECT_EQ(tokens, 40);
  }
  const EngineStats stats = engine.Stats();
  const KvCacheStats kv = engine.backend().KvStats();
  EXPECT_GT(stats.preemptions, 0) << "the pool was meant to be too small";
  EXPECT_GT(kv.prefix_hit_tokens, 0);
  EXPECT_EQ(engine.backend().kv_cache().num_free_blocks(),
            engine.backend().kv_cache().num_total_blocks());
}

}  // namespace
}  // namespace witcert
