// kivi2: codec round trip, group-fill behaviour through the cache (exact until the block
// fills, then encoded with witnesses), group rewrite, capacity accounting, soundness, and
// the pool back to full.
#include <cmath>
#include <cstdio>
#include <random>

#include "engine/kv/codec.h"
#include "engine/kv/kv_cache.h"
#include "gtest/gtest.h"
#include "tests/engine/kv/cache_probe.h"

namespace witcert {
namespace {

using testing::CellSweep;
using testing::Pattern;

const KvCodec& Kivi() { return **FindKvCodec("kivi2"); }

// Asymmetric 2-bit over [lo, hi]: step = (hi − lo)/3 and an error ≤ step/2, loosened by the
// fp16 parameters: the zero is fp16(lo) (|z − lo| ≤ 2^-11·|lo|, which may also widen the step
// by that much) and the step is rounded up (≤ 2^-10 relative). Tolerance: 0.5·step·(1 + 2^-9)
// + 2^-10·max(|lo|, |hi|) + 1e-6 absolute for fp32 arithmetic at these magnitudes.
double Tolerance(float lo, float hi) {
  const double step = (static_cast<double>(hi) - lo) / 3.0;
  return 0.5 * step * (1.0 + 1.0 / 512) + std::fmax(std::fabs(lo), std::fabs(hi)) / 1024 + 1e-6;
}

TEST(Kivi2Codec, SidesBytesAndValidation) {
  const KvCodec& k = Kivi();
  const KvCodec* v = k.ForValues();
  ASSERT_NE(v, &k);
  EXPECT_TRUE(k.group_encoded());
  EXPECT_FALSE(v->group_encoded());
  EXPECT_EQ(v->ForValues(), v);
  EXPECT_EQ(k.name(), "kivi2");
  EXPECT_EQ(v->name(), "kivi2");
  for (int d : {64, 128}) {
    EXPECT_EQ(k.BytesPerVector(d), d / 4);          // 2 bits per channel
    EXPECT_EQ(k.GroupParamBytes(d, 16), 2 * 2 * d);  // fp16 zero + scale per channel
    EXPECT_EQ(v->BytesPerVector(d), d / 4 + 4);     // + fp16 zero + scale per token
    EXPECT_EQ(v->GroupParamBytes(d, 16), 0);
  }
  EXPECT_FALSE(k.Validate(66).ok());
  EXPECT_FALSE(v->Validate(66).ok());
  EXPECT_TRUE(k.Validate(64).ok());
  // Other schemes: no side split, no group encoding.
  const KvCodec& int8 = **FindKvCodec("int8-rtn");
  EXPECT_EQ(int8.ForValues(), &int8);
  EXPECT_FALSE(int8.group_encoded());
}

TEST(Kivi2Codec, ValueRoundTripPerToken) {
  const KvCodec& c = *Kivi().ForValues();
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int d = 64;
  std::vector<float> x(d), y(d);
  std::vector<uint8_t> buf(c.BytesPerVector(d));
  for (int it = 0; it < 500; ++it) {
    const float offset = (it % 5) * 37.0f, scale = std::exp2(static_cast<float>(it % 13 - 6));
    float lo = INFINITY, hi = -INFINITY;
    for (auto& e : x) {
      e = offset + scale * g(rng);
      lo = std::fmin(lo, e);
      hi = std::fmax(hi, e);
    }
    c.Encode(x.data(), d, {}, buf.data());
    c.Decode(buf.data(), d, {}, y.data());
    for (int j = 0; j < d; ++j) ASSERT_LE(std::fabs(x[j] - y[j]), Tolerance(lo, hi)) << it;
  }
  std::vector<float> flat(d, 2.5f);  // constant vector: reproduced exactly (fp16 zero)
  c.Encode(flat.data(), d, {}, buf.data());
  c.Decode(buf.data(), d, {}, y.data());
  for (float e : y) EXPECT_EQ(e, 2.5f);
}

TEST(Kivi2Codec, KeyRoundTripPerChannelOverGroup) {
  // Channel c has offset 10·c and spread 2^(c%7 − 3): a per-token scale would be set by the
  // largest channel; per-channel keeps each channel's own step.
  const KvCodec& c = Kivi();
  const int d = 64, n = 16;
  const int64_t stride = 100;  // code rows need not be contiguous
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n * d), y(d);  // [n, d]
  std::vector<uint8_t> codes(n * stride, 0xAB), params(c.GroupParamBytes(d, n));
  for (int i = 0; i < n; ++i) {
    for (int ch = 0; ch < d; ++ch) x[i * d + ch] = 10.0f * ch + std::exp2(ch % 7 - 3.0f) * g(rng);
  }
  c.EncodeGroup(x.data(), n, d, {}, codes.data(), stride, params.data());
  for (int i = 0; i < n; ++i) {
    c.DecodeInGroup(&codes[i * stride], params.data(), d, {}, y.data());
    for (int ch = 0; ch < d; ++ch) {
      float lo = INFINITY, hi = -INFINITY;
      for (int r = 0; r < n; ++r) {
        lo = std::fmin(lo, x[r * d + ch]);
        hi = std::fmax(hi, x[r * d + ch]);
      }
      ASSERT_LE(std::fabs(x[i * d + ch] - y[ch]), Tolerance(lo, hi)) << i << " " << ch;
    }
  }
  // Bytes past each row's d/4 codes are untouched (the cache packs witnesses there).
  for (int i = 0; i < n; ++i) EXPECT_EQ(codes[i * stride + d / 4], 0xAB);
}

KvCacheOptions KiviOptions(int32_t d = 64) {
  KvCacheOptions o = testing::ProbeOptions("kivi2", "kivi2", d, 0, 64);
  o.num_blocks = 6;
  return o;
}

std::vector<float> Token(std::mt19937& rng, int n) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& e : x) e = g(rng);
  return x;
}

