// CudaBackend::SampleOnDevice: the step's sampling parameters and penalty lists packed for
// kernels/cuda/ops/sampling_cuda.h and copied on a side stream while the step runs, the sampling
// run after the logits on the backend's stream.
#include <algorithm>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/common/status.h"
#include "absl/container/flat_hash_map.h"
#include "kernels/cuda/ops/sampling_cuda.h"

namespace witcert {

absl::Status CudaBackend::SampleOnDevice(const std::vector<const SampleRequest*>& rows) {
  const int64_t m = static_cast<int64_t>(rows.size());
  // Penalty lists: each row's distinct generated tokens with their counts.
  std::vector<int32_t> tokens, counts;
  std::vector<SampleRowParams> params(m);
  absl::flat_hash_map<int32_t, int32_t> seen;
  for (int64_t r = 0; r < m; ++r) {
    SampleRowParams& p = params[r];
    const SampleRequest* q = rows[r];
    if (q == nullptr) {
      p.temperature = 0.0f;  // not sampled here: cheapest path, result ignored
      continue;
    }
    p.temperature = q->temperature;
    p.top_p = q->top_p;
    p.top_k = q->top_k;
    p.min_p = q->min_p;
    p.presence_penalty = q->presence_penalty;
    p.frequency_penalty = q->frequency_penalty;
    p.uniform = q->uniform;
    p.penalty_offset = static_cast<int32_t>(tokens.size());
    if (q->presence_penalty != 0.0f || q->frequency_penalty != 0.0f) {
      seen.clear();
      for (int32_t t : q->generated) ++seen[t];
      for (const auto& [t, c] : seen) {
        tokens.push_back(t);
        counts.push_back(c);
      }
    }
    p.penalty_count = static_cast<int32_t>(tokens.size()) - p.penalty_offset;
  }
  const bool any_penalty = !tokens.empty();
  const int64_t np = std::max<int64_t>(1, static_cast<int64_t>(tokens.size()));
  RETURN_IF_ERROR(sample_params_.Grow(m));
  RETURN_IF_ERROR(sample_params_host_.Grow(m));
  RETURN_IF_ERROR(penalties_.Grow(2 * np));
  RETURN_IF_ERROR(penalties_host_.Grow(2 * np));
  RETURN_IF_ERROR(sampled_.Grow(m));
  RETURN_IF_ERROR(sampled_host_.Grow(m));
  RETURN_IF_ERROR(argmax_scratch_.Grow(SampleArgmaxScratchEntries(m, config_.vocab_size)));
  std::copy(params.begin(), params.end(), sample_params_host_.get());
  std::copy(tokens.begin(), tokens.end(), penalties_host_.get());
  std::copy(counts.begin(), counts.end(), penalties_host_.get() + np);
  // The previous step's copies from these host buffers have ended: its SampleOnDevice waited for
  // them on stream_, which Forward synchronizes.
  WITCERT_CUDA_OK(cudaMemcpyAsync(sample_params_.get(), sample_params_host_.get(),
                                  m * sizeof(SampleRowParams), cudaMemcpyHostToDevice, sample_stream_));
  if (any_penalty) {
    WITCERT_CUDA_OK(cudaMemcpyAsync(penalties_.get(), penalties_host_.get(), 2 * np * 4,
                                    cudaMemcpyHostToDevice, sample_stream_));
  }
  WITCERT_CUDA_OK(cudaEventRecord(sampling_staged_, sample_stream_));
  WITCERT_CUDA_OK(cudaStreamWaitEvent(stream_, sampling_staged_, 0));
  WITCERT_KERNEL_OK(SampleRowsCuda(logits_.get(), m, config_.vocab_size, sample_params_.get(),
                                   any_penalty ? penalties_.get() : nullptr,
                                   any_penalty ? penalties_.get() + np : nullptr, sampled_.get(), stream_,
                                   argmax_scratch_.get()));
  WITCERT_CUDA_OK(cudaMemcpyAsync(sampled_host_.get(), sampled_.get(), m * 4,
                                  cudaMemcpyDeviceToHost, stream_));
  return absl::OkStatus();
}

}  // namespace witcert
