// The GPU write path against the CPU codecs: codes, scales and witnesses must be
// bit-identical (no tolerance: both sides perform the same IEEE operations in the same order),
// for every scheme, head dims 64/128, both RoPE pairings, block sizes 16/32, shuffled slots,
// and hostile values (zeros, huge norms, fp16/fp8 overflow, outlier channels, denormals);
// kivi2's keys also whole blocks at a time (EncodeKeyGroupsCuda), one of them constant.
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/kv/codec.h"
#include "engine/kv/outlier_channels.h"
#include "engine/kv/witness.h"
#include "gtest/gtest.h"
#include "kernels/cuda/paged_kv_cuda.h"
#include "kernels/meter/partial_sum.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace witcert {
namespace {

using testing::DeviceBuffer;
using testing::DeviceOutlierTables;
using testing::HostPool;

// The CPU cache's encode of one row with the outlier bypass (kv_cache.cc's EncodeRows): the
// filled row is what the codec sees; the exact values go back into x̂ before the witness.
void PutBackOutliers(const OutlierChannels* oc, int32_t h, bool is_value, const float* x, float* xhat) {
  if (oc == nullptr) return;
  const int32_t* ch = oc->channels(0, h, is_value);
  for (int32_t j = 0; j < oc->count(); ++j) xhat[ch[j]] = x[ch[j]];
}
int CompareOutliers(const OutlierChannels* oc, const HostPool& hp, int64_t vec, int32_t h, bool is_value,
                    const float* x) {
  if (oc == nullptr) return 0;
  const int32_t* ch = oc->channels(0, h, is_value);
  int bad = 0;
  for (int32_t j = 0; j < oc->count(); ++j) {
    if (std::memcmp(&hp.Outliers(vec, is_value)[j], &x[ch[j]], 4) != 0) ++bad;
  }
  return bad;
}

struct WriteCase {
  KvScheme scheme;
  int32_t d, bs;
  bool interleaved;
  int32_t outliers = 0;  // m: outlier channel bypass
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

// The key bytes EncodeKeyGroupsCuda writes for the blocks in `blocks`.
std::vector<uint8_t> KeyBytesOf(const HostPool& hp, const std::vector<int32_t>& blocks) {
  const PagedKvLayout& L = hp.layout;
  std::vector<uint8_t> out;
  for (int32_t b : blocks) {
    if (b < 0) continue;
    for (int32_t h = 0; h < L.num_kv_heads; ++h) {
      const int64_t unit = int64_t{b} * L.num_kv_heads + h;
      const std::vector<uint8_t> params = hp.CpuGroupParams(unit);
      out.insert(out.end(), params.begin(), params.end());
      for (int32_t i = 0; i < L.block_size; ++i) {
        const int64_t vec = unit * L.block_size + i;
        for (const std::vector<uint8_t>& part : {hp.CpuSlot(vec, false), hp.WitnessBytes(vec, false)}) {
          out.insert(out.end(), part.begin(), part.end());
        }
      }
    }
  }
  return out;
}

// `args` encoded into a fresh pool (zeroed by Init), read back.
HostPool EncodeIntoFreshPool(const PagedKvLayout& L, const KeyGroupArgs& args) {
  PagedKvPoolCuda pool;
  EXPECT_TRUE(pool.Init(L, 1).ok);
  const CudaStatus st = EncodeKeyGroupsCuda(L, pool.layer(0), args, nullptr);
  EXPECT_TRUE(st.ok) << st.message;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return HostPool::Download(L, pool.layer(0));
}

// The same groups from the other two sources the CUDA backend uses — rows of a step's keys
// picked by first_rows (listed backwards, with skipped −1 groups between), and the K rows of
// exact-table slots (a staged block) — must write the very bytes of the group-major encode
// `reference` holds, and the exact-table encode clears exactly the entries it encoded.
void CheckKeyGroupSources(const PagedKvLayout& L, const HostPool& reference, const std::vector<float>& k,
                          const std::vector<int32_t>& blocks, const DeviceOutlierTables& tables, std::mt19937& rng) {
  const int32_t hkv = L.num_kv_heads, d = L.head_dim, bs = L.block_size;
  const int32_t groups = static_cast<int32_t>(blocks.size());
  const std::vector<uint8_t> want = KeyBytesOf(reference, blocks);
  {  // first_rows, backwards, with padding
    std::vector<int32_t> list_blocks, first_rows;
    for (int32_t g = groups - 1; g >= 0; --g) {
      list_blocks.push_back(blocks[g]);
      first_rows.push_back(g * bs);
      list_blocks.push_back(-1);
      first_rows.push_back(0);
    }
    DeviceBuffer<float> dk;
    DeviceBuffer<int32_t> db, dr;
    dk.Upload(k);
    db.Upload(list_blocks);
    dr.Upload(first_rows);
    const HostPool got = EncodeIntoFreshPool(
        L, KeyGroupArgs{.k = dk.get(), .first_rows = dr.get(), .blocks = db.get(),
                        .num_groups = static_cast<int32_t>(list_blocks.size()), .outliers = tables.view()});
    EXPECT_TRUE(KeyBytesOf(got, blocks) == want) << "first_rows source";
  }
  {  // exact table: layer 1 of 2, slots shuffled, one extra unstaged group listed (skipped)
    constexpr int32_t kLayers = 2, kLayer = 1;
    const int32_t units = groups * hkv;
    std::vector<int32_t> slot_of(units);
    std::iota(slot_of.begin(), slot_of.end(), 0);
    std::shuffle(slot_of.begin(), slot_of.end(), rng);
    std::vector<float> exact_kv(static_cast<size_t>(units) * 2 * bs * d, NAN);  // V rows unused here
    std::vector<int32_t> table(static_cast<size_t>(L.num_blocks) * kLayers * hkv, -1);
    for (int32_t g = 0; g < groups; ++g) {
      for (int32_t h = 0; h < hkv; ++h) {
        const int32_t slot = slot_of[g * hkv + h];
        table[(int64_t{blocks[g]} * kLayers + kLayer) * hkv + h] = slot;
        table[(int64_t{blocks[g]} * kLayers + 0) * hkv + h] = 1000 + slot;  // another layer's: kept
        for (int32_t i = 0; i < bs; ++i) {
          std::copy_n(&k[((int64_t{g} * bs + i) * hkv + h) * d], d, &exact_kv[(int64_t{slot} * 2 * bs + i) * d]);
        }
      }
    }
    std::vector<int32_t> list_blocks = blocks;
    int32_t unstaged = 0;  // the pool's one block not among `blocks` (see the caller)
    while (std::find(blocks.begin(), blocks.end(), unstaged) != blocks.end()) ++unstaged;
    ASSERT_LT(unstaged, L.num_blocks);
    list_blocks.push_back(unstaged);
    DeviceBuffer<float> dkv;
    DeviceBuffer<int32_t> db, dt;
    dkv.Upload(exact_kv);
    db.Upload(list_blocks);
    dt.Upload(table);
    const HostPool got = EncodeIntoFreshPool(
        L, KeyGroupArgs{.exact_slot = dt.get(), .exact_kv = dkv.get(), .layer = kLayer, .num_layers = kLayers,
                        .blocks = db.get(), .num_groups = static_cast<int32_t>(list_blocks.size()),
                        .outliers = tables.view()});
    EXPECT_TRUE(KeyBytesOf(got, blocks) == want) << "exact-table source";
    // The unstaged block's units were skipped: still the zero-initialized pool (Init zeroes it).
    const std::vector<uint8_t> skipped = KeyBytesOf(got, {unstaged});
    EXPECT_TRUE(std::all_of(skipped.begin(), skipped.end(), [](uint8_t b) { return b == 0; }));
    const std::vector<int32_t> after = dt.Download();
    for (size_t i = 0; i < table.size(); ++i) {
      const int32_t layer = static_cast<int32_t>(i / hkv % kLayers);
      EXPECT_EQ(after[i], layer == kLayer ? -1 : table[i]) << "table entry " << i;
    }
  }
}

// Group-encoded keys (kivi2): whole blocks of hostile rows into shuffled blocks; codes, group
// parameters and witnesses against the CPU codec's EncodeGroup, DecodeInGroup and witness.
void CheckKeyGroups(const PagedKvLayout& L, PagedKvPoolCuda& pool, const KvCodec& codec,
                    const BandLayout& bands, std::mt19937& rng, const OutlierChannels* oc,
                    const DeviceOutlierTables& tables) {
  const int32_t hkv = L.num_kv_heads, d = L.head_dim, bs = L.block_size;
  const int32_t groups = static_cast<int32_t>(L.num_blocks) - 1;
  std::vector<float> k = HostileVectors(rng, int64_t{groups} * bs, hkv, d);
  for (int64_t i = 0; i < int64_t{bs} * hkv * d; ++i) k[i] = 5.0f;  // group 0: one constant
  std::vector<int32_t> blocks(L.num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  blocks.resize(groups);
  DeviceBuffer<float> dk;
  DeviceBuffer<int32_t> db;
  dk.Upload(k);
  db.Upload(blocks);
  ASSERT_CUDA_OK(EncodeKeyGroupsCuda(L, pool.layer(0), KeyGroupArgs{.k = dk.get(), .blocks = db.get(), .num_groups = groups, .outliers = tables.view()},
                                     nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  HostPool hp = HostPool::Download(L, pool.layer(0));
  const int32_t cb = codec.BytesPerVector(d);
  std::vector<uint8_t> codes(static_cast<size_t>(bs) * cb), params(codec.GroupParamBytes(d, bs));
  std::vector<float> rows(static_cast<size_t>(bs) * d), filled(rows.size()), xhat(d);
  int mismatches = 0;
  for (int32_t g = 0; g < groups; ++g) {
    for (int32_t h = 0; h < hkv; ++h) {
      for (int32_t i = 0; i < bs; ++i) {
        std::copy_n(&k[((int64_t{g} * bs + i) * hkv + h) * d], d, &rows[int64_t{i} * d]);
        if (oc != nullptr) {
          oc->Fill(0, h, false, &rows[int64_t{i} * d], &filled[int64_t{i} * d]);
        } else {
          std::copy_n(&rows[int64_t{i} * d], d, &filled[int64_t{i} * d]);
        }
      }
      codec.EncodeGroup(filled.data(), bs, d, CodecContext{}, codes.data(), cb, params.data());
      const int64_t unit = int64_t{blocks[g]} * hkv + h;
      if (hp.CpuGroupParams(unit) != params && ++mismatches < 5) {
        ADD_FAILURE() << "group parameters differ: group " << g << " head " << h;
      }
      for (int32_t i = 0; i < bs; ++i) {
        const int64_t vec = unit * bs + i;
        const std::vector<uint8_t> want(codes.begin() + int64_t{i} * cb, codes.begin() + int64_t{i + 1} * cb);
        if (hp.CpuSlot(vec, false) != want && ++mismatches < 5) {
          ADD_FAILURE() << "key codes differ: group " << g << " head " << h << " token " << i;
        }
        codec.DecodeInGroup(want.data(), params.data(), d, CodecContext{}, xhat.data());
        PutBackOutliers(oc, h, false, &rows[int64_t{i} * d], xhat.data());
        if (CompareOutliers(oc, hp, vec, h, false, &rows[int64_t{i} * d]) > 0 && ++mismatches < 5) {
          ADD_FAILURE() << "key outlier values differ: group " << g << " head " << h << " token " << i;
        }
        std::vector<uint8_t> w(bands.key_witness_bytes());
        ComputeKeyWitness(&rows[int64_t{i} * d], xhat.data(), bands, w.data());
        if (hp.WitnessBytes(vec, false) != w && ++mismatches < 5) {
          ADD_FAILURE() << "key witness differs: group " << g << " head " << h << " token " << i;
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  CheckKeyGroupSources(L, hp, k, blocks, tables, rng);
}

void RunWriteCase(const WriteCase& wc) {
  SCOPED_TRACE(std::string(SchemeInfo(wc.scheme).name) + " d=" + std::to_string(wc.d) +
               " bs=" + std::to_string(wc.bs) + (wc.interleaved ? " interleaved" : " half-split") +
               " outliers=" + std::to_string(wc.outliers));
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
  L.outlier_channels = wc.outliers;
  PagedKvPoolCuda pool;
  ASSERT_CUDA_OK(pool.Init(L, 1));
  std::mt19937 rng(1234 + wc.d + wc.bs + static_cast<int>(wc.scheme) + wc.outliers);
  std::vector<float> k = HostileVectors(rng, n, hkv, wc.d), v = HostileVectors(rng, n, hkv, wc.d);
  // Outlier channels chosen by the CPU's rule from the first block's rows (exact schemes: none).
  std::unique_ptr<OutlierChannels> oc;
  DeviceOutlierTables tables;
  if (L.outliers() > 0) {
    oc = std::make_unique<OutlierChannels>(1, hkv, wc.d, L.outliers());
    oc->ChooseOnce(0, k.data(), v.data(), wc.bs);
    tables.Upload(*oc, hkv, wc.d);
  }
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
  a.outliers = tables.view();
  ASSERT_CUDA_OK(WriteKvCuda(L, pool.layer(0), a, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  HostPool hp = HostPool::Download(L, pool.layer(0));

  auto codec_or = FindKvCodec(SchemeInfo(wc.scheme).name);
  ASSERT_TRUE(codec_or.ok()) << codec_or.status();
  const KvCodec& key_codec = **codec_or;
  const KvCodec& value_codec = *key_codec.ForValues();
  ASSERT_EQ(key_codec.group_encoded(), L.group_keys());
  ASSERT_EQ(key_codec.BytesPerVector(wc.d), L.code_bytes() + 2 * L.scales_per_vector(false));
  ASSERT_EQ(value_codec.BytesPerVector(wc.d), L.code_bytes() + 2 * L.scales_per_vector(true));
  BandLayout bands{wc.d, nb, wc.interleaved ? RopePairing::kInterleaved : RopePairing::kHalfSplit};
  std::vector<uint8_t> want(value_codec.BytesPerVector(wc.d));
  std::vector<float> xhat(wc.d);
  int mismatches = 0;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t blk = slots[t] / wc.bs, off = slots[t] % wc.bs;
    for (int32_t h = 0; h < hkv; ++h) {
      const int64_t vec = (blk * hkv + h) * wc.bs + off;
      for (int side = 0; side < 2; ++side) {
        if (side == 0 && L.group_keys()) continue;  // keys: whole blocks, checked below
        const KvCodec& codec = side == 0 ? key_codec : value_codec;
        const float* x = (side ? v.data() : k.data()) + (t * hkv + h) * wc.d;
        CodecContext ctx{seed, layer, h, pos[t], side == 1};
        std::vector<float> filled(x, x + wc.d);
        if (oc != nullptr) oc->Fill(0, h, side == 1, x, filled.data());
        codec.Encode(filled.data(), wc.d, ctx, want.data());
        std::vector<uint8_t> got = hp.CpuSlot(vec, side == 1);
        if (got != want && ++mismatches < 5) {
          ADD_FAILURE() << "codes/scales differ: token " << t << " head " << h << " side " << side;
        }
        if (!L.has_witness()) continue;
        codec.Decode(want.data(), wc.d, ctx, xhat.data());
        PutBackOutliers(oc.get(), h, side == 1, x, xhat.data());
        if (CompareOutliers(oc.get(), hp, vec, h, side == 1, x) > 0 && ++mismatches < 5) {
          ADD_FAILURE() << "outlier values differ: token " << t << " head " << h << " side " << side;
        }
        std::vector<uint8_t> w(side == 1 ? BandLayout::value_summary_bytes() : bands.key_witness_bytes());
        if (side == 1) {
          ComputeValueSummary(x, xhat.data(), bands, w.data());
        } else {
          ComputeKeyWitness(x, xhat.data(), bands, w.data());
        }
        const std::vector<uint8_t> gw = hp.WitnessBytes(vec, side == 1);
        if (gw != w && ++mismatches < 5) {
          ADD_FAILURE() << "witness differs: token " << t << " head " << h << " side " << side << " first bytes gpu "
                        << int{gw[0]} << "," << int{gw[1]} << " cpu " << int{w[0]} << "," << int{w[1]};
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  if (L.group_keys()) CheckKeyGroups(L, pool, key_codec, bands, rng, oc.get(), tables);
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
        for (uint32_t c = 0; c < 128; c += 5) {
          for (bool isv : {false, true}) {
            EXPECT_EQ(meter::DitherFromTokenHash(th, c, isv), meter::DitherValue(seed, layer, 3, pos, c, isv));
          }
        }
      }
    }
  }
}

// Outlier channel bypass: every scheme, both head dims, both pairings, m = 1 and 5.
TEST(WritePathCuda, OutlierBypassBitIdenticalToCpu) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (int s = 0; s < static_cast<int>(KvScheme::kCount); ++s) {
    for (int d : {64, 128}) {
      RunWriteCase({static_cast<KvScheme>(s), d, 16, d == 64, d == 64 ? 1 : 5});
    }
  }
}

TEST(WritePathCuda, KeyGroupsOnlyForGroupedSchemes) {
  WITCERT_SKIP_WITHOUT_GPU();
  PagedKvLayout L;
  L.num_blocks = 2;
  L.num_kv_heads = 1;
  L.head_dim = 64;
  L.scheme = KvScheme::kInt8Rtn;
  PagedKvPoolCuda pool;
  ASSERT_CUDA_OK(pool.Init(L, 1));
  DeviceBuffer<float> k(16 * 64);
  DeviceBuffer<int32_t> b(1);
  const CudaStatus st = EncodeKeyGroupsCuda(L, pool.layer(0), KeyGroupArgs{.k = k.get(), .blocks = b.get(), .num_groups = 1, .outliers = {}}, nullptr);
  EXPECT_FALSE(st.ok);
  EXPECT_NE(st.message.find("does not group keys"), std::string::npos) << st.message;
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
