// The gate's repair kernels (kernels/cuda/gate_repair_cuda.h) against host references: the
// block-risk ranking against the CPU gate's token risk (kernels/cpu/metered_attention), the
// write-through / page-in / cached-row round trip through mapped pinned memory, the device
// check against the CPU gate's Certified(), and the row gather / scatter.
//
// Risk tolerance: both sides compute p̂_t·(e^{ε̂_t} − 1) from the same stored keys and witnesses;
// they differ by fp32 summation order in the logits (≤ (d+4)u·Λ relative in each weight) and by
// the common factor 1/z, so the per-block risks normalized to sum 1 agree to 1e-3 relative.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "engine/kv/codec.h"
#include "gtest/gtest.h"
#include "kernels/cpu/metered_attention.h"
#include "kernels/cuda/gate_repair_cuda.h"
#include "kernels/meter/float_formats.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace witcert {
namespace {

using testing::DeviceBuffer;
using testing::HostPool;

constexpr int32_t kLayer = 2, kLayers = 3;
constexpr uint64_t kSeed = 0xABCDEFULL;

struct RiskCase {
  KvScheme scheme = KvScheme::kInt8Rtn;
  int32_t d = 128, group = 4, hkv = 2, bs = 16;
  int64_t ctx = 300;
  int32_t exact_every = 4;  // units with (j + h) % k == 0 are cached exact
};

void RunRiskCase(const RiskCase& c) {
  SCOPED_TRACE(std::string(SchemeInfo(c.scheme).name) + " d=" + std::to_string(c.d));
  std::mt19937 rng(c.d * 31 + static_cast<int>(c.scheme));
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int32_t hq = c.hkv * c.group, nblk = static_cast<int32_t>((c.ctx + c.bs - 1) / c.bs);
  PagedKvLayout L;
  L.num_blocks = nblk + 3;
  L.num_kv_heads = c.hkv;
  L.block_size = c.bs;
  L.head_dim = c.d;
  L.scheme = c.scheme;
  std::vector<int32_t> table(nblk);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<float> k(c.ctx * c.hkv * c.d), v(k.size()), q(hq * c.d);
  for (auto& x : k) x = g(rng) * 1.5f;
  for (auto& x : v) x = g(rng);
  for (auto& x : q) x = g(rng);
  PagedKvPoolCuda pool;
  ASSERT_CUDA_OK(pool.Init(L, 1));
  std::vector<int64_t> slots(c.ctx), pos(c.ctx);
  for (int64_t t = 0; t < c.ctx; ++t) {
    slots[t] = int64_t{table[t / c.bs]} * c.bs + t % c.bs;
    pos[t] = t;
  }
  DeviceBuffer<float> dk, dv, dq;
  DeviceBuffer<int64_t> ds, dp;
  dk.Upload(k);
  dv.Upload(v);
  dq.Upload(q);
  ds.Upload(slots);
  dp.Upload(pos);
  KvWriteArgs w{dk.get(), dv.get(), ds.get(), dp.get(), c.ctx, kLayer, kSeed, {}};
  ASSERT_CUDA_OK(WriteKvCuda(L, pool.layer(0), w, nullptr));
  // Exact units: only the table matters to the ranking (their risk must be 0).
  std::vector<int32_t> exact_slot(L.num_blocks * kLayers * c.hkv, -1);
  for (int32_t j = 0; j < nblk; ++j) {
    for (int32_t h = 0; h < c.hkv; ++h) {
      if ((j + h) % c.exact_every == 0) exact_slot[(int64_t{table[j]} * kLayers + kLayer) * c.hkv + h] = 0;
    }
  }
  std::vector<int32_t> cells(hq);
  std::iota(cells.begin(), cells.end(), 0);  // row 0, every head
  DeviceBuffer<int32_t> dt, dl, dc, dslot;
  DeviceBuffer<float> drisk(hq * nblk);
  dt.Upload(table);
  dl.Upload(std::vector<int32_t>{static_cast<int32_t>(c.ctx)});
  dc.Upload(cells);
  dslot.Upload(exact_slot);
  BlockRiskArgs a;
  a.q = dq.get();
  a.block_tables = dt.get();
  a.context_lens = dl.get();
  a.cells = dc.get();
  a.num_cells = hq;
  a.num_q_heads = hq;
  a.max_blocks = nblk;
  a.layer = kLayer;
  a.dither_seed = kSeed;
  a.exact_slot = dslot.get();
  a.num_layers = kLayers;
  a.risk = drisk.get();
  ASSERT_CUDA_OK(BlockRiskCuda(L, pool.layer(0), a, nullptr));
  ASSERT_CUDART(cudaDeviceSynchronize());
  const std::vector<float> gpu = drisk.Download();

  HostPool hp = HostPool::Download(L, pool.layer(0));
  auto codec_or = FindKvCodec(SchemeInfo(c.scheme).name);
  ASSERT_TRUE(codec_or.ok());
  const KvCodec& codec = **codec_or;
  const int32_t d = c.d, nb = L.num_bands;
  for (int32_t h = 0; h < c.hkv; ++h) {
    std::vector<float> ks(c.ctx * d), vs(c.ctx * d), kw(c.ctx * nb), vrho(c.ctx), vbound(c.ctx);
    std::vector<uint8_t> exact(c.ctx);
    for (int64_t t = 0; t < c.ctx; ++t) {
      const int64_t vec = (int64_t{table[t / c.bs]} * c.hkv + h) * c.bs + t % c.bs;
      codec.Decode(hp.CpuSlot(vec, false).data(), d, CodecContext{kSeed, kLayer, h, t, false}, &ks[t * d]);
      codec.Decode(hp.CpuSlot(vec, true).data(), d, CodecContext{kSeed, kLayer, h, t, true}, &vs[t * d]);
      hp.KeyBounds(vec, &kw[t * nb]);
      hp.ValueSummary(vec, &vrho[t], &vbound[t]);
      exact[t] = (t / c.bs + h) % c.exact_every == 0;
    }
    MeteredHeadInputs in;
    in.head_dim = d;
    in.num_bands = nb;
    in.interleaved = true;
    in.num_tokens = c.ctx;
    in.k = ks.data();
    in.v = vs.data();
    in.k_witness = kw.data();
    in.v_rho = vrho.data();
    in.v_bound = vbound.data();
    in.token_exact = exact.data();
    for (int32_t j = 0; j < c.group; ++j) {
      const int32_t head = h * c.group + j;
      std::vector<float> out(d), token_risk(c.ctx);
      MeteredAttentionResult res;
      MeteredAttention(in, &q[head * d], MeteredAttentionOptions{}, out.data(), &res, token_risk.data());
      std::vector<double> cpu(nblk, 0.0);
      for (int64_t t = 0; t < c.ctx; ++t) cpu[t / c.bs] += token_risk[t];
      double cs = 0, gs = 0;
      for (int32_t b = 0; b < nblk; ++b) {
        cs += cpu[b];
        gs += gpu[head * nblk + b];
      }
      ASSERT_GT(cs, 0.0);
      ASSERT_GT(gs, 0.0);
      for (int32_t b = 0; b < nblk; ++b) {
        const double gn = gpu[head * nblk + b] / gs, cn = cpu[b] / cs;
        if ((b + h) % c.exact_every == 0) {
          EXPECT_EQ(gpu[head * nblk + b], 0.0f) << "exact block " << b << " head " << head;
        }
        EXPECT_NEAR(gn, cn, 1e-3 * cn + 1e-7) << "block " << b << " head " << head;
      }
    }
  }
}

// Two KV heads, blocks of 16, d = 64.
ExactUnitShape TestShape() {
  ExactUnitShape s;
  s.num_layers = kLayers;
  s.num_kv_heads = 2;
  s.block_size = 16;
  s.head_dim = 64;
  return s;
}

TEST(GateRepairCuda, BlockRiskMatchesCpuTokenRisk) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (KvScheme s : {KvScheme::kInt8Rtn, KvScheme::kInt4Rtn, KvScheme::kFp8Scaled, KvScheme::kInt8Dither,
                     KvScheme::kFp16}) {
    for (int32_t d : {64, 128}) {
      RiskCase c;
      c.scheme = s;
      c.d = d;
      RunRiskCase(c);
    }
  }
  RiskCase g8;
  g8.group = 8;
  g8.hkv = 1;
  g8.bs = 32;
  g8.ctx = 1000;
  RunRiskCase(g8);
}

