// The batched step's fused RoPE split + KV write (RopeSplitWriteKvCuda) against the two kernels it
// replaces, RopeSplitQkvCuda then WriteKvCuda: q, k and v bit for bit, and the pool's bytes (codes,
// scales, witnesses) equal, for every GPU scheme, GQA shapes with head dims 64, 128 and 256, both
// RoPE pairings, 1 to 37 tokens at large positions in shuffled slots.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/ops/transformer_ops_cuda.h"
#include "kernels/cuda/paged_kv_cuda.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace witcert {
namespace {

using testing::DeviceBuffer;
using testing::HostPool;

template <class T>
void ExpectSameBytes(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)), 0) << what << " differ";
}

struct Shape {
  int32_t hq, hkv, d;
};

TEST(RopeSplitWriteKv, IsRopeSplitThenWriteBitForBit) {
  WITCERT_SKIP_WITHOUT_GPU();
  int seed = 0;
  for (const Shape s : {Shape{32, 8, 128}, Shape{9, 3, 64}, Shape{28, 4, 128}, Shape{4, 2, 256}}) {
    for (int sc = static_cast<int>(KvScheme::kFp16); sc < static_cast<int>(KvScheme::kCount); ++sc) {
      const KvScheme scheme = static_cast<KvScheme>(sc);
      const bool interleaved = (seed % 2) == 1;
      const int64_t n = std::vector<int64_t>{1, 5, 16, 37}[seed % 4];
      std::mt19937 rng(1000 + seed++);
      SCOPED_TRACE(std::to_string(s.hq) + "/" + std::to_string(s.hkv) + " d " + std::to_string(s.d) + " " +
                   SchemeInfo(scheme).name + (interleaved ? " interleaved" : " halves") + " n " + std::to_string(n));
      PagedKvLayout L;
      L.num_blocks = (n + 15) / 16 + 3;
      L.num_kv_heads = s.hkv;
      L.block_size = 16;
      L.head_dim = s.d;
      L.num_bands = 8;
      L.interleaved = interleaved;
      L.scheme = scheme;
      const int64_t stride = int64_t{s.hq + 2 * s.hkv} * s.d + 8;  // a padded row
      std::vector<float> qkv(static_cast<size_t>(n * stride));
      std::uniform_real_distribution<float> u(-3.0f, 3.0f);
      for (float& x : qkv) x = u(rng);
      std::vector<int64_t> all(L.num_blocks * L.block_size);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      std::vector<int64_t> slots(all.begin(), all.begin() + n), pos(n);
      for (int64_t t = 0; t < n; ++t) pos[t] = 250000 + 7 * t;
      DeviceBuffer<float> dqkv;
      DeviceBuffer<int64_t> ds, dp;
      dqkv.Upload(qkv);
      ds.Upload(slots);
      dp.Upload(pos);
      const size_t qn = static_cast<size_t>(n) * s.hq * s.d, kn = static_cast<size_t>(n) * s.hkv * s.d;
      DeviceBuffer<float> q1(qn), k1(kn), v1(kn), q2(qn), k2(kn), v2(kn);
      q2.Fill(0x7f);  // poisoned: an element the fused kernel leaves unwritten shows
      k2.Fill(0x7f);
      v2.Fill(0x7f);
      PagedKvPoolCuda want_pool, got_pool;
      ASSERT_CUDA_OK(want_pool.Init(L, 1));
      ASSERT_CUDA_OK(got_pool.Init(L, 1));
      KvWriteArgs args;
      args.slots = ds.get();
      args.positions = dp.get();
      args.num_tokens = n;
      args.layer = 5;
      args.dither_seed = 0xd17;
      // The two kernels.
      ASSERT_CUDA_OK(RopeSplitQkvCuda(dqkv.get(), n, stride, s.hq, s.hkv, s.d, dp.get(), 500000.0f, interleaved,
                                      q1.get(), k1.get(), v1.get(), nullptr));
      args.k = k1.get();
      args.v = v1.get();
      ASSERT_CUDA_OK(WriteKvCuda(L, want_pool.layer(0), args, nullptr));
      // The fused one.
      args.k = k2.get();
      args.v = v2.get();
      KvWritePlan plan;
      ASSERT_CUDA_OK(PlanKvWriteCuda(L, got_pool.layer(0), args, &plan));
      ASSERT_CUDA_OK(RopeSplitWriteKvCuda(dqkv.get(), stride, s.hq, 500000.0f, interleaved, q2.get(), k2.get(),
                                          v2.get(), plan, nullptr));
      ASSERT_CUDART(cudaDeviceSynchronize());
      ExpectSameBytes(q2.Download(), q1.Download(), "q");
      ExpectSameBytes(k2.Download(), k1.Download(), "k");
      ExpectSameBytes(v2.Download(), v1.Download(), "v");
      const HostPool got = HostPool::Download(L, got_pool.layer(0)), want = HostPool::Download(L, want_pool.layer(0));
      ExpectSameBytes(got.k_codes, want.k_codes, "K codes");
      ExpectSameBytes(got.v_codes, want.v_codes, "V codes");
      ExpectSameBytes(got.k_scales, want.k_scales, "K scales");
      ExpectSameBytes(got.v_scales, want.v_scales, "V scales");
      ExpectSameBytes(got.k_wit, want.k_wit, "K band codes");
      ExpectSameBytes(got.k_unit, want.k_unit, "K units");
      ExpectSameBytes(got.v_summary, want.v_summary, "V summaries");
      // Something was written: the values' codes differ from an empty pool's.
      PagedKvPoolCuda blank;
      ASSERT_CUDA_OK(blank.Init(L, 1));
      EXPECT_NE(got.v_codes, HostPool::Download(L, blank.layer(0)).v_codes);
    }
  }
}

TEST(RopeSplitWriteKv, RejectsRowsThatAreNotThePlans) {
  WITCERT_SKIP_WITHOUT_GPU();
  PagedKvLayout L;
  L.num_blocks = 2;
  L.num_kv_heads = 2;
  L.head_dim = 64;
  L.scheme = KvScheme::kInt8Rtn;
  PagedKvPoolCuda pool;
  ASSERT_CUDA_OK(pool.Init(L, 1));
  DeviceBuffer<float> qkv(8 * 64), q(4 * 64), k(2 * 64), v(2 * 64), other(2 * 64);
  DeviceBuffer<int64_t> slot, pos;
  slot.Upload({3});
  pos.Upload({3});
  KvWriteArgs args;
  args.k = k.get();
  args.v = v.get();
  args.slots = slot.get();
  args.positions = pos.get();
  args.num_tokens = 1;
  KvWritePlan plan;
  ASSERT_CUDA_OK(PlanKvWriteCuda(L, pool.layer(0), args, &plan));
  EXPECT_TRUE(RopeSplitWriteKvCuda(qkv.get(), 8 * 64, 4, 10000.0f, false, q.get(), k.get(), v.get(), plan, nullptr).ok);
  // k must be the rows the plan encodes; the row stride must hold q, k and v.
  EXPECT_FALSE(RopeSplitWriteKvCuda(qkv.get(), 8 * 64, 4, 10000.0f, false, q.get(), other.get(), v.get(), plan,
                                    nullptr).ok);
  EXPECT_FALSE(RopeSplitWriteKvCuda(qkv.get(), 7 * 64, 4, 10000.0f, false, q.get(), k.get(), v.get(), plan, nullptr).ok);
  ASSERT_CUDART(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace witcert