TEST(Kivi2Cache, ExactUntilGroupFillsThenEncodedWithWitness) {
  const KvCacheOptions o = KiviOptions();
  auto cache = std::move(KvCache::Create(o)).value();
  const int d = o.head_dim, hd = o.num_kv_heads * d, nb = o.num_bands;
  ASSERT_TRUE(cache->AddSequence(1).ok());
  ASSERT_TRUE(cache->Reserve(1, 40).ok());
  std::mt19937 rng(5);
  std::vector<std::vector<float>> ks, vs;  // [t][Hkv·d]
  auto write = [&](int64_t t) {
    ks.push_back(Token(rng, hd));
    vs.push_back(Token(rng, hd));
    ASSERT_TRUE(cache->Write(1, 0, t, ks.back().data(), vs.back().data()).ok());
  };
  auto check_exact = [&](const GatheredHead& head, int h, int64_t t) {
    EXPECT_EQ(head.token_exact[t], 1) << t;
    for (int j = 0; j < d; ++j) {
      ASSERT_EQ(head.k[t * d + j], ks[t][h * d + j]);
      ASSERT_EQ(head.v[t * d + j], vs[t][h * d + j]);
    }
    for (int b = 0; b < nb; ++b) EXPECT_EQ(head.k_witness[t * nb + b], 0.0f);
    EXPECT_EQ(head.v_rho[t], 0.0f);
    EXPECT_EQ(head.v_bound[t], 0.0f);
  };
  for (int64_t t = 0; t < 10; ++t) write(t);
  EXPECT_EQ(cache->stats().groups_encoded, 0);
  std::mt19937 qrng(6);
  for (int h = 0; h < o.num_kv_heads; ++h) {
    GatheredHead head;
    ASSERT_TRUE(cache->GatherHead(1, 0, h, 10, &head).ok());
    for (int64_t t = 0; t < 10; ++t) check_exact(head, h, t);
    // Every token exact: ε = 0, the certificate is exactly 0.
    std::vector<float> q = Token(qrng, d), out(d);
    MeteredAttentionResult res;
    MeteredAttention(MeteredInputs(o, head), q.data(), {}, out.data(), &res);
    EXPECT_EQ(res.bound.tv, 0.0f);
    EXPECT_EQ(res.bound.v_bound, 0.0f);
  }
  for (int64_t t = 10; t < 20; ++t) write(t);  // fills block 0, starts block 1
  EXPECT_EQ(cache->stats().groups_encoded, 1);
  for (int h = 0; h < o.num_kv_heads; ++h) {
    GatheredHead head;
    ASSERT_TRUE(cache->GatherHead(1, 0, h, 20, &head).ok());
    for (int64_t t = 16; t < 20; ++t) check_exact(head, h, t);
    int64_t rows_differ = 0;
    for (int64_t t = 0; t < 16; ++t) {
      EXPECT_EQ(head.token_exact[t], 0) << t;
      for (int side = 0; side < 2; ++side) {
        const std::vector<float>& x = side == 0 ? ks[t] : vs[t];
        const std::vector<float>& got = side == 0 ? head.k : head.v;
        long double r2_all = 0, x2 = 0;
        double wsum = 0;
        for (int b = 0; b < nb; ++b) {  // key witness ≥ true band norm (interleaved bands)
          long double r2 = 0;
          for (int j = b * d / nb; j < (b + 1) * d / nb; ++j) {
            long double r = static_cast<long double>(x[h * d + j]) - got[t * d + j];
            r2 += r * r;
            x2 += static_cast<long double>(got[t * d + j]) * got[t * d + j];
          }
          r2_all += r2;
          if (side == 0) {
            EXPECT_GE(static_cast<long double>(head.k_witness[t * nb + b]), std::sqrt(r2));
            wsum += head.k_witness[t * nb + b];
          }
        }
        if (side == 1) {  // value summary: ρ ≥ ‖x − x̂‖, ν ≥ ‖x̂‖ + ρ
          EXPECT_GE(static_cast<long double>(head.v_rho[t]), std::sqrt(r2_all));
          EXPECT_GE(static_cast<long double>(head.v_bound[t]), std::sqrt(x2) + std::sqrt(r2_all));
          wsum = head.v_rho[t];
        }
        EXPECT_GT(wsum, 0.0) << "2-bit codes of Gaussian data are never exact";
        for (int j = 0; j < d; ++j) rows_differ += got[t * d + j] != x[h * d + j];
      }
    }
    EXPECT_GT(rows_differ, 16 * d);  // quantized, not the staged copy
  }
}

