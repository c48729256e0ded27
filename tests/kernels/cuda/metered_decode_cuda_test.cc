// The fused metered decode kernel against the CPU reference (kernels/cpu/metered_attention)
// and against the long-double truth, case by case: schemes, shapes, splits, Tier B's forms,
// outliers, promoted blocks, stage edges, long and adversarial contexts, and the split heuristic.
// The harness and its tolerances (why each is what it is) are in decode_problem.h.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/kv/codec.h"
#include "engine/kv/outlier_channels.h"
#include "gtest/gtest.h"
#include "kernels/cpu/metered_attention.h"
#include "kernels/cuda/metered_decode_cuda.h"
#include "kernels/cuda/ops/transformer_ops_cuda.h"
#include "kernels/cuda/tc_logit_eta.cuh"
#include "kernels/meter/float_formats.h"
#include "kernels/meter/partial_sum.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/cuda/decode_problem.h"
#include "tests/kernels/cuda/late_copy_cuda.h"
#include "tests/kernels/cuda/tc_eta_bound.h"
#include "tests/kernels/meter/long_double_reference.h"

namespace witcert {
namespace {

using testing::DecodeCase;
using testing::DecodeOutcome;
using testing::DeviceBuffer;
using testing::HostPool;
using testing::Problem;
using testing::RunCase;

TEST(MeteredDecodeCuda, SmallMatchesCpu) {  // also the sanitizer case
  WITCERT_SKIP_WITHOUT_GPU();
  for (KvScheme s : {KvScheme::kInt8Dither, KvScheme::kFp16, KvScheme::kInt4Rtn}) {
    for (bool meter : {true, false}) {
      DecodeCase c;
      c.scheme = s;
      c.ctx = {1, 37, 300};
      c.meter = meter;
      c.delta = 1e-6;
      RunCase(c);
    }
  }
  // fp16, bf16 and fp8-e4m3 (raw and scaled) at d = 128: the pipelined kernel's tensor-core passes;
  // one and two n-tiles of heads (rows past each context are NaN in the pool: the edge stage must
  // keep them out), plain and adversarial rows (outlier query channels, huge keys) against the
  // CPU's output tolerance.
  for (KvScheme scheme : {KvScheme::kFp16, KvScheme::kBf16, KvScheme::kFp8Raw, KvScheme::kFp8Scaled}) {
    for (int32_t group : {4, 8}) {
      for (bool meter : {true, false}) {
        for (bool adversarial : {false, true}) {
          DecodeCase c;
          c.scheme = scheme;
          c.d = 128;
          c.group = group;
          c.hkv = group == 8 ? 1 : 2;
          c.ctx = {1, 37, 300};
          c.meter = meter;
          c.adversarial = adversarial;
          c.poison_pool = true;
          RunCase(c);
        }
      }
    }
  }
  // kivi2 on the pipelined kernel (kernel 2): each context's last block read exact (its keys are
  // not encoded yet), so a stage mixes exact and coded groups and the V stage clears the exact
  // groups' staged witness behind its own barrier (pipe_exact_rows.cuh): racecheck's case.
  for (bool meter : {true, false}) {
    DecodeCase c;
    c.scheme = KvScheme::kKivi2;
    c.d = 128;
    c.kernel = 2;
    c.ctx = {1, 37, 300};
    c.meter = meter;
    c.exact_every = 3;
    c.poison_pool = true;
    RunCase(c);
  }
}

// kivi2 (keys per block), the pipelined kernel (kernel 0, the default) and the first (1): full blocks encoded
// whole, each sequence's unfilled last block read exact from the exact table; meter on and off,
// both head dims, GQA 1/4/8, block sizes 8/16/32/128 (one to eight key parameter slots a stage),
// forced splits that cut blocks, adversarial rows, promoted blocks too.
TEST(MeteredDecodeCuda, Kivi2MatchesCpu) {
  WITCERT_SKIP_WITHOUT_GPU();
  int seed = 900;
  for (int32_t kernel : {0, 1}) {
    for (int32_t d : {64, 128}) {
      for (int32_t group : {1, 4, 8}) {
        for (bool meter : {true, false}) {
          DecodeCase c;
          c.kernel = kernel;
          c.scheme = KvScheme::kKivi2;
          c.d = d;
          c.group = group;
          c.bs = group == 4 ? 32 : (group == 8 ? 16 : (d == 64 ? 8 : 128));
          c.ctx = {1, 16, 37, 300, 1500};
          c.meter = meter;
          c.splits = group == 8 ? 3 : 0;
          c.adversarial = group == 4;
          c.key_scale = group == 4 ? 8.0f : 1.0f;
          c.exact_every = group == 1 ? 3 : 0;
          c.interleaved = (seed % 2) == 0;
          c.seed = seed++;
          RunCase(c);
        }
      }
    }
  }
}

// One 40-token sequence over a 4-block pool with one KV head and `hq` query heads, contents
// never written: for the tests of which layouts and arguments MeteredDecodeCuda accepts.
struct TinyDecode {
  PagedKvLayout L;
  PagedKvPoolCuda pool;
  DeviceBuffer<float> q, out;
  DeviceBuffer<int32_t> table, lens;
  DeviceBuffer<meter::CertBound> cert;
  DeviceBuffer<uint8_t> ws;
  MeteredDecodeCudaArgs a;

