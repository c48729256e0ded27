// The metered chunked-prefill kernel (kernels/cuda/metered_prefill_cuda.h) against the CPU
// reference run row by row (kernels/cpu/metered_attention: row i attends stored tokens
// [0, start + i], one split) and against the long-double truth.
//
// Tolerances (why):
//  * outputs: the kernel rounds each weight·V-scale to fp16 (≤ 2^-11 relative) before an fp32
//    accumulation, so the output, a convex combination of ṽ, moves by ≤ ~2^-11·max|ṽ| plus
//    the fp32 logit rounding the decode test allows: |Δo| ≤ 1e-3·max|ṽ| + 8(d+32)u(1+Λ)max|ṽ|.
//  * certificate: both sides are sound. The GPU may be lower than the CPU only by the CPU's
//    larger fp32 logit rounding η (the GPU's logits are exact integer dots, as in the decode
//    test's tensor-core case: up to e^{-4η_cpu}) and the two sides' ε̂ roundings; it may be
//    higher by its rescale merges ((1+κ) each, a few per row) and coarser η: ≤ 1.02× + 1e-6. With
//    float keys the logits come from tensor cores (two query digits, tc_logit_eta.cuh): the GPU may
//    also sit above the CPU by e^{4η_tc}, η_tc over-estimated in double (tc_eta_bound.h).
//  * soundness: the GPU TV bound ≥ the true TV and the value bound ≥ ‖o − õ‖, no slack.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/kv/codec.h"
#include "gtest/gtest.h"
#include "kernels/cpu/metered_attention.h"
#include "kernels/cuda/metered_prefill_cuda.h"
#include "kernels/meter/float_formats.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/cuda/tc_eta_bound.h"
#include "tests/kernels/meter/long_double_reference.h"

