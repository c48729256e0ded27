#include "server/metrics/registry.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace witcert::metrics {
namespace {

bool Contains(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(Registry, RendersCounterAndGaugeWithHelpAndType) {
  Registry r;
  Family& c = r.Counter("requests_total", "Requests.\nSecond line", {"code"});
  Family& g = r.Gauge("queue_depth", "Depth.");
  c.Get({"200"}).Inc();
  c.Get({"200"}).Inc(2);
  c.Get({"404"}).Inc();
  g.Get().Set(7.5);
  const std::string text = r.Render();
  EXPECT_TRUE(Contains(text, "# HELP requests_total Requests.\\nSecond line"));
  EXPECT_TRUE(Contains(text, "# TYPE requests_total counter"));
  EXPECT_TRUE(Contains(text, "requests_total{code=\"200\"} 3"));
  EXPECT_TRUE(Contains(text, "requests_total{code=\"404\"} 1"));
  EXPECT_TRUE(Contains(text, "# TYPE queue_depth gauge"));
  EXPECT_TRUE(Contains(text, "queue_depth 7.5"));
  // HELP and TYPE come before the family's samples.
  EXPECT_LT(text.find("# TYPE requests_total"), text.find("requests_total{"));
}

TEST(Registry, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Registry r;
  Family& h = r.Histogram("latency_seconds", "Latency.", {0.25, 1.0, 10.0}, {"route"});
  HistogramSeries& s = h.GetHistogram({"/x"});
  // Binary fractions so the sum is exact.
  for (double v : {0.125, 0.25, 0.5, 2.0, 100.0}) s.Observe(v);
  const std::string text = r.Render();
  // le is inclusive: 0.25 falls in the 0.25 bucket.
  EXPECT_TRUE(Contains(text, "latency_seconds_bucket{route=\"/x\",le=\"0.25\"} 2"));
  EXPECT_TRUE(Contains(text, "latency_seconds_bucket{route=\"/x\",le=\"1\"} 3"));
  EXPECT_TRUE(Contains(text, "latency_seconds_bucket{route=\"/x\",le=\"10\"} 4"));
  EXPECT_TRUE(Contains(text, "latency_seconds_bucket{route=\"/x\",le=\"+Inf\"} 5"));
  EXPECT_TRUE(Contains(text, "latency_seconds_sum{route=\"/x\"} 102.875"));
  EXPECT_TRUE(Contains(text, "latency_seconds_count{route=\"/x\"} 5"));
  EXPECT_TRUE(Contains(text, "# TYPE latency_seconds histogram"));
}

TEST(Registry, HistogramSnapshotMirrorsExternalCounts) {
  Registry r;
  Family& h = r.Histogram("tv", "TV.", {0.01, 0.1});
  h.GetHistogram().SetSnapshot({3, 0, 2}, 1.5);
  std::string text = r.Render();
  EXPECT_TRUE(Contains(text, "tv_bucket{le=\"0.01\"} 3"));
  EXPECT_TRUE(Contains(text, "tv_bucket{le=\"0.1\"} 3"));
  EXPECT_TRUE(Contains(text, "tv_bucket{le=\"+Inf\"} 5"));
  EXPECT_TRUE(Contains(text, "tv_count 5"));
  // A later snapshot replaces, not adds.
  h.GetHistogram().SetSnapshot({1, 1, 1}, 0.5);
  text = r.Render();
  EXPECT_TRUE(Contains(text, "tv_count 3"));
}

TEST(Registry, CollectorsRunBeforeEachRender) {
  Registry r;
  Family& g = r.Gauge("mirrored", "Mirrored.");
  int calls = 0;
  r.AddCollector([&] { g.Get().Set(++calls); });
  EXPECT_TRUE(Contains(r.Render(), "mirrored 1"));
  EXPECT_TRUE(Contains(r.Render(), "mirrored 2"));
}

TEST(Registry, LabelValuesAreEscapedInSamples) {
  Registry r;
  r.Counter("odd_total", "Odd.", {"path"}).Get({"a\"b\\c\nd"}).Inc();
  EXPECT_TRUE(Contains(r.Render(), R"(odd_total{path="a\"b\\c\nd"} 1)"));
}

TEST(Registry, ConcurrentIncrementsAreNotLost) {
  Registry r;
  Family& c = r.Counter("hits_total", "Hits.");
  Family& h = r.Histogram("obs", "Obs.", {1.0});
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Get().Inc();
        h.GetHistogram().Observe(0.5);
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string text = r.Render();
  EXPECT_TRUE(Contains(text, "hits_total 80000"));
  EXPECT_TRUE(Contains(text, "obs_count 80000"));
}

TEST(Registry, ExponentialBuckets) {
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
}

}  // namespace
}  // namespace witcert::metrics