  CudaStatus Init(KvScheme scheme, int32_t d, int32_t hq, int32_t outliers = 0) {
    L.num_blocks = 4;
    L.num_kv_heads = 1;
    L.head_dim = d;
    L.scheme = scheme;
    L.outlier_channels = outliers;
    q.Resize(hq * d);
    out.Resize(hq * d);
    table.Upload({0, 1, 2, 3});
    lens.Upload({40});
    cert.Resize(hq);
    ws.Resize(MeteredDecodeWorkspaceBytes(1, hq, d, 64));
    a.q = q.get();
    a.block_tables = table.get();
    a.context_lens = lens.get();
    a.batch = 1;
    a.num_q_heads = hq;
    a.max_blocks_per_seq = 4;
    a.max_context = 40;
    a.out = out.get();
    a.cert = cert.get();
    a.workspace = ws.get();
    a.workspace_bytes = ws.size();
    return pool.Init(L, 1);
  }
  CudaStatus Run() { return MeteredDecodeCuda(L, pool.layer(0), a, nullptr); }
};

// Outlier channel bypass (first kernel, EXACT variant): every scheme with a witness, both
// head dims, GQA 4/8, promoted blocks beside it, adversarial rows (outlier channels are
// what the bypass is for), kivi2 with meter off too.
TEST(MeteredDecodeCuda, OutlierBypassMatchesCpu) {
  WITCERT_SKIP_WITHOUT_GPU();
  int seed = 1300;
  for (KvScheme s : {KvScheme::kFp16, KvScheme::kBf16, KvScheme::kFp8Raw, KvScheme::kFp8Scaled, KvScheme::kInt8Rtn,
                     KvScheme::kInt8Dither, KvScheme::kInt4Rtn, KvScheme::kKivi2}) {
    for (int32_t d : {64, 128}) {
      DecodeCase c;
      c.scheme = s;
      c.d = d;
      c.group = d == 64 ? 8 : 4;
      c.ctx = {1, 37, 300, 700};
      c.outliers = d == 64 ? 2 : 6;
      c.delta = 1e-6;
      c.adversarial = d == 128;
      c.key_scale = d == 128 ? 8.0f : 1.0f;
      c.exact_every = d == 64 ? 4 : 0;
      c.interleaved = (seed % 2) == 0;
      c.seed = seed++;
      RunCase(c);
      if (s == KvScheme::kKivi2) {
        c.meter = false;
        RunCase(c);
      }
    }
  }
}

// Without its table or with the meter off (other than kivi2), the bypass is refused.
TEST(MeteredDecodeCuda, OutlierBypassNeedsTableAndMeter) {
  WITCERT_SKIP_WITHOUT_GPU();
  TinyDecode t;
  ASSERT_CUDA_OK(t.Init(KvScheme::kInt8Rtn, 64, 4, /*outliers=*/2));
  DeviceBuffer<int32_t> channels;
  channels.Upload({1, 2, 3, 4});
  const CudaStatus st = t.Run();
  EXPECT_FALSE(st.ok);
  EXPECT_NE(st.message.find("outlier channels need their table"), std::string::npos) << st.message;
  t.a.outlier_channels = channels.get();
  t.a.meter = false;
  EXPECT_FALSE(t.Run().ok);
  t.a.meter = true;
  EXPECT_TRUE(t.Run().ok);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The first (two-phase) kernel stays selectable and correct: it is the comparison baseline.
TEST(MeteredDecodeCuda, FirstKernelMatchesCpu) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (KvScheme s : {KvScheme::kInt8Dither, KvScheme::kFp16, KvScheme::kInt4Rtn}) {
    DecodeCase c;
    c.scheme = s;
    c.d = 128;
    c.ctx = {1, 37, 700};
    c.delta = 1e-6;
    c.kernel = 1;
    RunCase(c);
  }
}

// The tensor-core kernel (int8-rtn, d = 128, G ≤ 4): also the sanitizer case.
TEST(MeteredDecodeCuda, TensorCoreSmallMatchesCpu) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (KvScheme s : {KvScheme::kInt8Rtn, KvScheme::kInt8Dither}) {
    for (int32_t group : {1, 3, 4}) {
      for (bool meter : {true, false}) {
        DecodeCase c;
        c.scheme = s;
        c.d = 128;
        c.group = group;
        c.ctx = {1, 37, 300};
        c.meter = meter;
        c.delta = s == KvScheme::kInt8Dither && group != 3 ? 1e-6 : 0.0;  // Tier B on and off
        c.kernel = 3;
        c.seed = 40 + group;
        RunCase(c);
      }
    }
  }
}

// Tier B's scale-only and split-max forms on the tensor-core kernel against the CPU reference
// with the same cuts; on the same inputs neither falls below the per-token form the same kernel
// computes, and scale-only never above split-max. Small enough for the sanitizer filter.
TEST(MeteredDecodeCuda, TensorCoreTierBFormsSmallMatchesCpu) {
  WITCERT_SKIP_WITHOUT_GPU();
  int seed = 60;
  for (int32_t group : {1, 4}) {
    for (bool adversarial : {false, true}) {
      DecodeCase c;
      c.scheme = KvScheme::kInt8Dither;
      c.d = 128;
      c.group = group;
      c.ctx = {1, 37, 300, 1100};
      c.splits = adversarial ? 3 : 0;
      c.delta = 1e-6;
      c.adversarial = adversarial;
      c.key_scale = adversarial ? 40.0f : 4.0f;
      c.kernel = 3;
      c.seed = seed++;
      DecodeOutcome tokenwise, scale_only, split_max;
      RunCase(c, &tokenwise);
      c.form = meter::TierBForm::kScaleOnly;
      RunCase(c, &scale_only);
      c.form = meter::TierBForm::kSplitMax;
      RunCase(c, &split_max);
      ASSERT_EQ(tokenwise.cert.size(), scale_only.cert.size());
      ASSERT_EQ(tokenwise.cert.size(), split_max.cert.size());
      auto below = [](const meter::CertBound& lo, const meter::CertBound& hi) {  // hi < lo beyond rounding
        return hi.tv < lo.tv * (1.0f - 1e-5f) || hi.v_resid_sum < lo.v_resid_sum * (1.0f - 1e-5f);
      };
      int scale_below = 0, split_below = 0, split_below_scale = 0, scale_looser = 0, split_looser = 0;
      for (size_t i = 0; i < tokenwise.cert.size(); ++i) {
        const meter::CertBound &t = tokenwise.cert[i], &u = scale_only.cert[i], &m = split_max.cert[i];
        scale_below += below(t, u);
        split_below += below(t, m);
        split_below_scale += below(u, m);
        scale_looser += u.tv > t.tv * 1.01f;
        split_looser += m.tv > t.tv * 1.01f;
        EXPECT_EQ(tokenwise.out[i * c.d], scale_only.out[i * c.d]) << "the meter never reaches the output";
        EXPECT_EQ(tokenwise.out[i * c.d], split_max.out[i * c.d]) << "the meter never reaches the output";
      }
      EXPECT_EQ(scale_below, 0) << "scale-only fell below the per-token form";
      EXPECT_EQ(split_below, 0) << "split-max fell below the per-token form";
      EXPECT_EQ(split_below_scale, 0) << "split-max fell below the scale-only form";
      std::printf("[ measured ] G=%d adversarial=%d: of %zu cells, %d scale-only and %d split-max > 1.01x the "
                  "per-token TV bound\n",
                  group, adversarial ? 1 : 0, tokenwise.cert.size(), scale_looser, split_looser);
    }
  }
}

// Stage (128 tokens) and block edges, block sizes, both RoPE pairings, forced and heuristic
// splits, logit magnitudes up to the hundreds, adversarial rows; soundness against the truth.
// int8-dither (Tier B on) on every other pair of cases, its three Tier B forms in turn.
TEST(MeteredDecodeCuda, TensorCoreSweep) {
  WITCERT_SKIP_WITHOUT_GPU();
  int seed = 500;
  for (int32_t bs : {8, 16, 32}) {
    for (int32_t splits : {0, 1, 3, 7}) {
      for (bool adversarial : {false, true}) {
        DecodeCase c;
        const bool dither = (seed / 2) % 2 == 1;  // pairings and adversarial rows alternate faster
        c.scheme = dither ? KvScheme::kInt8Dither : KvScheme::kInt8Rtn;
        c.delta = dither ? 1e-6 : 0.0;
        if (dither) c.form = static_cast<meter::TierBForm>((seed / 4) % 3);
        c.d = 128;
        c.group = 4;
        c.hkv = 2;
        c.bs = bs;
        c.ctx = splits == 1 ? std::vector<int64_t>{1, 127, 128, 129, 2048}
                            : std::vector<int64_t>{1, 129, 700, 2049, 5000};
        c.splits = splits;
        c.interleaved = (seed % 2) == 0;
        c.adversarial = adversarial;
        c.key_scale = adversarial ? 40.0f : (splits == 3 ? 8.0f : 1.0f);
        c.kernel = 3;
        c.seed = seed++;
        RunCase(c);
      }
    }
  }
}

// Splits longer than the other kernels' 2048-token cap, up to the tensor-core kernel's 3072
// (MaxSplitTokens(layout, G)): 2 splits of 6100 tokens and 3 of 9000 are 3072 each.
TEST(MeteredDecodeCuda, TensorCoreLongSplits) {
  WITCERT_SKIP_WITHOUT_GPU();
  int seed = 700;
  for (int32_t splits : {2, 3}) {
    for (bool dither : {false, true}) {
      DecodeCase c;
      c.scheme = dither ? KvScheme::kInt8Dither : KvScheme::kInt8Rtn;
      c.delta = dither ? 1e-6 : 0.0;
      c.d = 128;
      c.group = 4;
      c.hkv = 2;
      c.ctx = splits == 2 ? std::vector<int64_t>{1, 3000, 6100} : std::vector<int64_t>{2049, 9000};
      c.splits = splits;
      c.key_scale = 4.0f;
      c.kernel = 3;
      c.seed = seed++;
      RunCase(c);
    }
  }
}

// The decode step's launch order: the decode overlaps the KV write of each sequence's newest token
// (MeteredDecodeCudaArgs::overlap_previous), on both kernels that take it (tensor-core, pipelined),
// meter on and off, forced splits that put the newest token in a short last split, ragged batch.
TEST(MeteredDecodeCuda, OverlapWithTheKvWriteIsBitIdentical) {
  WITCERT_SKIP_WITHOUT_GPU();
  int seed = 900;
  for (auto [scheme, d, group, kernel] : {std::tuple{KvScheme::kInt8Rtn, 128, 4, 3},
                                          std::tuple{KvScheme::kInt8Dither, 128, 4, 3},
                                          std::tuple{KvScheme::kFp16, 128, 4, 2},
                                          std::tuple{KvScheme::kFp8Scaled, 64, 8, 2},
                                          std::tuple{KvScheme::kInt8Rtn, 64, 1, 2}}) {
    for (int32_t splits : {0, 3}) {
      for (bool meter : {true, false}) {
        DecodeCase c;
        c.scheme = scheme;
        c.d = d;
        c.group = group;
        c.hkv = 2;
        c.ctx = {1, 129, 700, 2049};
        c.splits = splits;
        c.meter = meter;
        c.delta = scheme == KvScheme::kInt8Dither ? 1e-6 : 0.0;
        c.kernel = kernel;
        c.seed = seed++;
        SCOPED_TRACE(c.Name());
        Problem p(c);
        p.CheckOverlapWithWrite();
      }
    }
  }
}

TEST(MeteredDecodeCuda, TensorCoreRejectsOtherShapes) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (auto [scheme, d, hq] : {std::tuple{KvScheme::kInt8Rtn, 64, 4}, std::tuple{KvScheme::kInt8Rtn, 128, 8},
                                std::tuple{KvScheme::kInt8Dither, 128, 8}, std::tuple{KvScheme::kFp8Scaled, 128, 4}}) {
    TinyDecode t;
    ASSERT_CUDA_OK(t.Init(scheme, d, hq));
    t.a.kernel = 3;
    const CudaStatus st = t.Run();
    EXPECT_FALSE(st.ok);
    EXPECT_NE(st.message.find("tensor-core kernel"), std::string::npos) << st.message;
    t.a.kernel = 0;  // the default falls back to the pipelined kernel
    EXPECT_TRUE(t.Run().ok);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
}

// Pipelined kernel edges: splits that start and end inside 64-token stages and inside
// blocks, block size 8 (smallest the pipelined loader takes) and a split of exactly one stage.
TEST(MeteredDecodeCuda, StageEdges) {
  WITCERT_SKIP_WITHOUT_GPU();
  int seed = 300;
  for (KvScheme s : {KvScheme::kInt8Rtn, KvScheme::kFp8Scaled, KvScheme::kBf16}) {
    for (int32_t bs : {8, 16}) {
      DecodeCase c;
      c.scheme = s;
      c.d = 64;
      c.bs = bs;
      c.ctx = {64, 65, 191, 129};
      c.splits = 3;
      c.delta = 1e-6;
      c.seed = seed++;
      RunCase(c);
    }
  }
}

// Witness band counts other than the default 8 (a serving option, engine_config num_bands):
// the pipelined kernel's witness copies with a runtime B (odd B in 8-byte chunks; B = 64 with
// more chunks a stage than threads) and its general ε, int8 off the tensor-core kernel (which
// takes B = 8 alone), and the first kernel; every B that divides d/2 at the extremes.
TEST(MeteredDecodeCuda, WitnessBandCounts) {
  WITCERT_SKIP_WITHOUT_GPU();
  struct Shape {
    int32_t d, bands;
  };
  int seed = 1200;
  for (const Shape sh : {Shape{128, 1}, Shape{128, 4}, Shape{128, 16}, Shape{128, 64}, Shape{64, 2}, Shape{64, 32}}) {
    for (KvScheme s : {KvScheme::kInt8Rtn, KvScheme::kInt8Dither, KvScheme::kFp8Scaled, KvScheme::kFp16}) {
      for (int32_t kernel : {0, 1}) {
        if (kernel == 1 && s != KvScheme::kInt8Rtn) continue;
        DecodeCase c;
        c.scheme = s;
        c.d = sh.d;
        c.bands = sh.bands;
        c.group = seed % 2 == 0 ? 4 : 8;
        c.hkv = c.group == 8 ? 1 : 2;
        c.ctx = {1, 70, 300};
        c.splits = 3;
        c.delta = 1e-6;
        c.kernel = kernel;
        c.seed = seed++;
        RunCase(c);
      }
    }
  }
}

TEST(MeteredDecodeCuda, SchemeShapeSweep) {
  WITCERT_SKIP_WITHOUT_GPU();
  const int forced[] = {0, 1, 3, 7};
  int i = 0;
  for (int s = 0; s < static_cast<int>(KvScheme::kCount); ++s) {
    for (int d : {64, 128}) {
      for (int group : {1, 4, 8}) {
        for (int bs : {16, 32}) {
          DecodeCase c;
          c.scheme = static_cast<KvScheme>(s);
          c.d = d;
          c.group = group;
          c.hkv = group == 8 ? 1 : 2;
          c.bs = bs;
          c.ctx = {1, 200, 1500};
          c.splits = forced[i % 4];
          c.interleaved = (i % 3) != 0;
          c.delta = 1e-6;
          c.seed = 100 + i++;
          RunCase(c);
        }
      }
    }
  }
}

// The gate's promoted blocks: read exact (ε̂ = 0, ρ = 0) from the exact-block cache by the
// first kernel, for every scheme, both head dims, GQA 1/4/8, Tier B, adversarial rows, and
// everything promoted (the bound must then be the exact-fp32 one).
TEST(MeteredDecodeCuda, PromotedBlocksReadExact) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (int s = 0; s < static_cast<int>(KvScheme::kCount); ++s) {
    for (int32_t d : {64, 128}) {
      DecodeCase c;
      c.scheme = static_cast<KvScheme>(s);
      c.d = d;
      c.group = s % 3 == 0 ? 1 : (s % 3 == 1 ? 4 : 8);
      c.ctx = {1, 40, 200, 333};
      c.exact_every = 3;
      c.seed = 40 + s;
      RunCase(c);
    }
  }
  DecodeCase tier_b;
  tier_b.scheme = KvScheme::kInt8Dither;
  tier_b.d = 128;
  tier_b.ctx = {700, 64};
  tier_b.delta = 1e-6;
  tier_b.exact_every = 2;
  RunCase(tier_b);
  DecodeCase adv;
  adv.scheme = KvScheme::kInt4Rtn;
  adv.d = 128;
  adv.ctx = {500};
  adv.adversarial = true;
  adv.key_scale = 3.0f;
  adv.exact_every = 2;
  RunCase(adv);
  DecodeCase all;
  all.scheme = KvScheme::kInt8Rtn;
  all.d = 128;
  all.ctx = {300, 17};
  all.exact_every = 1;  // every unit exact: A − 1 and the value residual are fp rounding only
  DecodeOutcome keep;
  RunCase(all, &keep);
  for (const meter::CertBound& cb : keep.cert) {
    EXPECT_EQ(cb.v_resid_sum, 0.0f);
    EXPECT_LT(cb.tv, 1e-3f);
  }
}