namespace witcert {
namespace {

using testing::DeviceBuffer;
using testing::HostPool;

struct PrefillCase {
  KvScheme scheme = KvScheme::kInt8Rtn;
  int32_t group = 4, hkv = 2, bs = 16;
  int64_t start = 37, rows = 20;  // stored tokens before the chunk; chunk rows
  bool meter = true;
  float key_scale = 1.0f;
  bool adversarial = false;
  bool interleaved = true;
  double delta = 0.0;  // int8-dither: Tier B's δ_loc (0: Tier A only)
  meter::TierBForm form = meter::TierBForm::kPerToken;  // Tier B's form (MeteredPrefillCudaArgs::tier_b_form)
  uint32_t seed = 1;
  std::string Name() const {
    return std::string(SchemeInfo(scheme).name) + " G=" + std::to_string(group) + " Hkv=" + std::to_string(hkv) + " bs=" + std::to_string(bs) +
           " start=" + std::to_string(start) + " rows=" + std::to_string(rows) + (meter ? " meter" : " nometer") +
           " kscale=" + std::to_string(key_scale) + (adversarial ? " adversarial" : "") +
           (delta > 0 ? " delta=" + std::to_string(delta) + " " + meter::TierBFormName(form) : "");
  }
};

constexpr int32_t kD = 128, kBands = 8, kLayer = 3;
constexpr uint64_t kSeed = 0x5EEDULL;

void RunCase(const PrefillCase& c) {
  SCOPED_TRACE(c.Name());
  std::mt19937 rng(c.seed * 7919 + c.group * 31 + c.bs);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int32_t hq = c.hkv * c.group;
  const int64_t S = c.start + c.rows;
  PagedKvLayout L;
  L.num_kv_heads = c.hkv;
  L.block_size = c.bs;
  L.head_dim = kD;
  L.num_bands = kBands;
  L.interleaved = c.interleaved;
  L.scheme = c.scheme;
  const int32_t nblk = static_cast<int32_t>((S + c.bs - 1) / c.bs);
  L.num_blocks = nblk + 7;
  ASSERT_TRUE(MeteredPrefillCudaSupports(L, hq));
  std::vector<int32_t> perm(L.num_blocks);  // non-contiguous blocks
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> table(perm.begin(), perm.begin() + nblk);

  // Exact K/V [S, Hkv, d]; queries of the chunk rows in fused-QKV-like rows (stride > Hq·d).
  std::vector<float> k(S * c.hkv * kD), v(S * c.hkv * kD);
  for (auto& x : k) x = g(rng) * c.key_scale;
  for (auto& x : v) x = g(rng);
  const int64_t q_stride = hq * kD + 2 * c.hkv * kD;
  std::vector<float> q(c.rows * q_stride, 7.0f);
  for (int64_t i = 0; i < c.rows; ++i) {
    for (int64_t j = 0; j < hq * kD; ++j) q[i * q_stride + j] = g(rng);
  }
  if (c.adversarial) {
    for (int64_t i = 0; i < c.rows; ++i) {
      for (int32_t h = 0; h < hq; ++h) q[i * q_stride + h * kD + (i * 5 + h) % kD] *= 30.0f;
    }
    for (int64_t t = 0; t < S; ++t) {
      for (int32_t h = 0; h < c.hkv; ++h) {
        float* kr = &k[(t * c.hkv + h) * kD];
        float* vr = &v[(t * c.hkv + h) * kD];
        switch ((t + h) % 11) {
          case 0:  // aligned with row 0's first query of the group: a dominant logit
            for (int i = 0; i < kD; ++i) kr[i] = q[h * c.group * kD + i] * c.key_scale * 0.5f;
            break;
          case 1: kr[(t * 3) % kD] *= 200.0f; break;
          case 2: for (int i = 0; i < kD; ++i) vr[i] *= 1e3f; break;
          case 3: for (int i = 0; i < kD; ++i) kr[i] *= 1e-3f; break;
          default: break;
        }
      }
    }
  }

  // GPU: write all S tokens, then the chunk's attention.
  PagedKvPoolCuda pool;
  ASSERT_CUDA_OK(pool.Init(L, 1));
  {
    std::vector<int64_t> slots(S), pos(S);
    for (int64_t t = 0; t < S; ++t) {
      slots[t] = static_cast<int64_t>(table[t / c.bs]) * c.bs + t % c.bs;
      pos[t] = t;
    }
    DeviceBuffer<float> dk, dv;
    DeviceBuffer<int64_t> ds, dp;
    dk.Upload(k);
    dv.Upload(v);
    ds.Upload(slots);
    dp.Upload(pos);
    KvWriteArgs w{dk.get(), dv.get(), ds.get(), dp.get(), S, kLayer, kSeed, {}};
    ASSERT_CUDA_OK(WriteKvCuda(L, pool.layer(0), w, nullptr));
    const int32_t full = static_cast<int32_t>(S / c.bs);
    if (L.group_keys() && full > 0) {  // kivi2: the full blocks' keys, [full · bs, Hkv, d] rows
      DeviceBuffer<int32_t> dblk;
      dblk.Upload(std::vector<int32_t>(table.begin(), table.begin() + full));
      ASSERT_CUDA_OK(EncodeKeyGroupsCuda(L, pool.layer(0),
                                         KeyGroupArgs{.k = dk.get(), .blocks = dblk.get(), .num_groups = full, .outliers = {}}, nullptr));
    }
    ASSERT_CUDART(cudaDeviceSynchronize());
  }
  // kivi2: the last block, if not full, lives exact in the exact-block table (one slot per KV head),
  // as the CUDA backend stages it.
  const bool staged_tail = L.group_keys() && S % c.bs != 0;
  auto staged = [&](int64_t t) { return staged_tail && t / c.bs == S / c.bs; };
  constexpr int32_t kTableLayers = kLayer + 1;
  DeviceBuffer<int32_t> dslot;
  DeviceBuffer<float> dexact;
  if (L.group_keys()) {
    std::vector<int32_t> slots(L.num_blocks * kTableLayers * c.hkv, -1);
    std::vector<float> cache(std::max<int64_t>(1, c.hkv * 2 * c.bs * kD), NAN);  // rows past the context stay NaN
    if (staged_tail) {
      for (int32_t h = 0; h < c.hkv; ++h) {
        slots[(int64_t{table[S / c.bs]} * kTableLayers + kLayer) * c.hkv + h] = h;
        for (int64_t t = (S / c.bs) * c.bs; t < S; ++t) {
          for (int side = 0; side < 2; ++side) {
            const std::vector<float>& src = side == 0 ? k : v;
            std::copy_n(&src[(t * c.hkv + h) * kD], kD, &cache[((int64_t{h} * 2 + side) * c.bs + t % c.bs) * kD]);
          }
        }
      }
    }
    dslot.Upload(slots);
    dexact.Upload(cache);
  }
  const int64_t out_stride = hq * kD + 8, cert_stride = hq + 3;
  DeviceBuffer<float> dq, dout;
  DeviceBuffer<int32_t> dt;
  DeviceBuffer<meter::CertBound> dc(c.rows * cert_stride);
  dq.Upload(q);
  dt.Upload(table);
  dout.Resize(c.rows * out_stride);
  dout.Fill(0xff);  // NaN poison: every output element must be written
  dc.Fill(0xff);
  MeteredPrefillCudaArgs a;
  a.q = dq.get();
  a.q_stride = q_stride;
  a.num_rows = c.rows;
  a.start_pos = c.start;
  a.block_table = dt.get();
  a.max_blocks = nblk;
  a.num_q_heads = hq;
  a.meter = c.meter;
  a.out = dout.get();
  a.out_stride = out_stride;
  a.cert = dc.get();
  a.cert_row_stride = cert_stride;
  a.layer = kLayer;  // int8-dither's hash (and kivi2's exact table, below)
  a.dither_seed = kSeed;
  a.delta_loc = c.delta;
  a.tier_b_form = c.form;
  if (L.group_keys()) {
    a.exact_slot = dslot.get();
    a.exact_kv = dexact.get();
    a.layer = kLayer;
    a.num_layers = kTableLayers;
  }
  ASSERT_CUDA_OK(MeteredPrefillCuda(L, pool.layer(0), a, nullptr));
  ASSERT_CUDART(cudaDeviceSynchronize());
  const std::vector<float> gout = dout.Download();
  const std::vector<meter::CertBound> gcert = dc.Download();

  // CPU oracle on what the GPU stored (decoded by the CPU codec).
  HostPool hp = HostPool::Download(L, pool.layer(0));
  auto codec_or = FindKvCodec(SchemeInfo(c.scheme).name);
  ASSERT_TRUE(codec_or.ok());
  const KvCodec& codec = **codec_or;
  int failures = 0;
  double worst_out = 0.0, worst_ratio_lo = 1e9, worst_ratio_hi = 0.0;
  for (int32_t h = 0; h < c.hkv; ++h) {
    std::vector<float> ks(S * kD), vs(S * kD), kw(S * kBands), vrho(S), vbound(S), kx(S * kD), vx(S * kD), kds(S);
    for (int64_t t = 0; t < S; ++t) {
      const int64_t vec = (static_cast<int64_t>(table[t / c.bs]) * c.hkv + h) * c.bs + t % c.bs;
      auto ksl = hp.CpuSlot(vec, false), vsl = hp.CpuSlot(vec, true);
      std::copy_n(&k[(t * c.hkv + h) * kD], kD, &kx[t * kD]);
      std::copy_n(&v[(t * c.hkv + h) * kD], kD, &vx[t * kD]);
      if (staged(t)) {  // read exact: no residual, ν = ‖v‖ (rounded up)
        std::copy_n(&kx[t * kD], kD, &ks[t * kD]);
        std::copy_n(&vx[t * kD], kD, &vs[t * kD]);
        std::fill_n(&kw[t * kBands], kBands, 0.0f);
        double n2 = 0.0;
        for (int j = 0; j < kD; ++j) n2 += static_cast<double>(vx[t * kD + j]) * vx[t * kD + j];
        vrho[t] = 0.0f;
        vbound[t] = static_cast<float>(std::sqrt(n2) * (1.0 + 1e-6));
        continue;
      }
      if (L.group_keys()) {
        const std::vector<uint8_t> gp = hp.CpuGroupParams(vec / c.bs);
        codec.DecodeInGroup(ksl.data(), gp.data(), kD, CodecContext{kSeed, kLayer, h, t, false}, &ks[t * kD]);
      } else {
        codec.Decode(ksl.data(), kD, CodecContext{kSeed, kLayer, h, t, false}, &ks[t * kD]);
      }
      codec.ForValues()->Decode(vsl.data(), kD, CodecContext{kSeed, kLayer, h, t, true}, &vs[t * kD]);
      hp.KeyBounds(vec, &kw[t * kBands]);
      hp.ValueSummary(vec, &vrho[t], &vbound[t]);
      kds[t] = codec.DitherScale(ksl.data(), kD);
    }
    for (int64_t i = 0; i < c.rows; ++i) {
      const int64_t ctx = c.start + i + 1;
      MeteredHeadInputs in;
      in.head_dim = kD;
      in.num_bands = kBands;
      in.interleaved = c.interleaved;
      in.num_tokens = ctx;
      in.k = ks.data();
      in.v = vs.data();
      in.k_witness = kw.data();
      in.v_rho = vrho.data();
      in.v_bound = vbound.data();
      in.k_dither_scale = SchemeInfo(c.scheme).tier_b ? kds.data() : nullptr;
      float vmax_abs = 0.0f, kmax = 0.0f;
      for (int64_t t = 0; t < ctx * kD; ++t) vmax_abs = std::max(vmax_abs, std::fabs(vs[t]));
      for (int64_t t = 0; t < ctx; ++t) {
        float kn = 0.0f;
        for (int j = 0; j < kD; ++j) kn += ks[t * kD + j] * ks[t * kD + j];
        kmax = std::max(kmax, kn);
      }
      for (int32_t gq = 0; gq < c.group; ++gq) {
        const int32_t head = h * c.group + gq;
        const float* qr = &q[i * q_stride + head * kD];
        float qn = 0.0f;
        for (int j = 0; j < kD; ++j) qn += qr[j] * qr[j];
        const double lambda = std::sqrt(static_cast<double>(qn) * kmax / kD);
        MeteredAttentionOptions opt;
        opt.num_splits = 1;
        opt.meter = c.meter;
        opt.delta_loc = c.delta;
        opt.tier_b_form = c.form;  // split-max: one split, the kernel's row context
        std::vector<float> out(kD);
        MeteredAttentionResult res;
        MeteredAttention(in, qr, opt, out.data(), &res);
        const double tol = (1e-3 + 8.0 * (kD + 32) * meter::kUnitRoundoff * (1.0 + lambda)) * vmax_abs;
        for (int j = 0; j < kD; ++j) {
          const float go = gout[i * out_stride + head * kD + j];
          worst_out = std::max(worst_out, std::fabs(static_cast<double>(go) - out[j]) / (vmax_abs + 1e-30));
          if (!(std::fabs(go - out[j]) <= tol) && ++failures < 6) {
            ADD_FAILURE() << "out row " << i << " head " << head << " c " << j << ": gpu " << go
                          << " cpu " << out[j] << " tol " << tol;
          }
        }
        if (!c.meter) continue;
        const meter::CertBound& gc = gcert[i * cert_stride + head];
        const meter::CertBound& cc = res.bound;
        const double eta_slack = 8.6 * (kD + 4) * meter::kUnitRoundoff * lambda + 2e-4;
        // Float keys: the tensor-core η (tc_logit_eta.cuh) may exceed the CPU's fp32 one; A − 1 may
        // then sit above the CPU's by e^{2Δη}, squared through (A² − 1)/2 (as in the decode test).
        const double tc_allowance =
            c.scheme == KvScheme::kInt8Rtn ? 1.0
            : L.group_keys()
                ? std::exp(4.0 * testing::Kivi2TensorCoreEtaBound(qr, ks, ctx, kD))
                : std::exp(4.0 * testing::TensorCoreEtaBound(qr, ks, {}, ctx, kD, c.scheme == KvScheme::kBf16,
                                                             c.scheme == KvScheme::kFp8Scaled
                                                                 ? testing::ScaledEta::kPerToken
                                                                 : testing::ScaledEta::kNone));
        auto check = [&](const char* what, double gv, double cv) {
          if (cv > 1e-6) {
            worst_ratio_lo = std::min(worst_ratio_lo, gv / cv);
            worst_ratio_hi = std::max(worst_ratio_hi, gv / cv);
          }
          const bool low = gv < cv * (1.0 - eta_slack);
          const bool high = gv > cv * (c.adversarial ? 1.5 : 1.02) * tc_allowance + 1e-6;
          if ((low || high || std::isnan(gv)) && ++failures < 6) {
            ADD_FAILURE() << what << " row " << i << " head " << head << ": gpu " << gv << " cpu " << cv;
          }
        };
        check("tv", gc.tv, cc.tv);
        check("a_minus_1", gc.a_minus_1, cc.a_minus_1);
        check("v_bound", gc.v_bound, cc.v_bound);
        const auto truth = testing::TrueAttentionError(qr, kx.data(), vx.data(), ks.data(), vs.data(), ctx, kD);
        if (!(static_cast<long double>(gc.tv) >= truth.tv) && ++failures < 6) {
          ADD_FAILURE() << "UNSOUND tv row " << i << " head " << head << ": bound " << gc.tv << " < true "
                        << static_cast<double>(truth.tv);
        }
        if (!(static_cast<long double>(gc.v_bound) >= truth.out_err) && ++failures < 6) {
          ADD_FAILURE() << "UNSOUND value bound row " << i << " head " << head << ": " << gc.v_bound << " < "
                        << static_cast<double>(truth.out_err);
        }
      }
    }
  }
  std::printf("%s: max |Δout|/max|v| %.3g, gpu/cpu bound ratio [%.6f, %.6f]\n", c.Name().c_str(), worst_out,
              worst_ratio_lo, worst_ratio_hi);
  EXPECT_EQ(failures, 0);
}

// Small shapes (also the sanitizer case): one row, a row per vector tile edge, GQA 1/4/7/8.
TEST(MeteredPrefillCuda, SmallMatchesCpu) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (int32_t group : {1, 4, 7}) {
    for (bool meter : {true, false}) {
      PrefillCase c;
      c.group = group;
      c.start = 37;
      c.rows = group == 1 ? 65 : 17;
      c.meter = meter;
      c.seed = 3 + group;
      RunCase(c);
    }
  }
}

// A sweep point: the shape of the pool, the chunk and the inputs.
struct Shape {
  int32_t group, hkv, bs;
  int64_t start, rows;
  float kscale;
  bool interleaved, meter = true, adversarial = false;
};

PrefillCase CaseOf(KvScheme scheme, const Shape& s, uint32_t seed) {
  PrefillCase c;
  c.scheme = scheme;
  c.group = s.group;
  c.hkv = s.hkv;
  c.bs = s.bs;
  c.start = s.start;
  c.rows = s.rows;
  c.key_scale = s.kscale;
  c.interleaved = s.interleaved;
  c.meter = s.meter;
  c.adversarial = s.adversarial;
  c.seed = seed;
  return c;
}

TEST(MeteredPrefillCuda, Sweep) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (Shape s : {Shape{4, 2, 16, 1, 1, 1.0f, true}, Shape{4, 2, 32, 31, 33, 1.0f, false},
                  Shape{8, 1, 16, 300, 100, 1.0f, true}, Shape{2, 3, 8, 64, 64, 4.0f, true},
                  Shape{4, 2, 16, 2000, 130, 1.0f, true}, Shape{4, 8, 16, 500, 48, 8.0f, false}}) {
    RunCase(CaseOf(KvScheme::kInt8Rtn, s, 11 + static_cast<uint32_t>(s.start)));
  }
}

