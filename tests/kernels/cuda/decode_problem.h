// The metered decode kernel's test harness (tests/kernels/cuda/metered_decode_cuda_test.cc): a
// DecodeCase names one problem (scheme, shapes, contexts, splits, meter, Tier B form, outliers,
// promoted blocks); Problem builds its keys, values and queries, writes them through the GPU write
// path into a paged pool, runs MeteredDecodeCuda and checks the outputs and certificates against
// the CPU reference and the long-double truth, with the tolerances below.
//
// Tolerances (why):
//  * outputs: both sides compute the same fp32 function in different summation orders. A
//    logit carries a rounding of ≤ (d+4)u·Σ|q k̃|/√d ≤ (d+4)u·Λ (Λ = max_t |q|·|k̃_t|/√d), so
//    each weight e^{ℓ−m} and z move by a relative ≤ 2(d+4)u·Λ plus the sums' γ; the output,
//    a convex combination of ṽ, then moves by ≤ that relative amount times max|ṽ|. We allow
//    4× that: |Δo_c| ≤ 8(d+32)u·(1+Λ)·max_t‖ṽ_t‖_∞.
//  * certificate: both sides are sound upper bounds; the GPU may be lower than the CPU only by
//    its shallower merge tree ((1+κ)^P, metered_decode_cuda.cu) and by the two sides' own
//    fp32 roundings of ε̂ (~B+d/B ulps): gpu ≥ cpu·(1 − 2.2·P·κ − 2e-4) (SumInflation's
//    (1+θ)/(1−θ) doubles θ, and θ holds one κ per merge). It must not be
//    much looser either (η and ‖q‖₂ are bounded a little more coarsely): gpu ≤ cpu·1.02 + 1e-6
//    on random inputs; on adversarial ones (outlier channels, logits in the hundreds) the
//    kernel's per-lane η bound (metered_decode_cuda.cu) can be several times the per-token η,
//    and e^{2η} then loosens the bound by up to ~30%: allowed ≤ 1.5×. The pipelined kernel's
//    η is the Cauchy–Schwarz form (certificates.md), so its upper tolerance also carries
//    e^{4Δη} for that form's excess over the CPU's η (EtaCauchySchwarzExcess).
//  * soundness: the GPU TV bound ≥ the true TV, and ‖o − õ‖ ≤ value bound, exactly (no slack).
//  * promoted blocks (exact_every > 0): the GPU reads them from an exact-block cache, the CPU
//    gets the same rows as exact tokens (token_exact = 1); the same tolerances apply.
#pragma once

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
#include "tests/kernels/cuda/late_copy_cuda.h"
#include "tests/kernels/cuda/tc_eta_bound.h"
#include "tests/kernels/meter/long_double_reference.h"