TEST(Kivi2Cache, RewriteOfEncodedGroupReencodesFromExactCopy) {
  const KvCacheOptions o = KiviOptions();
  auto cache = std::move(KvCache::Create(o)).value();
  const int d = o.head_dim, hd = o.num_kv_heads * d;
  ASSERT_TRUE(cache->AddSequence(1).ok());
  ASSERT_TRUE(cache->Reserve(1, 16).ok());
  std::mt19937 rng(8);
  for (int64_t t = 0; t < 16; ++t) {
    auto k = Token(rng, hd), v = Token(rng, hd);
    ASSERT_TRUE(cache->Write(1, 0, t, k.data(), v.data()).ok());
  }
  std::vector<float> k(hd, 7.0f), v(hd, -3.0f);  // far outside the group's range
  ASSERT_TRUE(cache->Write(1, 0, 3, k.data(), v.data()).ok());
  EXPECT_EQ(cache->stats().groups_encoded, 2);
  GatheredHead head;
  ASSERT_TRUE(cache->GatherHead(1, 0, 1, 16, &head).ok());
  // 7 is every channel's group max, so it gets code 3: x̂ = z + 3·s with s rounded up by
  // ≤ 2^-10 relative, error ≤ 3·2^-10·s ≈ 0.01 (s ≈ 3); 0.02 allows that. The old token 3 is
  // gone (re-encoded from the exact copy); V per-token is constant: exact.
  for (int j = 0; j < d; ++j) {
    EXPECT_NEAR(head.k[3 * d + j], 7.0f, 0.02f);
    EXPECT_EQ(head.v[3 * d + j], -3.0f);
  }
  std::vector<float> ek(16 * d), ev(16 * d);
  ASSERT_TRUE(cache->GatherExactHead(1, 0, 1, 16, ek.data(), ev.data()).ok());
  EXPECT_EQ(ek[3 * d], 7.0f);
}