// int8-dither (Tier B at δ_loc 0.01) and int4-rtn, one small chunk each, meter on and off (also
// the sanitizer case).
TEST(MeteredPrefillCuda, IntDigitSchemesSmallMatchesCpu) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (KvScheme scheme : {KvScheme::kInt8Dither, KvScheme::kInt4Rtn}) {
    for (bool meter : {true, false}) {
      PrefillCase c = CaseOf(scheme, Shape{4, 2, 16, 45, 22, 1.0f, true, meter}, 7 + static_cast<uint32_t>(scheme));
      c.delta = scheme == KvScheme::kInt8Dither ? 0.01 : 0.0;
      RunCase(c);
    }
  }
}

// int8-dither: the codes' and the dither bytes' digit dots (IntDigitEtaDither), Tier A alone and
// with Tier B at two δ_loc, adversarial rows too.
TEST(MeteredPrefillCuda, Int8DitherMatchesCpu) {
  WITCERT_SKIP_WITHOUT_GPU();
  struct D { Shape shape; double delta; };
  for (D d : {D{Shape{4, 2, 16, 45, 22, 1.0f, true}, 0.0}, D{Shape{4, 2, 16, 45, 22, 1.0f, true, false}, 0.01},
              D{Shape{1, 2, 16, 5, 65, 1.0f, true}, 0.01}, D{Shape{8, 1, 32, 300, 100, 4.0f, false}, 2e-5},
              D{Shape{4, 2, 16, 1500, 70, 1.0f, true}, 0.01}, D{Shape{4, 2, 16, 200, 40, 6.0f, true, true, true}, 0.01}}) {
    PrefillCase c = CaseOf(KvScheme::kInt8Dither, d.shape, 31 + static_cast<uint32_t>(d.shape.start));
    c.delta = d.delta;
    RunCase(c);
  }
}