// Write-through into mapped pinned memory, page-in into cache slots with the table entries,
// then rows appended to a cached unit: every float lands where the layout says.
TEST(GateRepairCuda, WriteThroughPageInAndCachedRows) {
  WITCERT_SKIP_WITHOUT_GPU();
  const ExactUnitShape s = TestShape();
  const int64_t num_blocks = 6, entries = 4, uf = s.unit_floats();
  const int64_t row = int64_t{s.num_kv_heads} * s.head_dim;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-3, 3);
  // 40 rows: blocks 3 and 5 (entries 1 and 0), block 4 has no entry.
  const int64_t n = 40;
  std::vector<int64_t> slots(n);
  std::vector<int32_t> entry(n);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t block = r < 16 ? 3 : (r < 32 ? 5 : 4);
    slots[r] = block * s.block_size + r % 16;
    entry[r] = block == 3 ? 1 : (block == 5 ? 0 : -1);
  }
  std::vector<float> k(n * row), v(n * row);
  for (auto& x : k) x = u(rng);
  for (auto& x : v) x = u(rng);
  float* store = nullptr;
  ASSERT_CUDART(cudaHostAlloc(reinterpret_cast<void**>(&store), entries * s.num_layers * s.num_kv_heads * uf * 4,
                              cudaHostAllocMapped));
  std::fill_n(store, entries * s.num_layers * s.num_kv_heads * uf, -7.0f);
  DeviceBuffer<float> dk, dv;
  DeviceBuffer<int64_t> ds;
  DeviceBuffer<int32_t> de;
  dk.Upload(k);
  dv.Upload(v);
  ds.Upload(slots);
  de.Upload(entry);
  ASSERT_CUDA_OK(WriteThroughExactCuda(s, dk.get(), dv.get(), ds.get(), de.get(), n, kLayer, store, nullptr));
  ASSERT_CUDART(cudaDeviceSynchronize());
  auto unit = [&](int64_t e, int32_t g) { return store + ((e * s.num_layers + kLayer) * s.num_kv_heads + g) * uf; };
  for (int64_t r = 0; r < n; ++r) {
    if (entry[r] < 0) continue;
    for (int32_t g = 0; g < s.num_kv_heads; ++g) {
      for (int32_t c = 0; c < s.head_dim; ++c) {
        ASSERT_EQ(unit(entry[r], g)[(r % 16) * s.head_dim + c], k[r * row + g * s.head_dim + c]);
        ASSERT_EQ(unit(entry[r], g)[(16 + r % 16) * s.head_dim + c], v[r * row + g * s.head_dim + c]);
      }
    }
  }
  EXPECT_EQ(store[0 + ((0 * s.num_layers + 0) * s.num_kv_heads) * uf], -7.0f);  // other layers untouched
  // Page (block 5, head 1) into slot 2 and (block 3, head 0) into slot 0.
  std::vector<int32_t> table(num_blocks * s.num_layers * s.num_kv_heads, -1);
  auto index = [&](int64_t b, int32_t g) { return (b * s.num_layers + kLayer) * s.num_kv_heads + g; };
  std::vector<PageInOp> ops(2);
  ops[0].src_unit = (0 * s.num_layers + kLayer) * s.num_kv_heads + 1;
  ops[0].table_index = index(5, 1);
  ops[0].dst_slot = 2;
  ops[1].src_unit = (1 * s.num_layers + kLayer) * s.num_kv_heads + 0;
  ops[1].table_index = index(3, 0);
  ops[1].dst_slot = 0;
  DeviceBuffer<PageInOp> dops;
  DeviceBuffer<int32_t> dtable;
  DeviceBuffer<float> cache(3 * uf);
  dops.Upload(ops);
  dtable.Upload(table);
  cache.Fill(0);
  ASSERT_CUDA_OK(PageInExactCuda(s, store, dops.get(), 2, cache.get(), dtable.get(), nullptr));
  ASSERT_CUDART(cudaDeviceSynchronize());
  std::vector<float> hc = cache.Download();
  std::vector<int32_t> ht = dtable.Download();
  EXPECT_EQ(ht[index(5, 1)], 2);
  EXPECT_EQ(ht[index(3, 0)], 0);
  EXPECT_EQ(std::count(ht.begin(), ht.end(), -1), static_cast<long>(ht.size()) - 2);
  for (int64_t i = 0; i < uf; ++i) {
    ASSERT_EQ(hc[2 * uf + i], unit(0, 1)[i]);
    ASSERT_EQ(hc[0 * uf + i], unit(1, 0)[i]);
    ASSERT_EQ(hc[1 * uf + i], 0.0f);
  }
  // New rows for block 3 (cached for head 0 only) and block 4 (not cached).
  std::vector<int64_t> new_slots = {3 * 16 + 7, 4 * 16 + 2};
  std::vector<float> nk(2 * row), nv(2 * row);
  for (auto& x : nk) x = u(rng);
  for (auto& x : nv) x = u(rng);
  DeviceBuffer<float> dnk, dnv;
  DeviceBuffer<int64_t> dns;
  dnk.Upload(nk);
  dnv.Upload(nv);
  dns.Upload(new_slots);
  ASSERT_CUDA_OK(UpdateCachedExactRowsCuda(s, dnk.get(), dnv.get(), dns.get(), 2, kLayer, dtable.get(),
                                           cache.get(), nullptr));
  ASSERT_CUDART(cudaDeviceSynchronize());
  std::vector<float> hc2 = cache.Download();
  for (int64_t i = 0; i < uf; ++i) {
    const int64_t r = i / s.head_dim, c = i % s.head_dim;
    float want = hc[i];
    if (r == 7) want = nk[c];              // K row 7 of head 0
    if (r == 16 + 7) want = nv[c];         // V row 7
    ASSERT_EQ(hc2[i], want) << i;
    ASSERT_EQ(hc2[2 * uf + i], hc[2 * uf + i]);  // (block 5, head 1) untouched
  }
  // Table updates: evict (5, 1).
  std::vector<TableUpdate> up(1);
  up[0].index = index(5, 1);
  up[0].value = -1;
  DeviceBuffer<TableUpdate> dup;
  dup.Upload(up);
  ASSERT_CUDA_OK(ApplyTableUpdatesCuda(dup.get(), 1, dtable.get(), nullptr));
  ASSERT_CUDART(cudaDeviceSynchronize());
  EXPECT_EQ(dtable.Download()[index(5, 1)], -1);
  cudaFreeHost(store);
}