TEST(Kivi2Cache, PromotedEncodedBlocksStayExactBesideTheStagedTail) {
  // Blocks 0 and 1 encoded, block 2 staged (5 tokens). Promoting 0 and 1 makes every row
  // exact and the certificate 0; a later write into block 2 does not demote them.
  const KvCacheOptions o = KiviOptions();
  auto cache = testing::FilledCache(o, Pattern::kOutliers, 37, 12);
  ASSERT_NE(cache, nullptr);
  ASSERT_TRUE(cache->Reserve(1, 38).ok());
  const int d = o.head_dim;
  GatheredHead head;
  ASSERT_TRUE(cache->GatherHead(1, 0, 1, 37, &head).ok());
  for (int64_t lb : {0, 1}) ASSERT_TRUE(*cache->PromoteBlock(1, 0, 1, lb, &head));
  std::vector<float> ek(38 * d), ev(38 * d);
  ASSERT_TRUE(cache->GatherExactHead(1, 0, 1, 37, ek.data(), ev.data()).ok());
  auto all_exact = [&](const GatheredHead& g, int64_t s) {
    for (int64_t t = 0; t < s; ++t) {
      ASSERT_EQ(g.token_exact[t], 1) << t;
      for (int j = 0; j < d; ++j) ASSERT_EQ(g.k[t * d + j], ek[t * d + j]) << t;
    }
    std::vector<float> q(d, 0.3f), out(d);
    MeteredAttentionResult res;
    MeteredAttention(MeteredInputs(o, g), q.data(), {}, out.data(), &res);
    EXPECT_EQ(res.bound.tv, 0.0f);
  };
  all_exact(head, 37);
  std::vector<float> k(2 * d, 0.5f), v(2 * d, -0.5f);
  ASSERT_TRUE(cache->Write(1, 0, 37, k.data(), v.data()).ok());
  ASSERT_TRUE(cache->GatherExactHead(1, 0, 1, 38, ek.data(), ev.data()).ok());
  GatheredHead again;
  ASSERT_TRUE(cache->GatherHead(1, 0, 1, 38, &again).ok());
  all_exact(again, 38);
  EXPECT_GE(cache->stats().exact_cache_hits, 2);
}

TEST(Kivi2Cache, CapacityAccountingExact) {
  for (int d : {64, 128}) {
    KvCacheOptions o = KiviOptions(d);
    o.num_layers = 3;
    auto cap = KvCache::CapacityFor(o);
    ASSERT_TRUE(cap.ok());
    const int bs = 16, nb = o.num_bands;
    // Independent arithmetic: K = 2-bit codes + band witness (B codes + a bf16 unit), plus
    // fp16 zero+scale per channel per block; V = 2-bit codes + fp16 zero+scale per token +
    // value summary (two bf16).
    const int k_token = d / 4 + nb + 2, v_token = d / 4 + 4 + 4, k_block = 4 * d;
    EXPECT_EQ(cap->k_code_bytes + cap->k_witness_bytes, k_token);
    EXPECT_EQ(cap->v_code_bytes + cap->v_witness_bytes, v_token);
    EXPECT_EQ(cap->k_group_param_bytes, k_block);
    EXPECT_EQ(cap->v_group_param_bytes, 0);
    EXPECT_EQ(cap->k_outlier_bytes + cap->v_outlier_bytes, 0);
    const double per_head = k_token + v_token + static_cast<double>(k_block) / bs;
    EXPECT_DOUBLE_EQ(cap->bytes_per_token_per_kv_head, per_head);
    EXPECT_EQ(cap->bytes_per_block, 3 * 2 * ((k_token + v_token) * bs + k_block));
    EXPECT_EQ(cap->staging_bytes_per_block, 2 * bs * 2 * d * 4);
    auto cache = std::move(KvCache::Create(o)).value();
    EXPECT_EQ(cache->BytesPerBlock(), cap->bytes_per_block);
    EXPECT_EQ(cache->BytesPerToken() * bs, cap->bytes_per_block);  // 4d/16 divides here
    // Against plain fp16 K+V (2·2·d bytes per token per KV head, no witness).
    const double ratio = 4.0 * d / per_head;
    std::printf("kivi2 d=%d: %.2f B/token/KV head (K %d + V %d + params %d/%d), "
                "tokens per GiB vs fp16 %.2fx\n",
                d, per_head, k_token, v_token, k_block, bs, ratio);
    EXPECT_GT(ratio, 3.0);
  }
  // A block size that does not divide the group parameters: exact per block, rounded up
  // per token.
  KvCacheOptions o = KiviOptions(64);
  o.block_size = 12;
  auto cache = std::move(KvCache::Create(o)).value();
  // K 16 codes + 10 witness, V 16 codes + 4 zero/scale + 4 summary; 256 B of key parameters.
  const int64_t block = 2 * ((16 + 10 + 20 + 4) * 12 + 256);
  EXPECT_EQ(cache->BytesPerBlock(), block);
  EXPECT_EQ(cache->BytesPerToken(), (block + 11) / 12);
  EXPECT_DOUBLE_EQ(cache->Capacity().bytes_per_token_per_kv_head, 50 + 256.0 / 12);
}