// int8-dither in Tier B's scale-only and split-max forms (split-max: one split per row), small
// enough for the sanitizer filter.
TEST(MeteredPrefillCuda, Int8DitherTierBFormsSmallMatchesCpu) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (meter::TierBForm form : {meter::TierBForm::kScaleOnly, meter::TierBForm::kSplitMax}) {
    for (Shape s : {Shape{4, 2, 16, 45, 22, 1.0f, true, false}, Shape{1, 2, 16, 5, 65, 1.0f, true},
                    Shape{4, 2, 16, 200, 40, 6.0f, true, true, true}}) {
      PrefillCase c = CaseOf(KvScheme::kInt8Dither, s, 51 + static_cast<uint32_t>(s.start));
      c.delta = 0.01;
      c.form = form;
      RunCase(c);
    }
  }
}

// int4-rtn: per-group exact digit dots and the group scales (IntDigitEtaInt4).
TEST(MeteredPrefillCuda, Int4MatchesCpu) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (Shape s : {Shape{4, 2, 16, 45, 22, 1.0f, true}, Shape{4, 2, 16, 45, 22, 1.0f, true, false},
                  Shape{1, 2, 16, 5, 65, 1.0f, true}, Shape{8, 1, 32, 300, 100, 4.0f, false},
                  Shape{4, 2, 16, 1500, 70, 1.0f, true}, Shape{4, 2, 16, 200, 40, 6.0f, true, true, true}}) {
    RunCase(CaseOf(KvScheme::kInt4Rtn, s, 41 + static_cast<uint32_t>(s.start)));
  }
}

