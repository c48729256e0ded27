// Block pool, KV cache capacity accounting, backing-store eviction and unrepairable blocks.
#include <cmath>
#include <vector>

#include "engine/kv/backing_store.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/kv_cache.h"
#include "gtest/gtest.h"

namespace witcert {
namespace {

TEST(BlockPool, AllocFreeRefcountExhaustion) {
  BlockPool pool(4);
  auto a = pool.Allocate(3);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(pool.num_free(), 1);
  auto b = pool.Allocate(2);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.num_free(), 1);  // all or nothing
  pool.Share((*a)[0]);
  EXPECT_EQ(pool.RefCount((*a)[0]), 2);
  EXPECT_FALSE(pool.Release((*a)[0]));
  EXPECT_TRUE(pool.Release((*a)[0]));
  EXPECT_TRUE(pool.Release((*a)[1]));
  EXPECT_TRUE(pool.Release((*a)[2]));
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_FALSE(pool.Release((*a)[2]));  // double release ignored
  EXPECT_EQ(pool.num_free(), 4);
}

KvCacheOptions SmallOptions() {
  KvCacheOptions o;
  o.num_layers = 2;
  o.num_kv_heads = 3;
  o.head_dim = 64;
  o.block_size = 4;
  o.num_blocks = 10;
  o.k_scheme = "int8-rtn";
  o.v_scheme = "int8-rtn";
  return o;
}

TEST(KvCache, CapacityAccountingAndBackToFull) {
  auto cache = std::move(KvCache::Create(SmallOptions())).value();
  // per head per layer: K 64 + 2 scale + 8 band codes + 2 unit, V 64 + 2 scale + 4 summary.
  EXPECT_EQ(cache->BytesPerToken(), 2 * 3 * ((64 + 2 + 10) + (64 + 2 + 4)));
  ASSERT_TRUE(cache->AddSequence(1).ok());
  EXPECT_EQ(cache->AddSequence(1).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(cache->AddSequence(2).ok());
  ASSERT_TRUE(cache->Reserve(1, 17).ok());  // 5 blocks
  EXPECT_EQ(cache->num_free_blocks(), 5);
  EXPECT_EQ(cache->Reserve(2, 24).code(), absl::StatusCode::kResourceExhausted);  // 6 > 5
  EXPECT_EQ(cache->num_free_blocks(), 5);
  ASSERT_TRUE(cache->Reserve(2, 20).ok());
  EXPECT_EQ(cache->num_free_blocks(), 0);
  std::vector<float> k(3 * 64, 1.0f), v(3 * 64, 2.0f);
  EXPECT_EQ(cache->Write(1, 0, 20, k.data(), v.data()).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(cache->Write(1, 1, 16, k.data(), v.data()).ok());
  cache->FreeSequence(1);
  cache->FreeSequence(2);
  EXPECT_EQ(cache->num_free_blocks(), cache->num_total_blocks());
  auto fp32 = SmallOptions();
  fp32.k_scheme = fp32.v_scheme = "fp32";
  EXPECT_EQ(std::move(KvCache::Create(fp32)).value()->BytesPerToken(), 2 * 3 * 2 * 256);
  auto bad = SmallOptions();
  bad.k_scheme = "nope";
  EXPECT_EQ(KvCache::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvCache, GatherDecodesWhatWasWritten) {
  auto o = SmallOptions();
  o.k_scheme = "fp32";
  o.v_scheme = "fp16";
  auto cache = std::move(KvCache::Create(o)).value();
  ASSERT_TRUE(cache->AddSequence(5).ok());
  ASSERT_TRUE(cache->Reserve(5, 9).ok());
  std::vector<float> k(3 * 64), v(3 * 64);
  for (int t = 0; t < 9; ++t) {
    for (int j = 0; j < 3 * 64; ++j) {
      k[j] = t * 1000 + j;
      v[j] = 0.5f * j - t;
    }
    ASSERT_TRUE(cache->Write(5, 1, t, k.data(), v.data()).ok());
  }
  GatheredHead head;
  ASSERT_TRUE(cache->GatherHead(5, 1, 2, 9, &head).ok());
  EXPECT_TRUE(head.k_witness.empty());   // fp32 keys: exact, no witness
  EXPECT_EQ(head.v_rho.size(), 9u);         // fp16 values: a summary per row
  EXPECT_EQ(head.v_bound.size(), 9u);
  for (int t = 0; t < 9; ++t) {
    for (int j = 0; j < 64; ++j) {
      EXPECT_EQ(head.k[t * 64 + j], t * 1000 + 128 + j);
      EXPECT_EQ(head.v[t * 64 + j], 0.5f * (128 + j) - t);  // exactly representable in fp16
    }
  }
}

TEST(BackingStore, EvictsOldestFinishedFirstThenRefuses) {
  // entry = 2 (K,V) · 1 layer · 2 tokens · 1 head · 4 dims · 4 B = 64 B; room for 3.
  BackingStore store(3 * 64, 1, 2, 1, 4);
  EXPECT_EQ(store.entry_bytes(), 64);
  float k[4] = {1, 2, 3, 4}, v[4] = {5, 6, 7, 8};
  for (int b = 0; b < 3; ++b) {
    store.OnAllocate(b);
    store.Write(b, 0, 0, k, v);
  }
  EXPECT_EQ(store.stats().entries, 3);
  store.MarkFinished(2);  // finished order: 2, then 0
  store.MarkFinished(0);
  store.OnAllocate(3);
  store.Write(3, 0, 0, k, v);  // evicts 2 (oldest finished)
  EXPECT_FALSE(store.Has(2));
  EXPECT_TRUE(store.Has(0));
  store.OnAllocate(4);
  store.Write(4, 0, 0, k, v);  // evicts 0
  EXPECT_FALSE(store.Has(0));
  EXPECT_EQ(store.stats().evicted_blocks, 2);
  store.OnAllocate(5);
  store.Write(5, 0, 0, k, v);  // nothing finished left: refused
  EXPECT_FALSE(store.Has(5));
  EXPECT_EQ(store.stats().refused_blocks, 1);
  float rk[8], rv[8];
  EXPECT_FALSE(store.Read(5, 0, 0, rk, rv));
  EXPECT_EQ(store.stats().unrepairable_reads, 1);
  ASSERT_TRUE(store.Read(3, 0, 0, rk, rv));
  EXPECT_EQ(rk[2], 3.0f);
  EXPECT_EQ(rv[3], 8.0f);
  store.Write(5, 0, 1, k, v);  // still refused: counted once per block
  EXPECT_EQ(store.stats().refused_blocks, 1);
}

}  // namespace
}  // namespace witcert