// TakeStagedBlocksCuda against the table it reads: each group's rows in token-major order, its
// slots and positions, its entries (this layer's) cleared and no other; padding and a block
// without a slot come out as skipped rows (slot −1).
TEST(GateRepairCuda, TakeStagedBlocksGathersRowsAndClearsEntries) {
  WITCERT_SKIP_WITHOUT_GPU();
  const ExactUnitShape s = TestShape();
  const int32_t bs = s.block_size, d = s.head_dim, hkv = s.num_kv_heads;
  const int64_t num_blocks = 8, uf = s.unit_floats(), row = int64_t{hkv} * d;
  auto index = [&](int64_t b, int32_t layer, int32_t g) { return (b * s.num_layers + layer) * hkv + g; };
  // Blocks 6 and 2 staged at slots (6: 0, 1; 2: 3, 2) of this layer; block 6 also at another layer.
  std::vector<int32_t> table(num_blocks * s.num_layers * hkv, -1);
  table[index(6, kLayer, 0)] = 0, table[index(6, kLayer, 1)] = 1;
  table[index(2, kLayer, 0)] = 3, table[index(2, kLayer, 1)] = 2;
  const int32_t other_layer = (kLayer + 1) % kLayers;
  table[index(6, other_layer, 0)] = 4;
  std::vector<float> cache(5 * uf);
  std::iota(cache.begin(), cache.end(), 0.0f);
  // Groups: block 2 (first position 48), padding, block 6 (first position 0), block 5 (no slot).
  const std::vector<int32_t> blocks = {2, -1, 6, 5}, first_pos = {48, 0, 0, 32};
  const int32_t groups = 4;
  DeviceBuffer<int32_t> dtable, dblocks, dfirst;
  DeviceBuffer<float> dcache, dk(groups * bs * row), dv(groups * bs * row);
  DeviceBuffer<int64_t> dslots(groups * bs), dpos(groups * bs);
  dtable.Upload(table);
  dblocks.Upload(blocks);
  dfirst.Upload(first_pos);
  dcache.Upload(cache);
  dk.Fill(0);
  dv.Fill(0);
  ASSERT_CUDA_OK(TakeStagedBlocksCuda(s, dblocks.get(), dfirst.get(), groups, kLayer, dtable.get(), dcache.get(),
                                      dk.get(), dv.get(), dslots.get(), dpos.get(), nullptr));
  ASSERT_CUDART(cudaDeviceSynchronize());
  const std::vector<float> k = dk.Download(), v = dv.Download();
  const std::vector<int64_t> slots = dslots.Download(), pos = dpos.Download();
  const std::vector<int32_t> after = dtable.Download();
  for (int32_t g = 0; g < groups; ++g) {
    const bool staged = blocks[g] == 2 || blocks[g] == 6;
    for (int32_t t = 0; t < bs; ++t) {
      const int64_t r = int64_t{g} * bs + t;
      ASSERT_EQ(slots[r], staged ? int64_t{blocks[g]} * bs + t : -1) << g << "," << t;
      if (!staged) continue;
      EXPECT_EQ(pos[r], first_pos[g] + t);
      for (int32_t h = 0; h < hkv; ++h) {
        const float* unit = &cache[table[index(blocks[g], kLayer, h)] * uf];
        for (int32_t c = 0; c < d; ++c) {
          ASSERT_EQ(k[r * row + h * d + c], unit[t * d + c]);
          ASSERT_EQ(v[r * row + h * d + c], unit[(bs + t) * d + c]);
        }
      }
    }
  }
  for (size_t i = 0; i < table.size(); ++i) {
    const bool taken = i == index(6, kLayer, 0) || i == index(6, kLayer, 1) || i == index(2, kLayer, 0) ||
                       i == index(2, kLayer, 1);
    EXPECT_EQ(after[i], taken ? -1 : table[i]) << "entry " << i;
  }
}

