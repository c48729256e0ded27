#include "server/metrics/registry.h"

#include <algorithm>
#include <cassert>

#include "server/metrics/exposition.h"

namespace witcert::metrics {

void Scalar::Inc(double v) {
  double cur = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

HistogramSeries::HistogramSeries(const std::vector<double>* bounds)
    : bounds_(bounds), counts_(bounds->size() + 1, 0) {}

void HistogramSeries::Observe(double v) {
  // First bucket whose upper bound is >= v (le semantics); NaN lands in +Inf.
  const size_t i = static_cast<size_t>(
      std::lower_bound(bounds_->begin(), bounds_->end(), v) - bounds_->begin());
  std::lock_guard<std::mutex> lock(mu_);
  counts_[i] += 1;
  sum_ += v;
}

void HistogramSeries::SetSnapshot(const std::vector<uint64_t>& bucket_counts, double sum) {
  std::lock_guard<std::mutex> lock(mu_);
  std::fill(counts_.begin(), counts_.end(), 0);
  for (size_t i = 0; i < bucket_counts.size() && i < counts_.size(); ++i) {
    counts_[i] = bucket_counts[i];
  }
  // Extra source buckets (a finer source) fold into +Inf rather than vanish.
  for (size_t i = counts_.size(); i < bucket_counts.size(); ++i) counts_.back() += bucket_counts[i];
  sum_ = sum;
}

void HistogramSeries::Read(std::vector<uint64_t>* cumulative, double* sum) const {
  std::lock_guard<std::mutex> lock(mu_);
  cumulative->resize(counts_.size());
  uint64_t acc = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    acc += counts_[i];
    (*cumulative)[i] = acc;
  }
  *sum = sum_;
}

Family::Family(std::string name, std::string help, MetricType type,
               std::vector<std::string> labels, std::vector<double> bounds)
    : name_(std::move(name)), help_(std::move(help)), type_(type), labels_(std::move(labels)),
      bounds_(std::move(bounds)) {
  assert(IsValidMetricName(name_));
  for (const std::string& l : labels_) {
    assert(IsValidLabelName(l) && !(type_ == MetricType::kHistogram && l == "le"));
    (void)l;
  }
  assert(std::is_sorted(bounds_.begin(), bounds_.end()));
}

Scalar& Family::Get(const LabelValues& values) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = scalars_[values];
  if (!slot) slot = std::make_unique<Scalar>();
  return *slot;
}

HistogramSeries& Family::GetHistogram(const LabelValues& values) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = histograms_[values];
  if (!slot) slot = std::make_unique<HistogramSeries>(&bounds_);
  return *slot;
}

void Family::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  scalars_.clear();
  histograms_.clear();
}

void Family::Render(std::string* out) const {
  static const char* kTypeNames[] = {"counter", "gauge", "histogram"};
  *out += "# HELP " + name_ + " " + EscapeHelp(help_) + "\n";
  *out += "# TYPE " + name_ + " " + kTypeNames[static_cast<int>(type_)] + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  if (type_ != MetricType::kHistogram) {
    for (const auto& [values, series] : scalars_) {
      *out += name_ + FormatLabels(labels_, values) + " " + FormatValue(series->value()) + "\n";
    }
    return;
  }
  std::vector<uint64_t> cumulative;
  double sum = 0.0;
  for (const auto& [values, series] : histograms_) {
    series->Read(&cumulative, &sum);
    for (size_t i = 0; i < cumulative.size(); ++i) {
      const std::pair<std::string, std::string> le{
          "le", i < bounds_.size() ? FormatValue(bounds_[i]) : "+Inf"};
      *out += name_ + "_bucket" + FormatLabels(labels_, values, &le) + " " +
              FormatValue(static_cast<double>(cumulative[i])) + "\n";
    }
    const std::string labels = FormatLabels(labels_, values);
    *out += name_ + "_sum" + labels + " " + FormatValue(sum) + "\n";
    *out += name_ + "_count" + labels + " " +
            FormatValue(static_cast<double>(cumulative.back())) + "\n";
  }
}

Family& Registry::Add(std::unique_ptr<Family> family) {
  std::lock_guard<std::mutex> lock(mu_);
#ifndef NDEBUG
  for (const auto& f : families_) assert(f->name() != family->name());
#endif
  families_.push_back(std::move(family));
  return *families_.back();
}

Family& Registry::Counter(const std::string& name, const std::string& help,
                          std::vector<std::string> labels) {
  return Add(std::make_unique<Family>(name, help, MetricType::kCounter, std::move(labels)));
}

Family& Registry::Gauge(const std::string& name, const std::string& help,
                        std::vector<std::string> labels) {
  return Add(std::make_unique<Family>(name, help, MetricType::kGauge, std::move(labels)));
}

Family& Registry::Histogram(const std::string& name, const std::string& help,
                            std::vector<double> bounds, std::vector<std::string> labels) {
  return Add(std::make_unique<Family>(name, help, MetricType::kHistogram, std::move(labels),
                                      std::move(bounds)));
}

void Registry::AddCollector(std::function<void()> collector) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(collector));
}

std::string Registry::Render() const {
  std::lock_guard<std::mutex> render_lock(render_mu_);
  std::vector<std::function<void()>> collectors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    collectors = collectors_;
  }
  for (const auto& c : collectors) c();
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& f : families_) f->Render(&out);
  return out;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

}  // namespace witcert::metrics
