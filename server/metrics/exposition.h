// Prometheus text exposition format 0.0.4: the escaping and number rules, kept apart from
// the registry so they can be tested byte for byte.
//
// Why in-house: prometheus-cpp is not packaged for Debian 12, and the format is small
// (https://prometheus.io/docs/instrumenting/exposition_formats/). Label values escape `\`,
// `"` and newline; HELP text escapes `\` and newline; values are Go-style floats with
// +Inf / -Inf / NaN spelled out.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace witcert::metrics {

inline constexpr char kExpositionContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved).
bool IsValidLabelName(std::string_view name);

std::string EscapeLabelValue(std::string_view value);
std::string EscapeHelp(std::string_view help);
// Shortest round-trip decimal; integers without a fraction; "+Inf", "-Inf", "NaN".
std::string FormatValue(double value);

// `{a="x",b="y"}` or "" for no labels; names and values pair up by index.
std::string FormatLabels(const std::vector<std::string>& names,
                         const std::vector<std::string>& values,
                         const std::pair<std::string, std::string>* extra = nullptr);

}  // namespace witcert::metrics