TEST(Kivi2Cache, SoundOnAdversarialInputsZeroViolations) {
  // Tier A: the long double true TV and output error never exceed the bounds, whether the
  // tail block is still exact or not (S not a multiple of 16), with and without bypass.
  const Pattern patterns[] = {Pattern::kNormal, Pattern::kOutliers, Pattern::kHuge,
                              Pattern::kNearSaturated, Pattern::kShifted};
  uint64_t seed = 500;
  CellSweep sweep;
  for (int m : {0, 3}) {
    for (Pattern p : patterns) {
      for (int64_t s : {5, 16, 37, 300}) {
        auto o = testing::ProbeOptions("kivi2", "kivi2", 64, m, s);
        auto cache = testing::FilledCache(o, p, s, ++seed);
        ASSERT_NE(cache, nullptr);
        testing::SweepCells(*cache, s, 8, seed, &sweep);
      }
    }
  }
  EXPECT_EQ(sweep.violations, 0);
  EXPECT_GT(sweep.max_ratio, 1e-3);  // informative somewhere, not vacuous everywhere
}

TEST(Kivi2Cache, MixedWithPerTokenSchemesAndPoolBackToFull) {
  const std::pair<const char*, const char*> pairs[] = {{"kivi2", "int8-rtn"},
                                                       {"int4-rtn", "kivi2"},
                                                       {"kivi2", "fp32"}};
  for (auto [ks, vs] : pairs) {
    KvCacheOptions o = testing::ProbeOptions(ks, vs, 64, 0, 64);
    o.num_blocks = 8;
    auto cache = std::move(KvCache::Create(o)).value();
    std::mt19937 rng(9);
    for (int round = 0; round < 3; ++round) {  // reuse the same physical blocks
      for (SeqId seq : {1, 2}) {
        ASSERT_TRUE(cache->AddSequence(seq).ok());
        ASSERT_TRUE(cache->Reserve(seq, 29 + seq).ok());
        for (int64_t t = 0; t < 29 + seq; ++t) {
          auto k = Token(rng, 2 * 64), v = Token(rng, 2 * 64);
          ASSERT_TRUE(cache->Write(seq, 0, t, k.data(), v.data()).ok());
        }
        GatheredHead head;
        ASSERT_TRUE(cache->GatherHead(seq, 0, 1, 29 + seq, &head).ok());
        const bool staged = std::string(ks) == "kivi2";  // only group-encoded K stages
        for (int64_t t = 0; t < 29 + seq; ++t) {
          EXPECT_EQ(head.token_exact[t], staged && t >= 16) << ks << " " << t;
        }
      }
      EXPECT_EQ(cache->num_free_blocks(), 4);
      cache->FreeSequence(1);
      cache->FreeSequence(2);
      EXPECT_EQ(cache->num_free_blocks(), cache->num_total_blocks()) << ks << "/" << vs;
    }
    CellSweep sweep;
    auto filled = testing::FilledCache(o, Pattern::kOutliers, 100, 21);
    testing::SweepCells(*filled, 100, 8, 21, &sweep);
    EXPECT_EQ(sweep.violations, 0) << ks << "/" << vs;
  }
}

}  // namespace
}  // namespace witcert