// Outlier channels, huge value rows, aligned keys, logits in the hundreds: the bound stays sound.
TEST(MeteredPrefillCuda, AdversarialSoundness) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (float kscale : {1.0f, 6.0f}) {
    PrefillCase c;
    c.group = 4;
    c.start = 200;
    c.rows = 40;
    c.key_scale = kscale;
    c.adversarial = true;
    c.seed = 99;
    RunCase(c);
  }
}

constexpr KvScheme kFloatKeySchemes[] = {KvScheme::kFp16, KvScheme::kBf16, KvScheme::kFp8Raw, KvScheme::kFp8Scaled,
                                         KvScheme::kKivi2};

// The tensor-core-logit schemes (16-bit-float keys, kivi2), one small chunk each, meter on and
// off (also the sanitizer case).
TEST(MeteredPrefillCuda, FloatKeysSmallMatchesCpu) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (KvScheme scheme : kFloatKeySchemes) {
    for (bool meter : {true, false}) {
      PrefillCase c;
      c.scheme = scheme;
      c.group = 4;
      c.start = 45;
      c.rows = 22;  // 67 tokens: kivi2's last block (bs 16) is staged
      c.meter = meter;
      c.seed = 5 + static_cast<uint32_t>(scheme);
      RunCase(c);
    }
  }
}

