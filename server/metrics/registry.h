// A tiny metrics registry: counter, gauge and histogram families with labels, rendered in
// the Prometheus text format 0.0.4.
//
// Why this shape: the server records a handful of serving metrics on its request threads
// (Inc / Observe, lock-light) and mirrors engine totals at scrape time through collectors
// (Set / SetSnapshot), so the engine never learns about Prometheus. Children are created on
// first use and live as long as the registry, so references to them stay valid.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace witcert::metrics {

using LabelValues = std::vector<std::string>;

enum class MetricType { kCounter, kGauge, kHistogram };

// One counter or gauge time series. Counters only go up (Inc with v >= 0, or Set to a
// mirrored monotonic total); gauges go anywhere.
class Scalar {
 public:
  void Inc(double v = 1.0);
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// One histogram time series. `bounds` are the finite upper bounds, strictly increasing;
// the +Inf bucket is implicit.
class HistogramSeries {
 public:
  explicit HistogramSeries(const std::vector<double>* bounds);
  void Observe(double v);
  // Mirrors a histogram kept elsewhere: per-bucket (non-cumulative) counts [bounds + 1]
  // including the +Inf bucket, and the sum of observations.
  void SetSnapshot(const std::vector<uint64_t>& bucket_counts, double sum);
  // Cumulative counts [bounds + 1] (last = total count), and the sum.
  void Read(std::vector<uint64_t>* cumulative, double* sum) const;

 private:
  const std::vector<double>* bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // [bounds + 1], non-cumulative
  double sum_ = 0.0;
};

class Family {
 public:
  Family(std::string name, std::string help, MetricType type, std::vector<std::string> labels,
         std::vector<double> bounds = {});

  // The series for `values` (one per label name), created on first use.
  Scalar& Get(const LabelValues& values = {});
  HistogramSeries& GetHistogram(const LabelValues& values = {});
  void Clear();  // drops every series (for a collector that re-mirrors a label set)

  const std::string& name() const { return name_; }
  MetricType type() const { return type_; }
  void Render(std::string* out) const;

 private:
  std::string name_, help_;
  MetricType type_;
  std::vector<std::string> labels_;
  std::vector<double> bounds_;  // histograms: finite upper bounds, increasing
  mutable std::mutex mu_;
  std::map<LabelValues, std::unique_ptr<Scalar>> scalars_;
  std::map<LabelValues, std::unique_ptr<HistogramSeries>> histograms_;
};

class Registry {
 public:
  // Names and label names must be valid (an internal invariant: they are constants).
  Family& Counter(const std::string& name, const std::string& help,
                  std::vector<std::string> labels = {});
  Family& Gauge(const std::string& name, const std::string& help,
                std::vector<std::string> labels = {});
  Family& Histogram(const std::string& name, const std::string& help,
                    std::vector<double> bounds, std::vector<std::string> labels = {});
  // Runs before each Render, in registration order (mirrors values kept elsewhere).
  void AddCollector(std::function<void()> collector);

  // Text format 0.0.4 of every family, in registration order.
  std::string Render() const;

 private:
  Family& Add(std::unique_ptr<Family> family);
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family>> families_;
  std::vector<std::function<void()>> collectors_;
  mutable std::mutex render_mu_;  // one scrape at a time runs the collectors
};

// Buckets `start, start·factor, …` (count of them), like Prometheus' ExponentialBuckets.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

}  // namespace witcert::metrics