TEST(MeteredDecodeCuda, MeterOffMatchesCpu) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (int s = 0; s < static_cast<int>(KvScheme::kCount); ++s) {
    DecodeCase c;
    c.scheme = static_cast<KvScheme>(s);
    c.d = 128;
    c.ctx = {513, 2049};
    c.meter = false;
    RunCase(c);
  }
}

TEST(MeteredDecodeCuda, SplitCountInvariance) {
  WITCERT_SKIP_WITHOUT_GPU();
  DecodeOutcome base;
  DecodeCase c;
  c.scheme = KvScheme::kInt8Rtn;
  c.d = 128;
  c.ctx = {5000};
  c.splits = 4;
  RunCase(c, &base);
  for (int splits : {5, 16, 0}) {
    DecodeOutcome o;
    c.splits = splits;
    RunCase(c, &o);
    ASSERT_EQ(o.out.size(), base.out.size());
    for (size_t i = 0; i < o.out.size(); ++i) EXPECT_NEAR(o.out[i], base.out[i], 1e-4f) << i;
    for (size_t i = 0; i < o.cert.size(); ++i) {
      EXPECT_NEAR(o.cert[i].tv, base.cert[i].tv, 1e-3 * base.cert[i].tv + 1e-7) << i;
    }
  }
}