TEST(GateRepairCuda, CheckFlagsExactlyTheUncertifiedCells) {
  WITCERT_SKIP_WITHOUT_GPU();
  const int64_t rows = 7;
  const int32_t hq = 5;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(0, 0.2f);
  std::vector<meter::CertBound> cert(rows * hq);
  std::vector<float> norm(rows * hq);
  for (int64_t i = 0; i < rows * hq; ++i) {
    cert[i].tv = u(rng);
    cert[i].v_bound = u(rng);
    norm[i] = i % 11 == 0 ? 0.0f : 1.0f + u(rng);
  }
  cert[3].tv = NAN;  // an unusable certificate is never certified
  std::vector<float> tv_thr = {0.1f, NAN, 0.05f, 0.15f, 0.1f, NAN, 0.2f};
  std::vector<float> v_thr = {0.0f, 0.0f, 0.1f, 0.0f, 0.05f, 0.0f, 0.0f};
  DeviceBuffer<meter::CertBound> dc;
  DeviceBuffer<float> dn, dtv, dvt;
  DeviceBuffer<int32_t> flagged(rows * hq), count(1);
  dc.Upload(cert);
  dn.Upload(norm);
  dtv.Upload(tv_thr);
  dvt.Upload(v_thr);
  ASSERT_CUDA_OK(FlagUncertifiedCuda(dc.get(), dn.get(), dtv.get(), dvt.get(), rows, hq, flagged.get(),
                                     count.get(), nullptr));
  ASSERT_CUDART(cudaDeviceSynchronize());
  const int32_t nflag = count.Download()[0];
  std::vector<int32_t> got = flagged.Download();
  got.resize(nflag);
  std::sort(got.begin(), got.end());
  std::vector<int32_t> want;
  for (int64_t i = 0; i < rows * hq; ++i) {
    const int64_t r = i / hq;
    if (std::isnan(tv_thr[r])) continue;
    const float rel = norm[i] > 0 ? cert[i].v_bound / norm[i] : (cert[i].v_bound > 0 ? INFINITY : 0.0f);
    const bool ok = cert[i].tv <= tv_thr[r] && (v_thr[r] <= 0 || rel <= v_thr[r]);
    if (!ok) want.push_back(static_cast<int32_t>(i));
  }
  EXPECT_EQ(got, want);
  EXPECT_FALSE(want.empty());
}