namespace witcert::testing {


// How far the pipelined kernel's η (the Cauchy–Schwarz form over 8-channel lanes,
// certificates.md) may exceed the CPU's per-token one for a cell: EtaFactor(d)/√d times
// Σ_lanes ‖q_lane‖·max_t ‖k̃_t,lane‖ − max_t Σ_c |q_c k̃_t,c| over the non-exact rows, in double
// (≥ 0). Only the upper tolerance uses it; the lower one and the truth checks do not.
// with_exact: the exact rows count too (the pipelined kernel's kivi2 path reads them in its
// lanes' maxima); the larger of the two is the allowance.
inline double EtaCauchySchwarzExcess(const float* q, const std::vector<float>& k, const std::vector<uint8_t>& exact,
                              int64_t S, int32_t d, bool with_exact = true) {
  if (with_exact) return std::max(EtaCauchySchwarzExcess(q, k, exact, S, d, false),
                                  EtaCauchySchwarzExcess(q, k, std::vector<uint8_t>(S, 0), S, d, false));
  double per_token = 0.0, cs = 0.0;
  std::vector<double> lane_max(d / 8, 0.0);
  for (int64_t t = 0; t < S; ++t) {
    if (exact[t]) continue;
    double s = 0.0;
    for (int32_t c = 0; c < d; ++c) s += std::fabs(static_cast<double>(q[c]) * k[t * d + c]);
    per_token = std::max(per_token, s);
    for (int32_t l = 0; l < d / 8; ++l) {
      double n = 0.0;
      for (int32_t c = 8 * l; c < 8 * l + 8; ++c) n += static_cast<double>(k[t * d + c]) * k[t * d + c];
      lane_max[l] = std::max(lane_max[l], std::sqrt(n));
    }
  }
  for (int32_t l = 0; l < d / 8; ++l) {
    double n = 0.0;
    for (int32_t c = 8 * l; c < 8 * l + 8; ++c) n += static_cast<double>(q[c]) * q[c];
    cs += std::sqrt(n) * lane_max[l];
  }
  return meter::EtaFactor(d) * std::max(0.0, cs - per_token) / std::sqrt(static_cast<double>(d));
}

struct DecodeCase {
  KvScheme scheme = KvScheme::kInt8Rtn;
  int32_t d = 64, group = 4, hkv = 2, bs = 16;
  int32_t bands = 8;            // witness bands B
  std::vector<int64_t> ctx = {37};
  int32_t splits = 0;           // 0: heuristic
  bool meter = true;
  double delta = 0.0;           // Tier B δ_loc
  meter::TierBForm form = meter::TierBForm::kPerToken;  // MeteredDecodeCudaArgs::tier_b_form (CPU: the kernel's cuts)
  float key_scale = 1.0f;       // logit magnitude
  bool adversarial = false;     // outliers, huge rows, aligned keys
  bool interleaved = true;
  bool check_truth = true;      // long-double TV / output error
  int32_t kernel = 0;           // MeteredDecodeCudaArgs::kernel (1: the first kernel)
  int32_t outliers = 0;         // m: outlier channel bypass (tables chosen from seq 0's first block)
  bool poison_pool = false;     // pool codes set to 0xff (NaN as fp16) before the write: slots
                                // past a context then hold NaN, which no kernel may let through
  int32_t exact_every = 0;      // > 0: (seq, logical block, KV head) units with (b+j+h) % k == 0
                                // are promoted: read exact from the exact-block cache
  uint32_t seed = 1;
  std::string Name() const {
    std::string s = std::string(SchemeInfo(scheme).name) + " d=" + std::to_string(d) +
                    " G=" + std::to_string(group) + " Hkv=" + std::to_string(hkv) +
                    " bs=" + std::to_string(bs) + " B=" + std::to_string(bands) +
                    " splits=" + std::to_string(splits) +
                    (meter ? " meter" : " nometer") + " " + meter::TierBFormName(form) +
                    (exact_every > 0 ? " exact_every=" + std::to_string(exact_every) : "") +
                    (outliers > 0 ? " outliers=" + std::to_string(outliers) : "") + " ctx=";
    for (auto c : ctx) s += std::to_string(c) + ",";
    return s;
  }
};

struct DecodeOutcome {
  int32_t splits = 0;
  std::vector<float> out;             // [batch, Hq, d]
  std::vector<meter::CertBound> cert; // [batch, Hq]
};

class Problem {
 public:
  explicit Problem(const DecodeCase& c) : c_(c) {
    std::mt19937 rng(c.seed * 7919 + c.d + 31 * c.group);
    std::normal_distribution<float> g(0.0f, 1.0f);
    const int64_t batch = c.ctx.size(), hq = c.hkv * c.group;
    max_ctx_ = *std::max_element(c.ctx.begin(), c.ctx.end());
    max_blocks_ = static_cast<int32_t>((max_ctx_ + c.bs - 1) / c.bs);
    int64_t total_blocks = 0;
    for (auto s : c.ctx) total_blocks += (s + c.bs - 1) / c.bs;
    L_.num_blocks = total_blocks + 5;
    L_.num_kv_heads = c.hkv;
    L_.block_size = c.bs;
    L_.head_dim = c.d;
    L_.num_bands = c.bands;
    L_.interleaved = c.interleaved;
    L_.scheme = c.scheme;
    L_.outlier_channels = c.outliers;
    // Non-contiguous block tables: a shuffled permutation of the pool.
    std::vector<int32_t> perm(L_.num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    tables_.assign(batch * max_blocks_, 0);
    int64_t next = 0;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t j = 0; j < (c.ctx[b] + c.bs - 1) / c.bs; ++j) tables_[b * max_blocks_ + j] = perm[next++];
    }
    q_.resize(batch * hq * c.d);
    for (auto& x : q_) x = g(rng);
    if (c.adversarial) {
      for (int64_t i = 0; i < batch * hq; ++i) q_[i * c.d + (i * 5) % c.d] *= 30.0f;  // outlier channel
    }
    k_.resize(batch);
    v_.resize(batch);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t n = c.ctx[b] * c.hkv * c.d;
      k_[b].resize(n);
      v_[b].resize(n);
      for (auto& x : k_[b]) x = g(rng) * c.key_scale;
      for (auto& x : v_[b]) x = g(rng);
      if (!c.adversarial) continue;
      for (int64_t t = 0; t < c.ctx[b]; ++t) {
        for (int32_t h = 0; h < c.hkv; ++h) {
          float* kr = &k_[b][(t * c.hkv + h) * c.d];
          float* vr = &v_[b][(t * c.hkv + h) * c.d];
          switch ((t + h) % 11) {
            case 0:  // key aligned with the group's first query: a dominant, error-sensitive logit
              for (int i = 0; i < c.d; ++i) kr[i] = q_[((b * hq) + h * c.group) * c.d + i] * c.key_scale * 0.5f;
              break;
            case 1: kr[(t * 3) % c.d] *= 200.0f; break;        // outlier channel (coarse scale)
            case 2: for (int i = 0; i < c.d; ++i) vr[i] *= 1e3f; break;  // huge value row
            case 3: for (int i = 0; i < c.d; ++i) kr[i] *= 1e-3f; break;
            default: break;
          }
        }
      }
    }
  }

  // Read exact: a promoted unit, or (group-keyed schemes) a block not yet full, whose keys
  // are not encoded (the CPU cache reads such a block exact too).
  // Outlier tables from the CPU's rule on sequence 0's first (up to) block_size rows.
  void ChooseOutliers() {
    if (L_.outliers() == 0) return;
    oc_ = std::make_unique<OutlierChannels>(1, c_.hkv, c_.d, L_.outliers());
    oc_->ChooseOnce(0, k_[0].data(), v_[0].data(), static_cast<int32_t>(std::min<int64_t>(c_.bs, c_.ctx[0])));
    tables_dev_.Upload(*oc_, c_.hkv, c_.d);
  }

  bool Exact(int64_t b, int64_t logical, int32_t h) const {
    if (L_.group_keys() && (logical + 1) * c_.bs > c_.ctx[b]) return true;
    return c_.exact_every > 0 && (b + logical + h) % c_.exact_every == 0;
  }
  bool AnyExact() const {
    for (int64_t b = 0; b < static_cast<int64_t>(c_.ctx.size()); ++b) {
      for (int64_t j = 0; j * c_.bs < c_.ctx[b]; ++j) {
        for (int32_t h = 0; h < c_.hkv; ++h) {
          if (Exact(b, j, h)) return true;
        }
      }
    }
    return false;
  }

  // The case's decode arguments over device q, block tables and context lengths (no outputs yet).
  MeteredDecodeCudaArgs CaseArgs(const float* q, const int32_t* tables, const int32_t* lens) const {
    MeteredDecodeCudaArgs a;
    a.q = q;
    a.block_tables = tables;
    a.context_lens = lens;
    a.batch = static_cast<int32_t>(c_.ctx.size());
    a.num_q_heads = c_.hkv * c_.group;
    a.max_blocks_per_seq = max_blocks_;
    a.max_context = max_ctx_;
    a.layer = kLayer;
    a.dither_seed = kSeed;
    a.delta_loc = c_.delta;
    a.tier_b_form = c_.form;
    a.meter = c_.meter;
    a.num_splits = c_.splits;
    a.kernel = c_.kernel;
    return a;
  }

  // GPU: write every token, then decode.
  void RunGpu(DecodeOutcome* r) {
    const int64_t batch = c_.ctx.size(), hq = c_.hkv * c_.group;
    ASSERT_CUDA_OK(pool_.Init(L_, 1));
    if (c_.poison_pool) {
      const size_t code_bytes = static_cast<size_t>(L_.num_blocks) * c_.hkv * c_.bs * L_.code_bytes();
      ASSERT_EQ(cudaMemset(pool_.layer(0).k_codes, 0xff, code_bytes), cudaSuccess);
      ASSERT_EQ(cudaMemset(pool_.layer(0).v_codes, 0xff, code_bytes), cudaSuccess);
    }
    ChooseOutliers();
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<int64_t> slots(c_.ctx[b]), pos(c_.ctx[b]);
      for (int64_t t = 0; t < c_.ctx[b]; ++t) {
        slots[t] = static_cast<int64_t>(tables_[b * max_blocks_ + t / c_.bs]) * c_.bs + t % c_.bs;
        pos[t] = t;
      }
      DeviceBuffer<float> dk, dv;
      DeviceBuffer<int64_t> ds, dp;
      dk.Upload(k_[b]);
      dv.Upload(v_[b]);
      ds.Upload(slots);
      dp.Upload(pos);
      KvWriteArgs a{dk.get(), dv.get(), ds.get(), dp.get(), c_.ctx[b], kLayer, kSeed, tables_dev_.view()};
      ASSERT_CUDA_OK(WriteKvCuda(L_, pool_.layer(0), a, nullptr));
      const int32_t full = static_cast<int32_t>(c_.ctx[b] / c_.bs);
      if (L_.group_keys() && full > 0) {  // the sequence's full blocks: [full · bs, Hkv, d] rows
        DeviceBuffer<int32_t> dblk;
        dblk.Upload(std::vector<int32_t>(tables_.begin() + b * max_blocks_, tables_.begin() + b * max_blocks_ + full));
        ASSERT_CUDA_OK(EncodeKeyGroupsCuda(L_, pool_.layer(0), KeyGroupArgs{.k = dk.get(), .blocks = dblk.get(), .num_groups = full, .outliers = tables_dev_.view()},
                                           nullptr));
        ASSERT_CUDART(cudaDeviceSynchronize());
      }
      ASSERT_CUDART(cudaDeviceSynchronize());
    }
    DeviceBuffer<float> dq, dout;
    DeviceBuffer<int32_t> dt, dl;
    DeviceBuffer<meter::CertBound> dc(batch * hq);
    dq.Upload(q_);
    dt.Upload(tables_);
    std::vector<int32_t> lens(c_.ctx.begin(), c_.ctx.end());
    dl.Upload(lens);
    dout.Resize(batch * hq * c_.d);
    dout.Fill(0xff);  // NaN poison: every element must be written
    dc.Fill(0xff);
    MeteredDecodeCudaArgs a = CaseArgs(dq.get(), dt.get(), dl.get());
    a.out = dout.get();
    a.cert = dc.get();
    a.outlier_channels = tables_dev_.channels.get();
    // Promoted units: the exact rows in cache slots, listed in the (block, layer, head) table.
    DeviceBuffer<int32_t> dslot;
    DeviceBuffer<float> dexact;
    if (AnyExact()) {
      const int32_t nl = kLayer + 1;
      std::vector<int32_t> table(L_.num_blocks * nl * c_.hkv, -1);
      std::vector<float> cache;
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t j = 0; j < (c_.ctx[b] + c_.bs - 1) / c_.bs; ++j) {
          for (int32_t h = 0; h < c_.hkv; ++h) {
            if (!Exact(b, j, h)) continue;
            const int32_t slot = static_cast<int32_t>(cache.size() / (2 * c_.bs * c_.d));
            cache.resize(cache.size() + 2 * c_.bs * c_.d, NAN);  // rows past the context stay NaN
            for (int64_t t = j * c_.bs; t < std::min<int64_t>(c_.ctx[b], (j + 1) * c_.bs); ++t) {
              for (int side = 0; side < 2; ++side) {
                const std::vector<float>& src = side == 0 ? k_[b] : v_[b];
                std::copy_n(&src[(t * c_.hkv + h) * c_.d], c_.d,
                            &cache[((int64_t{slot} * 2 + side) * c_.bs + t % c_.bs) * c_.d]);
              }
            }
            table[(int64_t{tables_[b * max_blocks_ + j]} * nl + kLayer) * c_.hkv + h] = slot;
          }
        }
      }
      dslot.Upload(table);
      dexact.Upload(cache.empty() ? std::vector<float>(1) : cache);
      a.exact_slot = dslot.get();
      a.exact_kv = dexact.get();
      a.num_layers = nl;
    }
    ASSERT_CUDA_OK(ResolveNumSplits(L_, a, &r->splits));
    DeviceBuffer<uint8_t> ws(MeteredDecodeWorkspaceBytes(a.batch, a.num_q_heads, c_.d, r->splits));
    a.workspace = ws.get();
    a.workspace_bytes = ws.size();
    DeviceBuffer<float> dnorm(batch * hq), dnorm_ref(batch * hq);
    DeviceBuffer<uint16_t> dbf(batch * hq * c_.d), dbf_ref(batch * hq * c_.d);
    dbf.Fill(0xff);  // poison: every element must be written
    a.out_norm = dnorm.get();
    a.out_bf16 = dbf.get();
    ASSERT_CUDA_OK(MeteredDecodeCuda(L_, pool_.layer(0), a, nullptr));
    ASSERT_CUDART(cudaDeviceSynchronize());
    r->out = dout.Download();
    r->cert = dc.Download();
    // The merge kernel's ‖out‖ is RowNormsCuda's, bit for bit.
    ASSERT_CUDA_OK(RowNormsCuda(dout.get(), batch * hq, c_.d, dnorm_ref.get(), nullptr));
    ASSERT_CUDART(cudaDeviceSynchronize());
    const std::vector<float> norm = dnorm.Download(), norm_ref = dnorm_ref.Download();
    ASSERT_EQ(std::memcmp(norm.data(), norm_ref.data(), norm.size() * sizeof(float)), 0);
    // So is its bf16 copy FloatToBf16Cuda's.
    ASSERT_CUDA_OK(FloatToBf16Cuda(dout.get(), batch * hq * c_.d, dbf_ref.get(), nullptr));
    ASSERT_CUDART(cudaDeviceSynchronize());
    ASSERT_EQ(dbf.Download(), dbf_ref.Download());
  }

  // The decode launched to overlap the kernel before it (overlap_previous), as the engine's
  // decode step launches it behind the KV write: every sequence's context but its newest token is
  // in the pool; then a late kernel (0.2 ms) copies q into place, the write of the newest tokens
  // follows as a programmatic dependent launch, and the decode as another. A split that read q or
  // the newest token before its wait would see NaN poison or an unwritten slot. The outputs and
  // certificates must equal, bit for bit, the ordinary launch's on the finished pool.
  void CheckOverlapWithWrite() {
    const int64_t batch = c_.ctx.size(), hq = c_.hkv * c_.group;
    ASSERT_CUDA_OK(pool_.Init(L_, 1));
    const int64_t row = int64_t{c_.hkv} * c_.d;
    std::vector<float> k_new(batch * row), v_new(batch * row);
    std::vector<int64_t> slot_new(batch), pos_new(batch);
    auto slot_of = [&](int64_t b, int64_t t) {
      return static_cast<int64_t>(tables_[b * max_blocks_ + t / c_.bs]) * c_.bs + t % c_.bs;
    };
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t older = c_.ctx[b] - 1;
      std::copy_n(&k_[b][older * row], row, &k_new[b * row]);
      std::copy_n(&v_[b][older * row], row, &v_new[b * row]);
      slot_new[b] = slot_of(b, older);
      pos_new[b] = older;
      if (older == 0) continue;
      std::vector<int64_t> slots(older), pos(older);
      for (int64_t t = 0; t < older; ++t) {
        slots[t] = slot_of(b, t);
        pos[t] = t;
      }
      DeviceBuffer<float> dk, dv;
      DeviceBuffer<int64_t> ds, dp;
      dk.Upload(std::vector<float>(k_[b].begin(), k_[b].begin() + older * row));
      dv.Upload(std::vector<float>(v_[b].begin(), v_[b].begin() + older * row));
      ds.Upload(slots);
      dp.Upload(pos);
      ASSERT_CUDA_OK(WriteKvCuda(L_, pool_.layer(0), KvWriteArgs{dk.get(), dv.get(), ds.get(), dp.get(), older,
                                                                  kLayer, kSeed, {}},
                                 nullptr));
      ASSERT_CUDART(cudaDeviceSynchronize());
    }
    DeviceBuffer<float> dq_src, dq(q_.size()), dk_new, dv_new;
    DeviceBuffer<int64_t> ds_new, dp_new;
    dq_src.Upload(q_);
    dq.Fill(0xff);  // NaN until the late copy
    dk_new.Upload(k_new);
    dv_new.Upload(v_new);
    ds_new.Upload(slot_new);
    dp_new.Upload(pos_new);
    DeviceBuffer<int32_t> dt, dl;
    dt.Upload(tables_);
    dl.Upload(std::vector<int32_t>(c_.ctx.begin(), c_.ctx.end()));
    MeteredDecodeCudaArgs a = CaseArgs(dq.get(), dt.get(), dl.get());
    int32_t splits = 0;
    ASSERT_CUDA_OK(ResolveNumSplits(L_, a, &splits));
    DeviceBuffer<uint8_t> ws(MeteredDecodeWorkspaceBytes(a.batch, a.num_q_heads, c_.d, splits));
    a.workspace = ws.get();
    a.workspace_bytes = ws.size();
    DeviceBuffer<float> out[2], norm[2];
    DeviceBuffer<meter::CertBound> cert[2];
    for (int i = 0; i < 2; ++i) {
      out[i].Resize(batch * hq * c_.d);
      out[i].Fill(0xff);
      norm[i].Resize(batch * hq);
      cert[i].Resize(batch * hq);
      cert[i].Fill(0xff);
    }
    cudaStream_t stream;
    ASSERT_CUDART(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ASSERT_CUDA_OK(testing::LateCopyCuda(dq_src.get(), dq.get(), q_.size() * sizeof(float), 200'000, stream));
    ASSERT_CUDA_OK(WriteKvCuda(L_, pool_.layer(0), KvWriteArgs{dk_new.get(), dv_new.get(), ds_new.get(),
                                                                dp_new.get(), batch, kLayer, kSeed, {}},
                               stream));
    for (int i = 0; i < 2; ++i) {  // overlapped, then the ordinary launch on the finished pool
      a.overlap_previous = i == 0;
      a.out = out[i].get();
      a.cert = cert[i].get();
      a.out_norm = norm[i].get();
      ASSERT_CUDA_OK(MeteredDecodeCuda(L_, pool_.layer(0), a, stream));
    }
    ASSERT_CUDART(cudaStreamSynchronize(stream));
    ASSERT_CUDART(cudaStreamDestroy(stream));
    const std::vector<float> o0 = out[0].Download(), o1 = out[1].Download();
    const std::vector<float> n0 = norm[0].Download(), n1 = norm[1].Download();
    const std::vector<meter::CertBound> c0 = cert[0].Download(), c1 = cert[1].Download();
    EXPECT_FALSE(std::isnan(o1[0]));  // the reference itself read q
    EXPECT_EQ(std::memcmp(o0.data(), o1.data(), o0.size() * sizeof(float)), 0) << "outputs";
    EXPECT_EQ(std::memcmp(n0.data(), n1.data(), n0.size() * sizeof(float)), 0) << "output norms";
    if (c_.meter) {
      EXPECT_EQ(std::memcmp(c0.data(), c1.data(), c0.size() * sizeof(meter::CertBound)), 0) << "certificates";
    }
  }

  // CPU oracle on the rows the GPU stored (decoded by the CPU codec), same split count.
  void CheckAgainstCpu(const DecodeOutcome& g) {
    const int64_t batch = c_.ctx.size(), hq = c_.hkv * c_.group;
    const int32_t d = c_.d, nb = L_.num_bands;
    HostPool hp = HostPool::Download(L_, pool_.layer(0));
    auto codec_or = FindKvCodec(SchemeInfo(c_.scheme).name);
    ASSERT_TRUE(codec_or.ok());
    const KvCodec& codec = **codec_or;
    const KvCodec& value_codec = *codec.ForValues();
    // SumInflation's (1+θ)/(1−θ) counts each of the CPU's P−1 merges twice.
    const double kappa_slack = 2.2 * g.splits * meter::kKappa + 2e-4;
    // The tensor-core kernel's logits are exact integer dots (int_digit_dot.h): its η can be far
    // below the CPU's fp32 η, so its bound may undercut the CPU's by up to e^{-4η_cpu}.
    const bool mma = TensorCoreDecodeSupports(L_, c_.group) && (c_.kernel == 0 || c_.kernel == 3) &&
                     c_.exact_every == 0;
    // The pipelined kernel's fp16 / bf16 / fp8-e4m3 logits at d = 128 come from tensor cores (tc_logit_eta.cuh):
    // η is the model's, coarser than the CPU's, and the logits differ from the CPU's either way, so
    // the bound may undercut the CPU's by e^{-4η_cpu} (as the int8 kernel's) and exceed it by
    // e^{4η_gpu}.
    const bool tc_logits = (c_.scheme == KvScheme::kFp16 || c_.scheme == KvScheme::kBf16 ||
                            c_.scheme == KvScheme::kFp8Raw || c_.scheme == KvScheme::kFp8Scaled) && d == 128 &&
                           (c_.kernel == 0 || c_.kernel == 2) && c_.exact_every == 0 && c_.bs >= 8 &&
                           c_.outliers == 0;
    const bool kivi2_tc = c_.scheme == KvScheme::kKivi2 && d == 128 && c_.kernel != 1 && c_.outliers == 0;
    int failures = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t S = c_.ctx[b];
      for (int32_t h = 0; h < c_.hkv; ++h) {
        std::vector<float> ks(S * d), vs(S * d), kw(S * nb), vrho(S), vbound(S), kds(S);
        std::vector<uint8_t> exact(S, 0);
        for (int64_t t = 0; t < S; ++t) {
          const int64_t vec = (static_cast<int64_t>(tables_[b * max_blocks_ + t / c_.bs]) * c_.hkv + h) * c_.bs + t % c_.bs;
          auto ksl = hp.CpuSlot(vec, false), vsl = hp.CpuSlot(vec, true);
          if (L_.group_keys()) {
            const std::vector<uint8_t> gp = hp.CpuGroupParams(vec / c_.bs);
            codec.DecodeInGroup(ksl.data(), gp.data(), d, CodecContext{kSeed, kLayer, h, t, false}, &ks[t * d]);
          } else {
            codec.Decode(ksl.data(), d, CodecContext{kSeed, kLayer, h, t, false}, &ks[t * d]);
          }
          value_codec.Decode(vsl.data(), d, CodecContext{kSeed, kLayer, h, t, true}, &vs[t * d]);
          for (int32_t j = 0; oc_ != nullptr && j < oc_->count(); ++j) {  // the exact channels back
            ks[t * d + oc_->channels(0, h, false)[j]] = hp.Outliers(vec, false)[j];
            vs[t * d + oc_->channels(0, h, true)[j]] = hp.Outliers(vec, true)[j];
          }
          kds[t] = codec.DitherScale(ksl.data(), d);
          if (Exact(b, t / c_.bs, h)) {  // promoted: the exact rows, no witness
            exact[t] = 1;
            std::copy_n(&k_[b][(t * c_.hkv + h) * d], d, &ks[t * d]);
            std::copy_n(&v_[b][(t * c_.hkv + h) * d], d, &vs[t * d]);
            if (L_.has_witness()) std::fill_n(&kw[t * nb], nb, 0.0f);  // ρ, ν: not read on exact rows
            continue;
          }
          if (L_.has_witness()) {
            hp.KeyBounds(vec, &kw[t * nb]);
            hp.ValueSummary(vec, &vrho[t], &vbound[t]);
          }
        }
        MeteredHeadInputs in;
        in.head_dim = d;
        in.num_bands = nb;
        in.interleaved = c_.interleaved;
        in.num_tokens = S;
        in.k = ks.data();
        in.v = vs.data();
        in.k_witness = L_.has_witness() ? kw.data() : nullptr;
        in.v_rho = L_.has_witness() ? vrho.data() : nullptr;
        in.v_bound = L_.has_witness() ? vbound.data() : nullptr;
        in.k_dither_scale = SchemeInfo(c_.scheme).tier_b ? kds.data() : nullptr;
        in.token_exact = exact.data();
        float vmax_abs = 0.0f;
        for (float x : vs) vmax_abs = std::max(vmax_abs, std::fabs(x));
        for (int32_t gq = 0; gq < c_.group; ++gq) {
          const int64_t cell = b * hq + h * c_.group + gq;
          const float* q = &q_[cell * d];
          float qn = 0.0f, kmax = 0.0f;
          for (int i = 0; i < d; ++i) qn += q[i] * q[i];
          for (int64_t t = 0; t < S; ++t) {
            float kn = 0.0f;
            for (int i = 0; i < d; ++i) kn += ks[t * d + i] * ks[t * d + i];
            kmax = std::max(kmax, kn);
          }
          const double lambda = std::sqrt(static_cast<double>(qn) * kmax / d);
          MeteredAttentionOptions opt;
          opt.num_splits = g.splits;
          opt.meter = c_.meter;
          opt.delta_loc = c_.delta;
          if (mma) {  // the other kernels keep the per-token form
            opt.tier_b_form = c_.form;
            if (c_.form == meter::TierBForm::kSplitMax) opt.split_tokens = SplitTokens(S, g.splits);  // the bound depends on the cut
          }
          std::vector<float> out(d);
          MeteredAttentionResult res;
          MeteredAttention(in, q, opt, out.data(), &res);
          const double tol = 8.0 * (d + 32) * meter::kUnitRoundoff * (1.0 + lambda) * vmax_abs + 1e-30;
          for (int i = 0; i < d; ++i) {
            const float go = g.out[cell * d + i];
            if (!(std::fabs(go - out[i]) <= tol) && ++failures < 6) {
              ADD_FAILURE() << "out mismatch seq " << b << " head " << cell % hq << " c " << i
                            << ": gpu " << go << " cpu " << out[i] << " tol " << tol;
            }
          }
          if (!c_.meter) continue;
          const meter::CertBound& gc = g.cert[cell];
          const meter::CertBound& cc = res.bound;
          const double eta_slack = mma || tc_logits ? 8.6 * (d + 4) * meter::kUnitRoundoff * lambda : 0.0;
          // The pipelined kernel's η is the Cauchy–Schwarz form (certificates.md): the GPU may
          // sit above the CPU by e^{2Δη} on A − 1, squared through (A² − 1)/2.
          const double cs_allowance =
              mma ? 1.0
                  : std::exp(4.0 * (tc_logits ? testing::TensorCoreEtaBound(q, ks, exact, S, d, c_.scheme == KvScheme::kBf16,
                                                                            c_.scheme == KvScheme::kFp8Scaled
                                                                                ? testing::ScaledEta::kCodeBound
                                                                                : testing::ScaledEta::kNone)
                                    : kivi2_tc ? std::max(EtaCauchySchwarzExcess(q, ks, exact, S, d),
                                                          testing::Kivi2TensorCoreEtaBound(q, ks, S, d))
                                               : EtaCauchySchwarzExcess(q, ks, exact, S, d)));
          auto check = [&](const char* what, double gv, double cv) {
            const bool low = gv < cv * (1.0 - kappa_slack - eta_slack);
            const bool high = gv > cv * (c_.adversarial ? 1.5 : 1.02) * cs_allowance + 1e-6;
            if ((low || high || std::isnan(gv)) && ++failures < 6) {
              ADD_FAILURE() << what << " seq " << b << " head " << cell % hq << ": gpu " << gv
                            << " cpu " << cv << " (tanh form gpu " << gc.tv_tanh_form << " cpu "
                            << cc.tv_tanh_form << ", resid sum gpu " << gc.v_resid_sum << " cpu "
                            << cc.v_resid_sum << ")";
            }
          };
          check("tv", gc.tv, cc.tv);
          check("a_minus_1", gc.a_minus_1, cc.a_minus_1);
          check("v_bound", gc.v_bound, cc.v_bound);
          if (!c_.check_truth || !L_.has_witness()) continue;
          std::vector<float> kx(S * d), vx(S * d);  // exact rows of this head
          for (int64_t t = 0; t < S; ++t) {
            std::copy_n(&k_[b][(t * c_.hkv + h) * d], d, &kx[t * d]);
            std::copy_n(&v_[b][(t * c_.hkv + h) * d], d, &vx[t * d]);
          }
          auto truth = testing::TrueAttentionError(q, kx.data(), vx.data(), ks.data(), vs.data(), S, d);
          // TV ≤ 1 by definition; the long-double sum of a near-disjoint pair can round past it.
          const long double true_tv = std::min<long double>(truth.tv, 1.0L);
          if (!(static_cast<long double>(gc.tv) >= true_tv) && ++failures < 6) {
            ADD_FAILURE() << "UNSOUND tv: bound " << gc.tv << " < true " << static_cast<double>(truth.tv)
                          << " (true − 1 = " << static_cast<double>(truth.tv - 1.0L) << ")";
          }
          if (!(static_cast<long double>(gc.v_bound) >= truth.out_err) && ++failures < 6) {
            ADD_FAILURE() << "UNSOUND value bound " << gc.v_bound << " < " << static_cast<double>(truth.out_err);
          }
        }
      }
    }
    EXPECT_EQ(failures, 0);
  }

 private:
  static constexpr int32_t kLayer = 5;
  static constexpr uint64_t kSeed = 0xC0FFEEULL;
  DecodeCase c_;
  PagedKvLayout L_;
  PagedKvPoolCuda pool_;
  int64_t max_ctx_ = 0;
  int32_t max_blocks_ = 0;
  std::vector<int32_t> tables_;             // [batch, max_blocks]
  std::vector<float> q_;                    // [batch, Hq, d]
  std::vector<std::vector<float>> k_, v_;   // per seq [S, Hkv, d] exact
  std::unique_ptr<OutlierChannels> oc_;     // outlier channels (c.outliers > 0)
  testing::DeviceOutlierTables tables_dev_;
};

inline void RunCase(const DecodeCase& c, DecodeOutcome* keep = nullptr) {
  SCOPED_TRACE(c.Name());
  Problem p(c);
  DecodeOutcome g;
  p.RunGpu(&g);
  if (::testing::Test::HasFatalFailure()) return;
  p.CheckAgainstCpu(g);
  if (keep != nullptr) *keep = g;
}

}  // namespace witcert::testing
