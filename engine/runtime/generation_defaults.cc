#include "engine/runtime/generation_defaults.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace witcert {

absl::StatusOr<SamplingParams> GenerationDefaultsFromJson(std::string_view json_text, std::string_view where) {
  SamplingParams s;
  if (json_text.empty()) return s;
  const nlohmann::json j = nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr,
                                                 /*allow_exceptions=*/false);
  const std::string at(where);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(at + ": not a JSON object");
  auto number = [&](const char* key, double lo, double hi, bool lo_open, float* out) -> absl::Status {
    if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
    const nlohmann::json& v = j[key];
    const double d = v.is_number() ? v.get<double>() : -1e300;
    if (!v.is_number() || d > hi || d < lo || (lo_open && d == lo)) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": \"", key, "\" = ", v.dump(), " is outside ",
                                                     lo_open ? "(" : "[", lo, ", ", hi, "]"));
    }
    *out = static_cast<float>(d);
    return absl::OkStatus();
  };
  if (absl::Status st = number("temperature", 0.0, 2.0, false, &s.temperature); !st.ok()) return st;
  if (absl::Status st = number("top_p", 0.0, 1.0, true, &s.top_p); !st.ok()) return st;
  if (absl::Status st = number("min_p", 0.0, 1.0, false, &s.min_p); !st.ok()) return st;
  if (absl::Status st = number("repetition_penalty", 0.0, 2.0, true, &s.repetition_penalty); !st.ok()) return st;
  float top_k = 0.0f;
  if (absl::Status st = number("top_k", 0.0, 1 << 20, false, &top_k); !st.ok()) return st;
  s.top_k = static_cast<int32_t>(top_k);
  return s;
}

absl::StatusOr<SamplingParams> GenerationDefaultsFromGguf(const GgufFile& file) {
  SamplingParams s;
  auto number = [&](const char* key, double lo, double hi, bool lo_open, float* out) -> absl::Status {
    if (file.Find(key) == nullptr) return absl::OkStatus();
    absl::StatusOr<double> v = file.GetFloat(key);
    if (!v.ok() || *v > hi || *v < lo || (lo_open && *v == lo)) {
      return absl::InvalidArgumentError(absl::StrCat(file.path(), ": metadata key '", key, "' is ",
                                                     v.ok() ? absl::StrCat(*v) : "not a number", ", outside ",
                                                     lo_open ? "(" : "[", lo, ", ", hi, "]"));
    }
    *out = static_cast<float>(*v);
    return absl::OkStatus();
  };
  if (absl::Status st = number("general.sampling.temp", 0.0, 2.0, false, &s.temperature); !st.ok()) return st;
  if (absl::Status st = number("general.sampling.top_p", 0.0, 1.0, true, &s.top_p); !st.ok()) return st;
  if (absl::Status st = number("general.sampling.min_p", 0.0, 1.0, false, &s.min_p); !st.ok()) return st;
  if (absl::Status st = number("general.sampling.penalty_repeat", 0.0, 2.0, true, &s.repetition_penalty); !st.ok()) {
    return st;
  }
  float top_k = 0.0f;
  if (absl::Status st = number("general.sampling.top_k", 0.0, 1 << 20, false, &top_k); !st.ok()) return st;
  s.top_k = static_cast<int32_t>(top_k);
  return s;
}

}  // namespace witcert
