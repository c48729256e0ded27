// The CPU backend's outlier channel choice (engine/kv/outlier_channels.h) in a batch: the first
// block to fill chooses a layer's channels, and the batch's items are written concurrently once
// the channels are chosen — but one after another, in batch order, until then, so the choice
// comes from the first item's block whatever the thread timing (the GPU backend's rule too).
#include <memory>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model/synthetic_model.h"
#include "gtest/gtest.h"

namespace witcert {
namespace {

constexpr int32_t kOutliers = 4;

std::vector<TokenId> Prompt(int32_t len, int32_t seed) {
  std::vector<TokenId> p(len);
  for (int32_t i = 0; i < len; ++i) p[i] = (seed * 131 + i * 37 + i * i * 7) % 512;
  return p;
}

// Every (layer, KV head, side) table of `oc`, concatenated.
std::vector<int32_t> Tables(const OutlierChannels& oc, const ModelConfig& c) {
  std::vector<int32_t> all;
  for (int32_t l = 0; l < c.num_layers; ++l) {
    EXPECT_TRUE(oc.chosen(l));
    for (int32_t h = 0; h < c.num_kv_heads; ++h) {
      for (bool side : {false, true}) all.insert(all.end(), oc.channels(l, h, side), oc.channels(l, h, side) + kOutliers);
    }
  }
  return all;
}

// The tables a fresh 4-thread backend chooses when `prompts` (sequences 0, 1, ...) run as one batch.
std::vector<int32_t> ChosenBy(const Model& model, const std::vector<std::vector<TokenId>>& prompts) {
  const ModelConfig& c = model.config();
  KvCacheOptions o = KvCacheOptionsFor(c);
  o.block_size = 16;
  o.num_blocks = 32;
  o.k_scheme = o.v_scheme = "int8-rtn";
  o.outlier_channels = kOutliers;
  auto backend = CpuBackend::Create(model, o, {.num_threads = 4});
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return {};
  std::vector<ForwardItem> items;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const SeqId seq = static_cast<SeqId>(i);
    EXPECT_TRUE((*backend)->kv_cache().AddSequence(seq).ok());
    EXPECT_TRUE((*backend)->kv_cache().Reserve(seq, 64).ok());
    items.push_back({.seq = seq, .tokens = prompts[i], .start_pos = 0});
  }
  ForwardResult r;
  EXPECT_TRUE((*backend)->Forward(items, &r).ok());
  return Tables((*backend)->kv_cache().outliers(), c);
}

TEST(CpuOutlierChoice, TheFirstItemsBlockChoosesWhateverTheThreads) {
  auto model = SyntheticModelLoader::Create("tiny", 11, {}, 2);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<TokenId> a = Prompt(40, 1), b = Prompt(40, 2);
  const std::vector<int32_t> from_a = ChosenBy(**model, {a}), from_b = ChosenBy(**model, {b});
  ASSERT_NE(from_a, from_b);  // the two prompts choose differently: the test can tell them apart
  for (int trial = 0; trial < 6; ++trial) {
    EXPECT_EQ(ChosenBy(**model, {a, b}), from_a) << "trial " << trial;
    EXPECT_EQ(ChosenBy(**model, {b, a}), from_b) << "trial " << trial;
  }
}

}  // namespace
}  // namespace witcert
