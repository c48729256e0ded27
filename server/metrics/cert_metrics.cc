// Per-(layer, head) certificate metrics, mirrored from the engine's counters at scrape
// time, at the label granularity the config asks for.
//
// Why a switch: a 32-layer × 32-head model has 1024 (layer, head) pairs; five counters each
// is 5k series per server. `layer` sums heads (32 series per counter), `off` keeps one
// unlabelled total per counter.
#include <string>

#include "server/metrics/serving_metrics.h"

namespace witcert::metrics {

void AddCertificateMetrics(Registry& registry, const Engine& engine, config::CertLabels labels) {
  std::vector<std::string> names;
  if (labels == config::CertLabels::kLayerHead) names = {"layer", "head"};
  if (labels == config::CertLabels::kLayer) names = {"layer"};
  Family& cells = registry.Counter("witcert_cert_cells_total",
                                   "Metered attention cells (layer, head, step).", names);
  Family& certified = registry.Counter(
      "witcert_cert_cells_certified_total",
      "Cells whose TV bound was within the threshold before the gate (no repair needed).",
      names);
  Family& uncertified = registry.Counter(
      "witcert_cert_cells_uncertified_total", "Cells still uncertified after the gate.", names);
  Family& pageins = registry.Counter("witcert_cert_pageins_total",
                                     "Exact KV blocks paged in by the gate.", names);
  std::vector<std::string> tier_names = names;
  tier_names.push_back("tier");
  Family& audited = registry.Counter("witcert_cert_audited_cells_total",
                                     "Cells also checked against exact attention.", names);
  Family& violations = registry.Counter(
      "witcert_cert_audit_violations_total",
      "Audited cells whose true error exceeded the bound, by certificate tier.", tier_names);

  Family& tv = registry.Histogram(
      "witcert_cert_tv_bound", "Certified total-variation bound of attention cells before the gate.",
      {RiskCounters::kTvBucketBounds.begin(), RiskCounters::kTvBucketBounds.end()}, names);

  const int32_t num_layers = engine.config().num_layers;
  const int32_t num_heads = engine.config().num_heads;
  registry.AddCollector([&, labels, num_layers, num_heads] {
    const auto& stats = engine.layer_head_stats();
    auto mirror = [&](const LabelValues& key, const auto& k) {
      cells.Get(key).Set(static_cast<double>(k.cells));
      certified.Get(key).Set(static_cast<double>(k.certified_first));
      uncertified.Get(key).Set(static_cast<double>(k.uncertified));
      pageins.Get(key).Set(static_cast<double>(k.pageins));
      audited.Get(key).Set(static_cast<double>(k.audited));
      LabelValues a = key, b = key;
      a.push_back("A");
      b.push_back("B");
      violations.Get(a).Set(static_cast<double>(k.violations_tier_a));
      violations.Get(b).Set(static_cast<double>(k.violations_tier_b));
      tv.GetHistogram(key).SetSnapshot({k.tv_buckets.begin(), k.tv_buckets.end()}, k.tv_sum);
    };
    if (labels == config::CertLabels::kOff) {
      mirror({}, stats.Total());
      return;
    }
    for (int32_t l = 0; l < num_layers; ++l) {
      if (labels == config::CertLabels::kLayer) {
        auto sum = stats.Get(l, 0);
        for (int32_t h = 1; h < num_heads; ++h) sum += stats.Get(l, h);
        mirror({std::to_string(l)}, sum);
        continue;
      }
      for (int32_t h = 0; h < num_heads; ++h) {
        mirror({std::to_string(l), std::to_string(h)}, stats.Get(l, h));
      }
    }
  });
}

}  // namespace witcert::metrics
