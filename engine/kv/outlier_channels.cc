#include "engine/kv/outlier_channels.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace witcert {

OutlierChannels::OutlierChannels(int32_t num_layers, int32_t num_kv_heads, int32_t head_dim,
                                 int32_t m)
    : num_layers_(num_layers),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      m_(m),
      channels_(static_cast<size_t>(num_layers) * num_kv_heads * 2 * m, 0),
      fill_src_(m > 0 ? static_cast<size_t>(num_layers) * num_kv_heads * 2 * head_dim : 0, 0),
      chosen_(new std::atomic<bool>[num_layers]) {
  for (int32_t l = 0; l < num_layers; ++l) chosen_[l].store(m == 0);
}

bool OutlierChannels::chosen(int32_t layer) const {
  return chosen_[layer].load(std::memory_order_acquire);
}

void OutlierChannels::ChooseOnce(int32_t layer, const float* k, const float* v, int32_t n) {
  if (chosen(layer)) return;
  absl::MutexLock lock(&mu_);
  if (chosen(layer)) return;
  const int64_t stride = static_cast<int64_t>(num_kv_heads_) * head_dim_;  // row stride
  for (int32_t h = 0; h < num_kv_heads_; ++h) {
    ChooseOne(Index(layer, h, false), k + static_cast<int64_t>(h) * head_dim_, n, stride);
    ChooseOne(Index(layer, h, true), v + static_cast<int64_t>(h) * head_dim_, n, stride);
  }
  chosen_[layer].store(true, std::memory_order_release);
}

// x: n rows of d channels at `row_stride`.
void OutlierChannels::ChooseOne(int64_t index, const float* x, int32_t n, int64_t row_stride) {
  const int32_t d = head_dim_;
  std::vector<double> score(d, 0.0);  // [d] Σ_t |x_{t,c}|; NaN counts as +inf (bypass it)
  for (int32_t t = 0; t < n; ++t) {
    for (int32_t c = 0; c < d; ++c) {
      const float a = std::fabs(x[t * row_stride + c]);
      score[c] += std::isnan(a) ? INFINITY : a;
    }
  }
  std::vector<int32_t> order(d);  // [d]
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return score[a] > score[b]; });
  int32_t* chosen = &channels_[index * m_];
  std::copy(order.begin(), order.begin() + m_, chosen);
  std::sort(chosen, chosen + m_);
  std::vector<uint8_t> is_outlier(d, 0);  // [d]
  for (int32_t j = 0; j < m_; ++j) is_outlier[chosen[j]] = 1;
  int32_t* src = &fill_src_[index * d];
  for (int32_t c = 0; c < d; ++c) {
    src[c] = c;
    if (!is_outlier[c]) continue;
    const int32_t g0 = c / kFillGroup * kFillGroup, g1 = std::min(d, g0 + kFillGroup);
    int32_t best = -1;
    for (int pass = 0; pass < 2 && best < 0; ++pass) {
      const int32_t lo = pass == 0 ? g0 : 0, hi = pass == 0 ? g1 : d;
      for (int32_t e = lo; e < hi; ++e) {
        if (!is_outlier[e] && (best < 0 || std::abs(e - c) < std::abs(best - c))) best = e;
      }
    }
    src[c] = best;  // −1 only if every channel is an outlier (m = d is rejected upstream)
  }
}

void OutlierChannels::Fill(int32_t layer, int32_t kv_head, bool is_value, const float* x,
                           float* filled) const {
  const int32_t* src = &fill_src_[Index(layer, kv_head, is_value) * head_dim_];
  for (int32_t c = 0; c < head_dim_; ++c) filled[c] = src[c] < 0 ? 0.0f : x[src[c]];
}

}  // namespace witcert