TEST(MeteredDecodeCuda, Batch64RaggedContexts) {
  WITCERT_SKIP_WITHOUT_GPU();
  std::mt19937 rng(64);
  DecodeCase c;
  c.d = 128;
  c.ctx.resize(64);
  for (auto& s : c.ctx) s = 1 + rng() % 2000;
  c.check_truth = false;
  for (KvScheme s : {KvScheme::kInt8Rtn, KvScheme::kInt8Dither, KvScheme::kFp8Scaled}) {
    c.scheme = s;
    c.delta = 1e-6;
    RunCase(c);
  }
}

TEST(MeteredDecodeCuda, LongContexts) {
  WITCERT_SKIP_WITHOUT_GPU();
  DecodeCase c;
  c.d = 128;
  c.hkv = 1;
  c.scheme = KvScheme::kInt8Dither;
  c.delta = 1e-6;
  c.ctx = {131072};
  c.check_truth = false;
  RunCase(c);  // heuristic splits
  c.ctx = {20000};
  c.check_truth = true;
  RunCase(c);
  c.scheme = KvScheme::kFp8Scaled;
  c.group = 8;
  c.ctx = {32768, 777};
  c.splits = 40;
  c.check_truth = true;
  RunCase(c);
}

TEST(MeteredDecodeCuda, AdversarialSoundness) {
  WITCERT_SKIP_WITHOUT_GPU();
  int seed = 7;
  for (KvScheme s : {KvScheme::kInt4Rtn, KvScheme::kFp8Scaled, KvScheme::kFp8Raw, KvScheme::kInt8Rtn,
                     KvScheme::kFp16, KvScheme::kBf16, KvScheme::kInt8Dither}) {
    for (float key_scale : {1.0f, 8.0f, 40.0f}) {
      DecodeCase c;
      c.scheme = s;
      c.d = 64;
      c.ctx = {3000, 64};
      c.key_scale = key_scale;
      c.adversarial = true;
      c.delta = 1e-9;
      c.seed = seed++;
      RunCase(c);
    }
  }
}

