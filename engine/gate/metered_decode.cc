#include "engine/gate/metered_decode.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cert/audit.h"
#include "engine/common/status.h"
#include "kernels/cpu/metered_attention.h"
#include "kernels/cpu/parallel.h"
#include "kernels/meter/partial_sum.h"

namespace witcert {
namespace {

// StoredValueNorm of the rows the value summary does not cover (values exact, or an exact
// copy), once per KV head (its query heads share the values); 0 elsewhere (not read).
void ValueNorms(const GatheredHead& head, int32_t d, std::vector<float>* v_norm) {
  v_norm->assign(head.num_tokens, 0.0f);
  const bool summary = !head.v_bound.empty();
  for (int64_t t = 0; t < head.num_tokens; ++t) {
    if (!summary || head.token_exact[t] != 0) (*v_norm)[t] = StoredValueNorm(&head.v[t * d], d);
  }
}

float RelV(const MeteredAttentionResult& r) {
  return meter::RelativeValueBound(r.bound.v_bound, r.out_norm);
}

bool Certified(const MeteredAttentionResult& r, const GatePolicy& p) {
  return meter::CellCertified(r.bound.tv, RelV(r), p.tv_threshold, p.v_threshold);
}

}  // namespace

absl::Status MeteredDecodeAttention(KvCache& kv, const DecodeAttentionRequest& req,
                                    int32_t num_q_heads, RiskCounters* counters, ThreadPool* pool) {
  const KvCacheOptions& o = kv.options();
  if (num_q_heads <= 0 || num_q_heads % o.num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_q_heads ", num_q_heads, " not a multiple of ", o.num_kv_heads));
  }
  const int32_t d = o.head_dim, bs = o.block_size;
  const int32_t group = num_q_heads / o.num_kv_heads;
  const GatePolicy* policy = req.policy;
  const bool meter = policy != nullptr && policy->mode != GateMode::kOff;
  const bool repair = meter && policy->mode == GateMode::kRepair;
  int32_t budget = repair ? policy->pagein_budget_per_step : 0;
  const int64_t s = req.context_len;
  const int64_t num_blocks = (s + bs - 1) / bs;
  // One KV head's work: gather its context once, then every query head of its GQA group.
  // Scratch is per call so KV heads can run on different threads.
  auto process_kv_head = [&](int32_t g) -> absl::Status {
    // Scratch reused across calls on this thread (decode calls this per sequence, layer and
    // KV head every step: fresh buffers were a measurable share of a batched step).
    thread_local GatheredHead head;
    thread_local std::vector<float> risk, block_risk;  // [S], [blocks]
    thread_local std::vector<uint8_t> unrepairable;    // [blocks] exact copy evicted
    thread_local std::vector<float> ek, ev;            // [S, d] exact rows (audit)
    thread_local std::vector<float> v_norm;            // [S]
    risk.assign(s, 0.0f);
    block_risk.assign(num_blocks, 0.0f);
    unrepairable.assign(num_blocks, 0);
    {
      RETURN_IF_ERROR(kv.GatherHead(req.seq, req.layer, g, s, &head));
      v_norm.clear();
      if (meter) ValueNorms(head, d, &v_norm);
      for (int32_t j = 0; j < group; ++j) {
        const int32_t h = g * group + j;
        const float* q = req.q + static_cast<int64_t>(h) * d;
        float* out = req.out + static_cast<int64_t>(h) * d;
        MeteredAttentionOptions opt;
        opt.num_splits = req.num_splits;
        opt.meter = meter;
        opt.delta_loc = req.delta_loc;
        opt.tier_b_form = policy != nullptr ? policy->tier_b_form : meter::TierBForm::kPerToken;
        MeteredAttentionResult res;
        // Per-token risk (each token's share of A − 1) only ranks blocks for repair.
        MeteredAttention(MeteredInputs(kv.options(), head, v_norm), q, opt, out, &res,
                         repair ? risk.data() : nullptr);
        if (!meter) continue;
        CellRecord cell;
        cell.layer = req.layer;
        cell.head = h;
        cell.step = req.step;
        cell.tier = res.tier_b ? 'B' : 'A';
        cell.tv_before = res.bound.tv;
        cell.v_before = RelV(res);
        while (repair && !Certified(res, *policy) && budget > 0) {
          // Risk per block: its share of A − 1 (§6); promoted blocks carry none.
          std::fill(block_risk.begin(), block_risk.end(), 0.0f);
          for (int64_t t = 0; t < s; ++t) block_risk[t / bs] += risk[t];
          int64_t best = -1;
          for (int64_t b = 0; b < num_blocks; ++b) {
            if (unrepairable[b]) continue;
            bool all_exact = true;
            for (int64_t t = b * bs; t < std::min<int64_t>(s, (b + 1) * bs); ++t) {
              all_exact = all_exact && head.token_exact[t] != 0;
            }
            if (all_exact) continue;
            if (best < 0 || block_risk[b] > block_risk[best]) best = b;
          }
          if (best < 0) break;
          ASSIGN_OR_RETURN(bool paged, kv.PromoteBlock(req.seq, req.layer, g, best, &head));
          --budget;
          if (!paged) {  // its exact copy is gone: never try this block again this call
            unrepairable[best] = 1;
            continue;
          }
          ++cell.pageins;
          ValueNorms(head, d, &v_norm);  // promoted rows are exact now
          MeteredAttention(MeteredInputs(kv.options(), head, v_norm), q, opt, out, &res, risk.data());
        }
        cell.tv_after = res.bound.tv;
        cell.v_after = RelV(res);
        cell.certified = Certified(res, *policy);
        if (AuditSampled(req.layer, h, req.step, policy->audit_rate)) {
          ek.resize(s * d);
          ev.resize(s * d);
          if (kv.GatherExactHead(req.seq, req.layer, g, s, ek.data(), ev.data()).ok()) {
            AuditResult a = AuditCell(q, ek.data(), ev.data(), head.k.data(), head.v.data(), s, d);
            cell.audited = true;
            cell.true_tv = static_cast<float>(a.true_tv);
            cell.true_v = a.out_norm > 0 ? static_cast<float>(a.true_out_err / a.out_norm) : 0.0f;
            cell.violation = a.true_tv > res.bound.tv || a.true_out_err > res.bound.v_bound;
          }
        }
        if (req.cells != nullptr) req.cells[h] = cell;
        if (counters != nullptr) counters->Add(cell, policy->tv_threshold);
      }
    }
    return absl::OkStatus();
  };

  // Repair pages blocks into the sequence's table and spends one shared budget: serial.
  // Metering alone only reads, so KV heads may run in parallel.
  if (pool == nullptr || repair || o.num_kv_heads == 1) {
    for (int32_t g = 0; g < o.num_kv_heads; ++g) RETURN_IF_ERROR(process_kv_head(g));
    return absl::OkStatus();
  }
  std::vector<absl::Status> statuses(o.num_kv_heads);
  pool->ParallelFor(o.num_kv_heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) statuses[g] = process_kv_head(static_cast<int32_t>(g));
  });
  for (const absl::Status& st : statuses) RETURN_IF_ERROR(st);
  return absl::OkStatus();
}

}  // namespace witcert
