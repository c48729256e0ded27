#include "engine/cert/records.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "nlohmann/json.hpp"

namespace witcert {

void RiskAccumulator::Add(const CellRecord& c, double delta_loc, float tv_threshold) {
  ++s_.cells;
  s_.max_tv_before = std::max<double>(s_.max_tv_before, c.tv_before);
  s_.max_tv_after = std::max<double>(s_.max_tv_after, c.tv_after);
  sum_before_ += c.tv_before;
  sum_after_ += c.tv_after;
  if (c.tv_before <= tv_threshold) ++certified_first_;
  s_.pageins += c.pageins;
  if (c.tier == 'B') s_.delta_spent += delta_loc;
  if (!c.certified) {
    ++s_.uncertified_cells;
    if (c.layer < 0 || c.head < 0) {  // not a real cell's indices: listed once, searched
      const auto key = std::make_pair(c.layer, c.head);
      if (std::find(s_.uncertified_heads.begin(), s_.uncertified_heads.end(), key) == s_.uncertified_heads.end()) {
        s_.uncertified_heads.push_back(key);
      }
      return;
    }
    if (static_cast<size_t>(c.layer) >= head_listed_.size()) head_listed_.resize(c.layer + 1);
    std::vector<bool>& heads = head_listed_[c.layer];
    if (static_cast<size_t>(c.head) >= heads.size()) heads.resize(c.head + 1, false);
    if (!heads[c.head]) {
      heads[c.head] = true;
      s_.uncertified_heads.emplace_back(c.layer, c.head);
    }
  }
}

RiskSummary RiskAccumulator::Summary() const {
  RiskSummary r = s_;
  if (r.cells > 0) {
    r.mean_tv_before = sum_before_ / r.cells;
    r.mean_tv_after = sum_after_ / r.cells;
    r.coverage = static_cast<double>(certified_first_) / r.cells;
  }
  return r;
}

RiskSummary MergeRiskSummaries(absl::Span<const RiskSummary> parts) {
  RiskSummary m;
  double sum_before = 0, sum_after = 0, certified_first = 0;
  absl::flat_hash_set<std::pair<int32_t, int32_t>> listed;
  for (const RiskSummary& p : parts) {
    m.cells += p.cells;
    m.max_tv_before = std::max(m.max_tv_before, p.max_tv_before);
    m.max_tv_after = std::max(m.max_tv_after, p.max_tv_after);
    sum_before += p.mean_tv_before * static_cast<double>(p.cells);
    sum_after += p.mean_tv_after * static_cast<double>(p.cells);
    certified_first += p.coverage * static_cast<double>(p.cells);
    m.pageins += p.pageins;
    m.uncertified_cells += p.uncertified_cells;
    m.delta_spent += p.delta_spent;
    for (const auto& head : p.uncertified_heads) {
      if (listed.insert(head).second) m.uncertified_heads.push_back(head);
    }
  }
  if (m.cells > 0) {
    m.mean_tv_before = sum_before / static_cast<double>(m.cells);
    m.mean_tv_after = sum_after / static_cast<double>(m.cells);
    m.coverage = certified_first / static_cast<double>(m.cells);
  }
  return m;
}

RiskCounters::RiskCounters(int32_t num_layers, int32_t num_heads)
    : num_layers_(num_layers), num_heads_(num_heads), counts_(num_layers * num_heads) {}

void RiskCounters::Add(const CellRecord& c, float tv_threshold) {
  absl::MutexLock lock(&mu_);
  AddLocked(c, tv_threshold);
}

void RiskCounters::AddAll(absl::Span<const CellRecord> cells, float tv_threshold) {
  absl::MutexLock lock(&mu_);
  for (const CellRecord& c : cells) AddLocked(c, tv_threshold);
}

void RiskCounters::AddLocked(const CellRecord& c, float tv_threshold) {
  if (c.layer < 0 || c.layer >= num_layers_ || c.head < 0 || c.head >= num_heads_) return;
  Counts& k = counts_[c.layer * num_heads_ + c.head];
  ++k.cells;
  if (c.tv_before <= tv_threshold) ++k.certified_first;
  if (!c.certified) ++k.uncertified;
  k.pageins += c.pageins;
  if (c.audited) {
    ++k.audited;
    if (c.violation) ++(c.tier == 'B' ? k.violations_tier_b : k.violations_tier_a);
  }
  // First bucket whose bound is >= tv (le semantics), compared in float as the gate compares
  // tv_before with its float threshold, so a cell at exactly tv_threshold = 0.05 counts in
  // le="0.05" as it counts as certified; NaN lands in +Inf.
  const float tv = c.tv_before;
  const size_t b = static_cast<size_t>(
      std::lower_bound(kTvBucketBounds.begin(), kTvBucketBounds.end(), tv,
                       [](double bound, float v) { return static_cast<float>(bound) < v; }) -
      kTvBucketBounds.begin());
  ++k.tv_buckets[std::isnan(tv) ? kTvBuckets - 1 : b];
  k.tv_sum += tv;
}

RiskCounters::Counts& RiskCounters::Counts::operator+=(const Counts& o) {
  cells += o.cells;
  certified_first += o.certified_first;
  uncertified += o.uncertified;
  pageins += o.pageins;
  audited += o.audited;
  violations_tier_a += o.violations_tier_a;
  violations_tier_b += o.violations_tier_b;
  for (size_t i = 0; i < kTvBuckets; ++i) tv_buckets[i] += o.tv_buckets[i];
  tv_sum += o.tv_sum;
  return *this;
}

RiskCounters::Counts RiskCounters::Get(int32_t layer, int32_t head) const {
  absl::MutexLock lock(&mu_);
  return counts_[layer * num_heads_ + head];
}

RiskCounters::Counts RiskCounters::Total() const {
  absl::MutexLock lock(&mu_);
  Counts t;
  for (const Counts& k : counts_) t += k;
  return t;
}

absl::Status TraceWriter::Open(const std::string& path, std::unique_ptr<TraceWriter>* out) {
  auto w = std::make_unique<TraceWriter>();
  w->out_.open(path, std::ios::out | std::ios::app);
  if (!w->out_) return absl::UnavailableError("cannot open trace file " + path);
  *out = std::move(w);
  return absl::OkStatus();
}

void TraceWriter::Write(int64_t request_id, const CellRecord& c) {
  nlohmann::json j = {{"request", request_id}, {"layer", c.layer}, {"head", c.head},
                      {"step", c.step}, {"tv_before", c.tv_before}, {"tv_after", c.tv_after},
                      {"v_before", c.v_before}, {"v_after", c.v_after},
                      {"pageins", c.pageins}, {"certified", c.certified},
                      {"tier", std::string(1, c.tier)}};
  if (c.audited) {
    j["true_tv"] = c.true_tv;
    j["true_v"] = c.true_v;
    j["violation"] = c.violation;
  }
  absl::MutexLock lock(&mu_);
  out_ << j.dump() << '\n';
}

}  // namespace witcert