// Host-only: the weighted token add (w·expm1(ε̂), partial_sum.h) against cert_math.h's
// PartialAddToken (expf(d1 + log expm1 ε̂)): same z, c, counts; b within the κ budget each
// side is allowed (the two are different roundings of the same real sum).
TEST(MeteredDecodeCuda, WeightedTokenAddMatchesPartialAddToken) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> logit(-120.0f, 0.0f), eps(0.0f, 3.0f);
  meter::CertPartial a, b;
  a.m = b.m = 0.0f;
  for (int i = 0; i < 20000; ++i) {
    const float l = (i % 97 == 0) ? -200.0f : logit(rng);
    const float e = (i % 5 == 0) ? eps(rng) * 1e-6f : eps(rng);
    const float r = eps(rng);
    meter::PartialAddToken(&a, l, e, r, 0.0f, 0.0f);
    meter::PartialAddTokenWeighted(&b, l, expf(l - b.m), e, r, 0.0f);
  }
  EXPECT_EQ(a.z, b.z);
  EXPECT_EQ(a.c, b.c);
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.eps_max, b.eps_max);
  EXPECT_NEAR(b.b, a.b, 2.0 * meter::kKappa * a.b);
  meter::CertPartial big;
  big.m = 0.0f;
  meter::PartialAddTokenWeighted(&big, 0.0f, 1.0f, 100.0f, 0.0f, 0.0f);  // ε̂ > kEpsCap: vacuous
  EXPECT_TRUE(std::isinf(big.b));
}

