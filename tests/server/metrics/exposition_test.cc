#include "server/metrics/exposition.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace witcert::metrics {
namespace {

TEST(Exposition, EscapesLabelValues) {
  // Backslash, double quote and newline are the only escapes of the 0.0.4 format.
  EXPECT_EQ(EscapeLabelValue(R"(a\b)"), R"(a\\b)");
  EXPECT_EQ(EscapeLabelValue("say \"hi\""), R"(say \"hi\")");
  EXPECT_EQ(EscapeLabelValue("two\nlines"), R"(two\nlines)");
  EXPECT_EQ(EscapeLabelValue("tab\tstays"), "tab\tstays");
  EXPECT_EQ(EscapeLabelValue("ünïcode"), "ünïcode");
}

TEST(Exposition, EscapesHelpButNotQuotes) {
  EXPECT_EQ(EscapeHelp("a \"quoted\" \\ help\nline"), "a \"quoted\" \\\\ help\\nline");
}

TEST(Exposition, FormatsValues) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(42), "42");
  EXPECT_EQ(FormatValue(-3.5), "-3.5");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  // Round trip: the printed text parses back to the same double.
  for (double v : {0.1, 1e-7, 123456789.125, 2.5e20, 0.05}) {
    EXPECT_EQ(std::stod(FormatValue(v)), v) << FormatValue(v);
  }
}

TEST(Exposition, ValidatesNames) {
  EXPECT_TRUE(IsValidMetricName("witcert_requests_total"));
  EXPECT_TRUE(IsValidMetricName("a:b_c1"));
  EXPECT_FALSE(IsValidMetricName("1abc"));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_TRUE(IsValidLabelName("layer"));
  EXPECT_FALSE(IsValidLabelName("__reserved"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("9x"));
}

TEST(Exposition, FormatsLabelSets) {
  EXPECT_EQ(FormatLabels({}, {}), "");
  EXPECT_EQ(FormatLabels({"a", "b"}, {"1", "x\"y"}), R"({a="1",b="x\"y"})");
  const std::pair<std::string, std::string> le{"le", "0.5"};
  EXPECT_EQ(FormatLabels({"a"}, {"1"}, &le), R"({a="1",le="0.5"})");
  EXPECT_EQ(FormatLabels({}, {}, &le), R"({le="0.5"})");
}

}  // namespace
}  // namespace witcert::metrics