TEST(GateRepairCuda, GatherScatterRows) {
  WITCERT_SKIP_WITHOUT_GPU();
  std::vector<float> src(10 * 6);
  std::iota(src.begin(), src.end(), 0.0f);
  std::vector<int32_t> idx = {7, 2, 9};
  DeviceBuffer<float> ds, dg(3 * 6), dd;
  DeviceBuffer<int32_t> di;
  ds.Upload(src);
  di.Upload(idx);
  ASSERT_CUDA_OK(GatherRowsCuda(ds.get(), 6 * 4, di.get(), 3, dg.get(), nullptr));
  std::vector<float> dst(10 * 6, -1.0f);
  dd.Upload(dst);
  ASSERT_CUDA_OK(ScatterRowsCuda(dg.get(), 6 * 4, di.get(), 3, dd.get(), nullptr));
  ASSERT_CUDART(cudaDeviceSynchronize());
  const std::vector<float> g = dg.Download(), o = dd.Download();
  for (int i = 0; i < 3; ++i) {
    for (int c = 0; c < 6; ++c) EXPECT_EQ(g[i * 6 + c], src[idx[i] * 6 + c]);
  }
  for (int r = 0; r < 10; ++r) {
    const bool moved = std::find(idx.begin(), idx.end(), r) != idx.end();
    for (int c = 0; c < 6; ++c) EXPECT_EQ(o[r * 6 + c], moved ? src[r * 6 + c] : -1.0f);
  }
}

}  // namespace
}  // namespace witcert
