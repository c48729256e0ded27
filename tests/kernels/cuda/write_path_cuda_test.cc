// The GPU write path against the CPU codecs: codes, scales and witnesses must be
// bit-identical (no tolerance: both sides perform the same IEEE operations in the same order),
// for every scheme, head dims 64/128, both RoPE pairings, block sizes 16/32, shuffled slots,
// and hostile values (zeros, huge norms, fp16/fp8 overflow, outlier channels, denormals).
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/kv/codec.h"
#include "engine/kv/witness.h"
#include "gtest/gtest.h"
#include "kernels/cuda/paged_kv_cuda.h"
#include "kernels/meter/partial_sum.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace witcert {
namespace {

using testing::DeviceBuffer;
using testing::HostPool;

struct WriteCase {
  KvScheme scheme;
  int32_t d, bs;
  bool interleaved;
};

std::vector<float> HostileVectors(std::mt19937& rng, int64_t n, int32_t hkv, int32_t d) {
  std::vector<float> x(static_cast<size_t>(n) * hkv * d);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto& v : x) v = g(rng);
  for (int64_t t = 0; t < n; ++t) {
    for (int32_t h = 0; h < hkv; ++h) {
      float* row = &x[(t * hkv + h) * d];
      switch ((t * hkv + h) % 7) {
        case 0: std::fill(row, row + d, 0.0f); break;                  // zero vector
        case 1: for (int c = 0; c < d; ++c) row[c] *= 1e5f; break;     // fp16/fp8 overflow
        case 2: row[static_cast<int>(rng() % d)] *= 300.0f; break;     // outlier channel
        case 3: for (int c = 0; c < d; ++c) row[c] *= 1e-6f; break;    // fp16 subnormals
        case 4: for (int c = 0; c < d; ++c) row[c] *= 1e30f; break;    // huge norm
        default: break;
      }
    }
  }
  return x;
}

