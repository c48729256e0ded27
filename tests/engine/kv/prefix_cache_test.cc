// Prefix caching: the index's keys, leaf-first LRU eviction, and KvCache's attach / publish /
// evict cycle (shared blocks read-only, idle blocks counted free, exact copies required).
#include <numeric>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/kv/prefix_index.h"
#include "gtest/gtest.h"

namespace witcert {
namespace {

std::vector<int32_t> Tokens(int32_t first, int32_t n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(PrefixIndex, KeysAreParentAndTokens) {
  PrefixIndex index;
  const std::vector<int32_t> a = Tokens(0, 4), b = Tokens(4, 4);
  EXPECT_TRUE(index.Insert(-1, a, 7));
  EXPECT_FALSE(index.Insert(-1, a, 8));  // key taken
  EXPECT_FALSE(index.Insert(-1, b, 7));  // block taken
  EXPECT_FALSE(index.Insert(3, b, 9));   // parent not listed
  EXPECT_TRUE(index.Insert(7, b, 9));
  EXPECT_EQ(index.Find(-1, a), 7);
  EXPECT_EQ(index.Find(7, b), 9);
  EXPECT_EQ(index.Find(-1, b), -1);  // same tokens under another parent: a miss
  std::vector<int32_t> a2 = a;
  a2[3] = 99;
  EXPECT_EQ(index.Find(-1, a2), -1);  // one token differs: a miss
  EXPECT_EQ(index.num_blocks(), 2);
}

TEST(PrefixIndex, EvictsIdleLeavesLeastRecentlyUsedFirst) {
  PrefixIndex index;
  // Two chains: 1 → 2 → 3 and 4 → 5.
  ASSERT_TRUE(index.Insert(-1, Tokens(0, 2), 1));
  ASSERT_TRUE(index.Insert(1, Tokens(2, 2), 2));
  ASSERT_TRUE(index.Insert(2, Tokens(4, 2), 3));
  ASSERT_TRUE(index.Insert(-1, Tokens(9, 2), 4));
  ASSERT_TRUE(index.Insert(4, Tokens(11, 2), 5));
  EXPECT_EQ(index.EvictOne(), -1);  // all busy
  for (int32_t b : {1, 2, 3}) index.MarkIdle(b);
  EXPECT_EQ(index.num_idle(), 3);
  // Only the leaf 3 may go; then 2, then 1 (a parent never before its children).
  EXPECT_EQ(index.EvictOne(), 3);
  EXPECT_EQ(index.EvictOne(), 2);
  index.MarkIdle(5);
  index.MarkIdle(4);
  // 1 went idle before 5 and 4: it is the least recently used leaf.
  EXPECT_EQ(index.EvictOne(), 1);
  index.MarkBusy(5);  // taken again: 4 is idle but not a leaf
  EXPECT_EQ(index.EvictOne(), -1);
  index.MarkIdle(5);
  EXPECT_EQ(index.EvictOne(), 5);
  EXPECT_EQ(index.EvictOne(), 4);
  EXPECT_EQ(index.num_blocks(), 0);
  EXPECT_EQ(index.num_idle(), 0);
  EXPECT_EQ(index.Find(-1, Tokens(0, 2)), -1);
}

KvCacheOptions Options(int64_t blocks) {
  KvCacheOptions o;
  o.num_layers = 2;
  o.num_kv_heads = 2;
  o.head_dim = 16;
  o.block_size = 4;
  o.num_blocks = blocks;
  o.num_bands = 2;
  o.prefix_caching = true;
  return o;
}

// Writes every layer of positions [begin, end) of `seq` (values depend on the position only).
void WriteRows(KvCache& kv, SeqId seq, int64_t begin, int64_t end) {
  std::vector<float> k(2 * 16), v(2 * 16);
  for (int64_t p = begin; p < end; ++p) {
    for (int i = 0; i < 32; ++i) {
      k[i] = 0.01f * static_cast<float>(p * 32 + i);
      v[i] = -k[i];
    }
    for (int32_t l = 0; l < 2; ++l) ASSERT_TRUE(kv.Write(seq, l, p, k.data(), v.data()).ok());
  }
}

// Sequence `seq` computes `prompt` (every layer written) and publishes its full blocks.
void ComputeAndPublish(KvCache& kv, SeqId seq, const std::vector<int32_t>& prompt) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  ASSERT_TRUE(kv.AddSequence(seq).ok());
  ASSERT_TRUE(kv.Reserve(seq, n).ok());
  WriteRows(kv, seq, 0, n);
  kv.PublishPrefix(seq, prompt, n);
}

TEST(PrefixCache, AttachSharesPublishedBlocksReadOnly) {
  auto kv = std::move(KvCache::Create(Options(16))).value();
  const std::vector<int32_t> prompt = Tokens(100, 10);  // blocks [0,4) [4,8), then 2 tokens
  ASSERT_TRUE(kv->AddSequence(1).ok());
  EXPECT_EQ(*kv->AttachPrefix(1, prompt), 0);  // empty cache
  ASSERT_TRUE(kv->Reserve(1, 10).ok());
  WriteRows(*kv, 1, 0, 10);
  kv->PublishPrefix(1, prompt, 10);  // the two full blocks
  EXPECT_EQ(kv->stats().prefix_cached_blocks, 2);
  EXPECT_EQ(kv->Write(1, 0, 3, std::vector<float>(32).data(), std::vector<float>(32).data()).code(),
            absl::StatusCode::kFailedPrecondition);  // published: read-only now

  // Same prompt: both full blocks attach (the last token's block never does).
  ASSERT_TRUE(kv->AddSequence(2).ok());
  EXPECT_EQ(*kv->AttachPrefix(2, prompt), 8);
  std::vector<int32_t> b1, b2;
  ASSERT_TRUE(kv->BlockIds(1, &b1).ok());
  ASSERT_TRUE(kv->BlockIds(2, &b2).ok());
  ASSERT_EQ(b2.size(), 2u);
  EXPECT_EQ(b2[0], b1[0]);
  EXPECT_EQ(b2[1], b1[1]);
  EXPECT_EQ(kv->Write(2, 1, 5, std::vector<float>(32).data(), std::vector<float>(32).data()).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(kv->Reserve(2, 10).ok());
  WriteRows(*kv, 2, 8, 10);  // its own block
  // The shared rows read back the same for both sequences.
  GatheredHead h1, h2;
  ASSERT_TRUE(kv->GatherHead(1, 1, 1, 10, &h1).ok());
  ASSERT_TRUE(kv->GatherHead(2, 1, 1, 10, &h2).ok());
  EXPECT_EQ(h1.k, h2.k);
  EXPECT_EQ(h1.v, h2.v);

  // A prompt of exactly 8 tokens attaches one block: its last token must be computed.
  ASSERT_TRUE(kv->AddSequence(3).ok());
  EXPECT_EQ(*kv->AttachPrefix(3, Tokens(100, 8)), 4);
  // Diverging inside the second block: only the first attaches.
  std::vector<int32_t> other = prompt;
  other[6] = 7;
  ASSERT_TRUE(kv->AddSequence(4).ok());
  EXPECT_EQ(*kv->AttachPrefix(4, other), 4);
  EXPECT_EQ(kv->AttachPrefix(4, other).status().code(), absl::StatusCode::kFailedPrecondition);
  const KvCacheStats st = kv->stats();
  EXPECT_EQ(st.prefix_query_tokens, 10 + 10 + 8 + 10);
  EXPECT_EQ(st.prefix_hit_tokens, 0 + 8 + 4 + 4);
  for (SeqId s : {1, 2, 3, 4}) kv->FreeSequence(s);
  EXPECT_EQ(kv->num_free_blocks(), kv->num_total_blocks());  // idle listed blocks count free
  EXPECT_EQ(kv->stats().prefix_cached_blocks, 2);            // ... and stay listed
}

TEST(PrefixCache, IdleBlocksAreEvictedWhenThePoolNeedsThem) {
  auto kv = std::move(KvCache::Create(Options(4))).value();
  const std::vector<int32_t> prompt = Tokens(0, 9);
  ASSERT_TRUE(kv->AddSequence(1).ok());
  ASSERT_TRUE(kv->Reserve(1, 9).ok());  // 3 blocks
  WriteRows(*kv, 1, 0, 9);
  kv->PublishPrefix(1, prompt, 9);
  kv->FreeSequence(1);
  EXPECT_EQ(kv->num_free_blocks(), 4);
  // A different sequence needs every block: the two idle listed ones are evicted.
  ASSERT_TRUE(kv->AddSequence(2).ok());
  EXPECT_EQ(*kv->AttachPrefix(2, Tokens(50, 16)), 0);
  ASSERT_TRUE(kv->Reserve(2, 16).ok());
  EXPECT_EQ(kv->num_free_blocks(), 0);
  EXPECT_EQ(kv->stats().prefix_cached_blocks, 0);
  kv->FreeSequence(2);
  ASSERT_TRUE(kv->AddSequence(3).ok());
  EXPECT_EQ(*kv->AttachPrefix(3, prompt), 0);  // gone
}

TEST(PrefixCache, BlocksWithoutAnExactCopyAreNotShared) {
  KvCacheOptions o = Options(8);
  o.backing_store_bytes = 0;  // no exact copies at all
  auto kv = std::move(KvCache::Create(o)).value();
  const std::vector<int32_t> prompt = Tokens(0, 9);
  ComputeAndPublish(*kv, 1, prompt);
  EXPECT_EQ(kv->stats().prefix_cached_blocks, 0);
  ASSERT_TRUE(kv->AddSequence(2).ok());
  EXPECT_EQ(*kv->AttachPrefix(2, prompt), 0);
}

TEST(PrefixCache, OffMeansNoSharing) {
  KvCacheOptions o = Options(8);
  o.prefix_caching = false;
  auto kv = std::move(KvCache::Create(o)).value();
  const std::vector<int32_t> prompt = Tokens(0, 9);
  ComputeAndPublish(*kv, 1, prompt);
  ASSERT_TRUE(kv->AddSequence(2).ok());
  EXPECT_EQ(*kv->AttachPrefix(2, prompt), 0);
  kv->FreeSequence(1);
  EXPECT_EQ(kv->num_free_blocks(), 8);
}

}  // namespace
}  // namespace witcert