// Host-only properties of the split heuristic.
TEST(MeteredDecodeCuda, SplitHeuristic) {
  for (int32_t batch : {1, 3, 16, 64}) {
    for (int32_t g : {1, 4, 8}) {
      for (int64_t ctx : {1LL, 100LL, 8192LL, 32768LL, 131072LL, 1000000LL}) {
        const int32_t p = ChooseNumSplits(batch, 8, g, ctx, 132);
        EXPECT_GE(p, 1);
        EXPECT_LE(p, ctx);
        const int64_t len = SplitTokens(ctx, p), used = SplitsUsed(ctx, p);
        EXPECT_LE(len, MaxSplitTokens(g)) << batch << " " << g << " " << ctx;
        EXPECT_EQ(len % kSplitAlignTokens, 0);
        EXPECT_TRUE(used >= 1 && used <= p && (used - 1) * len < ctx && used * len >= ctx);
        const int64_t ctas = static_cast<int64_t>(p) * batch * 8;
        const int64_t need = (ctx + MaxSplitTokens(g) - 1) / MaxSplitTokens(g);
        // One wave at 2 CTAs per SM unless the length cap needs more splits; there, at most
        // twice the cap's count, and only where that fills the last wave better (fewer waves ×
        // tokens per split, plus the fixed part). Long contexts give every SM at least one CTA
        // while the batch alone does not.
        if (p > need && static_cast<int64_t>(batch) * 8 * need <= 2 * 132) {
          EXPECT_LE(ctas, 2 * 132) << batch << " " << g << " " << ctx;
        } else if (p > need) {
          EXPECT_LE(g, 4) << batch << " " << g << " " << ctx;  // G = 8 keeps the cap's count
          EXPECT_LE(p, 2 * need) << batch << " " << g << " " << ctx;
          auto waves = [&](int64_t q) { return (int64_t{batch} * 8 * SplitsUsed(ctx, q) + 263) / 264; };
          EXPECT_LT(waves(p) * (170 + len), waves(need) * (170 + SplitTokens(ctx, need)))
              << batch << " " << g << " " << ctx;
        }
        if (ctx >= 256LL * 264 && batch * 8 <= 132) {
          EXPECT_GE(ctas, 132) << batch << " " << g << " " << ctx;
        }
      }
    }
  }
  // 64·8 CTAs already fill the GPU: only the length cap splits (8192 / MaxSplitTokens(4) = 4).
  EXPECT_EQ(ChooseNumSplits(64, 8, 4, 8192, 132), 4);
  // Batch 16 × 8k: 4 splits are 2 full waves; a few tokens more need 5 (a third wave, mostly
  // empty), where 6 fill that wave with shorter splits.
  EXPECT_EQ(ChooseNumSplits(16, 8, 4, 8192, 132), 4);
  EXPECT_EQ(ChooseNumSplits(16, 8, 4, 8192 + 24, 132), 6);
  EXPECT_EQ(ChooseNumSplits(16, 8, 4, 32768, 132), 16);
  EXPECT_EQ(ChooseNumSplits(16, 4, 7, 8192 + 24, 132), 6);  // Qwen2.5-7B (G = 7): the 1536 cap's count
  // With the tensor-core kernel's longer splits (3072 tokens) 8k + a few tokens fits 4 splits of
  // 2176 at batch 16 (two waves), and 3 of 2816 at batch 64 (6 waves, where 4 would take 8);
  // batch 1 × 128k keeps 64 splits (two waves either way, shorter splits).
  const PagedKvLayout int8 = [] {
    PagedKvLayout L;
    L.num_blocks = 16;
    L.num_kv_heads = 8;
    L.head_dim = 128;
    L.scheme = KvScheme::kInt8Rtn;
    return L;
  }();
  ASSERT_EQ(MaxSplitTokens(int8, 4), kTensorCoreMaxSplitTokens);
  EXPECT_EQ(MaxSplitTokens(int8, 8), MaxSplitTokens(8));  // G = 8: no tensor-core kernel
  const int64_t cap = MaxSplitTokens(int8, 4);
  EXPECT_EQ(ChooseNumSplits(16, 8, 4, 8192 + 24, 132, cap), 4);
  EXPECT_EQ(ChooseNumSplits(64, 8, 4, 8192 + 24, 132, cap), 3);
  EXPECT_EQ(ChooseNumSplits(1, 8, 4, 131072, 132, cap), 64);
  EXPECT_EQ(ChooseNumSplits(16, 8, 4, 32768, 132, cap), 16);
  EXPECT_EQ(ChooseNumSplits(1, 8, 4, 8192, 132, cap), ChooseNumSplits(1, 8, 4, 8192, 132));
  // Stage-aligned ranges: 66 requested splits of 32k are 64 of 512 tokens; 6 of 1000 tokens
  // are 4 of 256 (the last 232); 32 of 100 tokens are one.
  EXPECT_EQ(SplitTokens(32768, 66), 512);
  EXPECT_EQ(SplitsUsed(32768, 66), 64);
  EXPECT_EQ(SplitTokens(1000, 6), 256);
  EXPECT_EQ(SplitsUsed(1000, 6), 4);
  EXPECT_EQ(SplitsUsed(100, 32), 1);
}

}  // namespace
}  // namespace witcert