void RunWriteCase(const WriteCase& wc) {
  SCOPED_TRACE(std::string(SchemeInfo(wc.scheme).name) + " d=" + std::to_string(wc.d) +
               " bs=" + std::to_string(wc.bs) + (wc.interleaved ? " interleaved" : " half-split"));
  const int32_t hkv = 2, nb = 8, layer = 3;
  const uint64_t seed = 0x5eedULL;
  const int64_t n = 77;  // tokens written
  PagedKvLayout L;
  L.num_blocks = (n + wc.bs - 1) / wc.bs + 3;
  L.num_kv_heads = hkv;
  L.block_size = wc.bs;
  L.head_dim = wc.d;
  L.num_bands = nb;
  L.interleaved = wc.interleaved;
  L.scheme = wc.scheme;
  PagedKvPoolCuda pool;
  ASSERT_CUDA_OK(pool.Init(L, 1));
  std::mt19937 rng(1234 + wc.d + wc.bs + static_cast<int>(wc.scheme));
  std::vector<float> k = HostileVectors(rng, n, hkv, wc.d), v = HostileVectors(rng, n, hkv, wc.d);
  // Shuffled slots: token positions 1000.., slots a random permutation of the pool.
  std::vector<int64_t> all(L.num_blocks * wc.bs);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<int64_t> slots(all.begin(), all.begin() + n), pos(n);
  for (int64_t t = 0; t < n; ++t) pos[t] = 1000 + 3 * t;
  DeviceBuffer<float> dk, dv;
  DeviceBuffer<int64_t> ds, dp;
  dk.Upload(k);
  dv.Upload(v);
  ds.Upload(slots);
  dp.Upload(pos);
  KvWriteArgs a;
  a.k = dk.get();
  a.v = dv.get();
  a.slots = ds.get();
  a.positions = dp.get();
  a.num_tokens = n;
  a.layer = layer;
  a.dither_seed = seed;
  ASSERT_CUDA_OK(WriteKvCuda(L, pool.layer(0), a, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  HostPool hp = HostPool::Download(L, pool.layer(0));

  auto codec_or = FindKvCodec(SchemeInfo(wc.scheme).name);
  ASSERT_TRUE(codec_or.ok()) << codec_or.status();
  const KvCodec& codec = **codec_or;
  ASSERT_EQ(codec.BytesPerVector(wc.d), L.code_bytes() + 2 * L.scales_per_vector());
  BandLayout bands{wc.d, nb, wc.interleaved ? RopePairing::kInterleaved : RopePairing::kHalfSplit};
  std::vector<uint8_t> want(codec.BytesPerVector(wc.d));
  std::vector<float> xhat(wc.d);
  int mismatches = 0;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t blk = slots[t] / wc.bs, off = slots[t] % wc.bs;
    for (int32_t h = 0; h < hkv; ++h) {
      const int64_t vec = (blk * hkv + h) * wc.bs + off;
      for (int side = 0; side < 2; ++side) {
        const float* x = (side ? v.data() : k.data()) + (t * hkv + h) * wc.d;
        CodecContext ctx{seed, layer, h, pos[t], side == 1};
        codec.Encode(x, wc.d, ctx, want.data());
        std::vector<uint8_t> got = hp.CpuSlot(vec, side == 1);
        if (got != want && ++mismatches < 5) {
          ADD_FAILURE() << "codes/scales differ: token " << t << " head " << h << " side " << side;
        }
        if (!L.has_witness()) continue;
        codec.Decode(want.data(), wc.d, ctx, xhat.data());
        uint16_t w[64];
        ComputeWitness(x, xhat.data(), bands, w);
        const uint16_t* gw = hp.Witness(vec, side == 1);
        for (int b = 0; b < nb; ++b) {
          if (gw[b] != w[b] && ++mismatches < 5) {
            ADD_FAILURE() << "witness differs: token " << t << " head " << h << " side " << side
                          << " band " << b << " gpu " << gw[b] << " cpu " << w[b];
          }
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(WritePathCuda, BitIdenticalToCpuCodecsSmall) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (int s = 0; s < static_cast<int>(KvScheme::kCount); ++s) {
    RunWriteCase({static_cast<KvScheme>(s), 64, 16, true});
  }
}

TEST(WritePathCuda, BitIdenticalSweep) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (int s = 0; s < static_cast<int>(KvScheme::kCount); ++s) {
    for (int d : {64, 128}) {
      for (int bs : {16, 32}) {
        for (bool il : {true, false}) RunWriteCase({static_cast<KvScheme>(s), d, bs, il});
      }
    }
  }
}

// The kernel's split hash must compose to DitherValue exactly (host check, no GPU needed).
TEST(WritePathCuda, DitherTokenHashComposesToDitherValue) {
  for (uint64_t seed : {0ull, 42ull, 0xffffffffffffffffull}) {
    for (uint32_t layer : {0u, 7u}) {
      for (uint64_t pos : {0ull, 1ull, 131071ull}) {
        const uint64_t th = meter::DitherTokenHash(seed, layer, 3, pos);
        for (uint32_t c = 0; c < 128; c += 13) {
          for (bool isv : {false, true}) {
            EXPECT_EQ(meter::DitherFromTokenHash(th, c, isv), meter::DitherValue(seed, layer, 3, pos, c, isv));
          }
        }
      }
    }
  }
}

TEST(WritePathCuda, RejectsBadLayout) {
  PagedKvLayout L;
  L.num_blocks = 4;
  L.num_kv_heads = 1;
  L.head_dim = 48;  // not a multiple of 32
  EXPECT_FALSE(ValidateLayout(L).ok);
  L.head_dim = 64;
  L.num_bands = 5;  // does not divide d/2
  EXPECT_FALSE(ValidateLayout(L).ok);
  L.num_bands = 8;
  EXPECT_TRUE(ValidateLayout(L).ok);
}

}  // namespace
}  // namespace witcert