// The tensor-core-logit schemes (fp16, bf16, fp8-e4m3 raw and scaled, kivi2: its last block read
// exact from the exact-block table where it is not full): the same oracle, small and long
// chunks, GQA 1/4/8, both RoPE pairings, meter on and off, and the adversarial inputs.
TEST(MeteredPrefillCuda, FloatKeysMatchCpu) {
  WITCERT_SKIP_WITHOUT_GPU();
  for (KvScheme scheme : kFloatKeySchemes) {
    for (Shape s : {Shape{4, 2, 16, 37, 17, 1.0f, true}, Shape{1, 2, 16, 5, 65, 1.0f, true, false},
                    Shape{8, 1, 32, 300, 100, 4.0f, false}, Shape{4, 2, 16, 1500, 70, 1.0f, true},
                    Shape{4, 2, 16, 200, 40, 6.0f, true, true, true}}) {
      RunCase(CaseOf(scheme, s, 21 + static_cast<uint32_t>(s.start) + static_cast<uint32_t>(scheme)));
    }
  }
}

TEST(MeteredPrefillCuda, RejectsOtherShapes) {
  PagedKvLayout L;
  L.num_kv_heads = 2;
  L.block_size = 16;
  L.head_dim = 128;
  L.num_bands = 8;
  L.scheme = KvScheme::kInt8Rtn;
  EXPECT_TRUE(MeteredPrefillCudaSupports(L, 8));
  EXPECT_FALSE(MeteredPrefillCudaSupports(L, 7));  // Hq not a multiple of Hkv
  for (KvScheme other : {KvScheme::kFp32}) {
    L.scheme = other;
    EXPECT_FALSE(MeteredPrefillCudaSupports(L, 8)) << SchemeInfo(other).name;
  }
  for (KvScheme taken : {KvScheme::kInt8Dither, KvScheme::kInt4Rtn, KvScheme::kFp16, KvScheme::kBf16, KvScheme::kFp8Raw,
                         KvScheme::kFp8Scaled, KvScheme::kKivi2}) {
    L.scheme = taken;
    EXPECT_TRUE(MeteredPrefillCudaSupports(L, 8)) << SchemeInfo(taken).name;
  }
  L.outlier_channels = 4;
  EXPECT_FALSE(MeteredPrefillCudaSupports(L, 8));  // the bypass's exact channels: decode path
  L.outlier_channels = 0;
  L.scheme = KvScheme::kInt8Rtn;
  L.head_dim = 64;
  EXPECT_FALSE(MeteredPrefillCudaSupports(L, 8));
  L.head_dim = 128;
  L.block_size = 4;
  EXPECT_FALSE(MeteredPrefillCudaSupports(L, 8));
  L.block_size = 16;
  MeteredPrefillCudaArgs a;
  a.num_q_heads = 8;
  a.num_rows = 4;
  a.start_pos = 10;
  EXPECT_FALSE(MeteredPrefillCuda(L, PagedKvLayer{}, a, nullptr).ok);  // null pointers
  // The exact-block table: required with kivi2, refused with any other scheme.
  float dummy[4] = {};
  int32_t table[4] = {};
  a.q = a.out = dummy;
  a.block_table = table;
  a.max_blocks = 4;
  a.meter = false;
  a.exact_slot = table;
  a.exact_kv = dummy;
  a.num_layers = 1;
  const CudaStatus with_table = MeteredPrefillCuda(L, PagedKvLayer{}, a, nullptr);
  EXPECT_FALSE(with_table.ok);
  EXPECT_NE(with_table.message.find("exact-block table"), std::string::npos) << with_table.message;
  L.scheme = KvScheme::kKivi2;
  a.exact_slot = nullptr;
  const CudaStatus without = MeteredPrefillCuda(L, PagedKvLayer{}, a, nullptr);
  EXPECT_FALSE(without.ok);
  EXPECT_NE(without.message.find("exact-block table"), std::string::npos) << without.message;
}

}  // namespace
}  // namespace witcert
