#include "engine/model/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace witcert {

absl::Status Llama3RopeFactors(const Llama3RopeScaling& s, double theta, int32_t head_dim,
                               std::vector<float>* factors) {
  const bool finite = std::isfinite(s.factor) && std::isfinite(s.low_freq_factor) &&
                      std::isfinite(s.high_freq_factor) && std::isfinite(s.original_context);
  if (!finite || !(s.factor >= 1.0) || !(s.low_freq_factor > 0.0) ||
      !(s.high_freq_factor > s.low_freq_factor) || !(s.original_context > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama3 rope scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor and "
        "original_max_position_embeddings > 0; got factor ",
        s.factor, ", low_freq_factor ", s.low_freq_factor, ", high_freq_factor ",
        s.high_freq_factor, ", original_max_position_embeddings ", s.original_context));
  }
  if (!(theta > 0.0) || !std::isfinite(theta) || head_dim <= 0 || head_dim % 2 != 0) {
    return absl::InvalidArgumentError("llama3 rope scaling needs theta > 0 and an even head_dim");
  }
  const double low_wavelength = s.original_context / s.low_freq_factor;    // longer: slowed by factor
  const double high_wavelength = s.original_context / s.high_freq_factor;  // shorter: kept
  factors->assign(static_cast<size_t>(head_dim / 2), 1.0f);
  for (int32_t i = 0; i < head_dim / 2; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * i / head_dim);
    const double wavelength = 2.0 * std::numbers::pi / inv_freq;
    double f = 1.0;
    if (wavelength > low_wavelength) {
      f = s.factor;
    } else if (wavelength >= high_wavelength) {
      const double smooth = (s.original_context / wavelength - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      f = 1.0 / ((1.0 - smooth) / s.factor + smooth);
    }
    (*factors)[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return absl::OkStatus();
}

absl::Status YarnRopeFactors(const YarnRopeScaling& s, double theta, int32_t head_dim,
                             std::vector<float>* factors) {
  const bool finite = std::isfinite(s.factor) && std::isfinite(s.original_context) &&
                      std::isfinite(s.beta_fast) && std::isfinite(s.beta_slow) &&
                      std::isfinite(s.extrapolation);
  if (!finite || !(s.factor >= 1.0) || !(s.original_context > 0.0) || !(s.beta_slow > 0.0) ||
      !(s.beta_fast > s.beta_slow) || !(s.extrapolation >= 0.0 && s.extrapolation <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "yarn rope scaling needs factor >= 1, original_max_position_embeddings > 0, "
        "beta_fast > beta_slow > 0 and an extrapolation factor in [0, 1]; got factor ",
        s.factor, ", original_max_position_embeddings ", s.original_context, ", beta_fast ",
        s.beta_fast, ", beta_slow ", s.beta_slow, ", extrapolation ", s.extrapolation));
  }
  if (!(theta > 1.0) || !std::isfinite(theta) || head_dim <= 0 || head_dim % 2 != 0) {
    return absl::InvalidArgumentError("yarn rope scaling needs theta > 1 and an even head_dim");
  }
  // The (fractional) pair index at which a pair makes `turns` rotations over the original
  // window: θ^(−2i/d)·L = 2π·turns, solved for i.
  const double d = head_dim;
  auto pair_at_turns = [&](double turns) {
    return d * std::log(s.original_context / (turns * 2.0 * std::numbers::pi)) / (2.0 * std::log(theta));
  };
  double low = pair_at_turns(s.beta_fast);   // faster pairs (smaller i) keep their frequency
  double high = pair_at_turns(s.beta_slow);  // slower pairs (larger i) are interpolated
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, d - 1.0);
  const double width = std::max(high - low, 0.001);  // a zero-width ramp is a step
  factors->assign(static_cast<size_t>(head_dim / 2), 1.0f);
  for (int32_t i = 0; i < head_dim / 2; ++i) {
    const double ramp = std::clamp((i - low) / width, 0.0, 1.0);  // 0: fast end, 1: slow end
    const double kept = (1.0 - ramp) * s.extrapolation;          // e_i
    (*factors)[static_cast<size_t>(i)] = static_cast<float>(1.0 / ((1.0 - kept) / s.factor + kept));
  }
  return absl::OkStatus();
}

double YarnAttentionFactor(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

int32_t YarnContextLength(const YarnRopeScaling& s, int32_t context) {
  return static_cast<int32_t>(std::clamp<double>(std::floor(s.original_context * s.factor), context,
                                                 std::numeric_limits<int32_t>::max()));
}

absl::Status LinearRopeFactors(double factor, int32_t head_dim, std::vector<float>* factors) {
  if (!std::isfinite(factor) || !(factor >= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("linear rope scaling needs a finite factor >= 1, got ", factor));
  }
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return absl::InvalidArgumentError("linear rope scaling needs an even head_dim");
  }
  factors->assign(static_cast<size_t>(head_dim / 2), static_cast<float>(factor));
  return absl::OkStatus();
}

void DropIdentityRopeScaling(float attn_factor, std::vector<float>* factors) {
  if (attn_factor == 1.0f && std::all_of(factors->begin(), factors->end(), [](float f) { return f == 1.0f; })) {
    factors->clear();
  }
}

absl::Status ValidateRopeFactors(absl::Span<const float> factors, int32_t head_dim) {
  if (factors.empty()) return absl::OkStatus();
  if (static_cast<int64_t>(factors.size()) * 2 != head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("rope frequency factors: ", factors.size(),
                                                   " values for head_dim ", head_dim,
                                                   " (one per rotation pair expected)"));
  }
  for (size_t i = 0; i < factors.size(); ++i) {
    if (!std::isfinite(factors[i]) || !(factors[i] > 0.0f)) {
      return absl::InvalidArgumentError(absl::StrCat("rope frequency factor ", i, " is ",
                                                     factors[i], " (must be finite and > 0)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRopeAttnFactor(float attn_factor) {
  if (!std::isfinite(attn_factor) || !(attn_factor > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope attention factor ", attn_factor, " must be finite and > 0"));
  }
  return absl::OkStatus();
}

}  // namespace witcert
