#include "engine/model/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/model/model_loader.h"

namespace witcert {
namespace {

struct Preset {
  std::string_view name;
  ModelConfig config;
};

ModelConfig MakeConfig(std::string arch, std::string name, int32_t layers, int32_t hidden,
                       int32_t heads, int32_t kv_heads, int32_t head_dim, int32_t ffn,
                       int32_t vocab, int32_t context, float theta, float eps, bool tied) {
  ModelConfig c;
  c.architecture = std::move(arch);
  c.name = std::move(name);
  c.num_layers = layers;
  c.hidden_dim = hidden;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.ffn_dim = ffn;
  c.vocab_size = vocab;
  c.context_length = context;
  c.rope_theta = theta;
  c.rms_norm_eps = eps;
  c.rope_pairing = RopePairing::kHalfSplit;  // HF layout, as the real checkpoints ship
  c.qkv_bias = c.architecture == "qwen2";
  c.tied_embeddings = tied;
  return c;
}

// Shapes from the published config.json of each checkpoint.
const std::vector<Preset>& Presets() {
  static const auto* const presets = new std::vector<Preset>{
      {"llama-3.1-8b", MakeConfig("llama", "synthetic:llama-3.1-8b", 32, 4096, 32, 8, 128,
                                  14336, 128256, 131072, 500000.0f, 1e-5f, false)},
      {"qwen2.5-7b", MakeConfig("qwen2", "synthetic:qwen2.5-7b", 28, 3584, 28, 4, 128, 18944,
                                152064, 32768, 1000000.0f, 1e-6f, false)},
      {"qwen2.5-1.5b", MakeConfig("qwen2", "synthetic:qwen2.5-1.5b", 28, 1536, 12, 2, 128, 8960,
                                  151936, 32768, 1000000.0f, 1e-6f, true)},
      {"tiny", MakeConfig("llama", "synthetic:tiny", 2, 128, 4, 2, 32, 256, 512, 4096,
                          10000.0f, 1e-5f, false)},
      {"tiny-qwen2", MakeConfig("qwen2", "synthetic:tiny-qwen2", 2, 128, 4, 2, 32, 256, 512,
                                4096, 1000000.0f, 1e-6f, true)},
  };
  return *presets;
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint16_t FloatToBf16(float f) {  // round to nearest even; inputs are finite
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// One tensor to synthesise: a BF16 matrix or an F32 vector (random, or all ones).
struct Job {
  uint32_t id;
  int64_t rows, cols;
  bool bf16;
  bool ones;
  QuantMatrix* target;
};

void Fill(const Job& job, uint64_t seed, void* dst, int num_threads) {
  const int64_t n = job.rows * job.cols;
  const float stddev = 1.0f / std::sqrt(static_cast<float>(job.cols));
  auto run = [&](int64_t begin, int64_t end) {
    if (job.bf16) {
      uint16_t* out = static_cast<uint16_t*>(dst);  // [rows, cols] bf16
      for (int64_t i = begin; i < end; ++i) {
        out[i] = FloatToBf16(SyntheticUniform(seed, job.id, static_cast<uint64_t>(i), stddev));
      }
    } else {
      float* out = static_cast<float*>(dst);  // [cols] f32
      for (int64_t i = begin; i < end; ++i) {
        out[i] = job.ones ? 1.0f : SyntheticUniform(seed, job.id, static_cast<uint64_t>(i),
                                                    stddev);
      }
    }
  };
  constexpr int64_t kMinPerThread = 1 << 18;
  const int threads = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(num_threads, n / kMinPerThread)));
  if (threads == 1) {
    run(0, n);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t chunk = (n + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const int64_t begin = t * chunk, end = std::min(n, begin + chunk);
    if (begin < end) pool.emplace_back(run, begin, end);
  }
  for (std::thread& th : pool) th.join();
}

}  // namespace

std::vector<std::string> SyntheticPresetNames() {
  std::vector<std::string> names;
  for (const Preset& p : Presets()) names.emplace_back(p.name);
  return names;
}

absl::StatusOr<ModelConfig> SyntheticPresetConfig(std::string_view preset) {
  for (const Preset& p : Presets()) {
    if (p.name == preset) return p.config;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown synthetic preset '", absl::string_view(preset.data(), preset.size()),
                   "' (supported: ", absl::StrJoin(SyntheticPresetNames(), ", "), ")"));
}

int64_t SyntheticWeightBytes(const ModelConfig& c) {
  const int64_t h = c.hidden_dim;
  const int64_t per_layer_matrix = h * c.q_dim() + 2 * int64_t{c.kv_dim()} * h +
                                   int64_t{c.q_dim()} * h + 3 * int64_t{c.ffn_dim} * h;
  const int64_t per_layer_vector = 2 * h + (c.qkv_bias ? c.q_dim() + 2 * c.kv_dim() : 0);
  const int64_t embeddings = int64_t{c.vocab_size} * h * (c.tied_embeddings ? 1 : 2);
  return 2 * (embeddings + c.num_layers * per_layer_matrix) +
         4 * (h + c.num_layers * per_layer_vector);
}

float SyntheticUniform(uint64_t seed, uint32_t tensor_id, uint64_t index, float stddev) {
  const uint64_t stream = SplitMix64(seed ^ (static_cast<uint64_t>(tensor_id) << 32));
  const uint64_t r = SplitMix64(stream + index);
  const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1), 24 bits
  return (2.0f * u - 1.0f) * 1.7320508f * stddev;
}

absl::StatusOr<std::unique_ptr<Model>> SyntheticModelLoader::Create(
    std::string_view preset, uint64_t seed,
    const std::function<void(const std::string&)>& progress, int num_threads) {
  ASSIGN_OR_RETURN(ModelConfig config, SyntheticPresetConfig(preset));
  return FromConfig(std::move(config), seed, progress, num_threads);
}

absl::StatusOr<std::unique_ptr<Model>> SyntheticModelLoader::FromConfig(
    ModelConfig c, uint64_t seed, const std::function<void(const std::string&)>& progress,
    int num_threads) {
  RETURN_IF_ERROR(ValidateModelConfig(c));
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  num_threads = std::max(num_threads, 1);
  std::unique_ptr<Model> model(new Model());
  Weights& w = model->weights_;
  const int64_t h = c.hidden_dim;
  w.layers.resize(c.num_layers);

  std::vector<Job> jobs;
  jobs.push_back({kSyntheticEmbeddingId, c.vocab_size, h, true, false, &w.token_embd});
  jobs.push_back({0, 1, h, false, true, &w.output_norm});
  if (!c.tied_embeddings) {
    jobs.push_back({kSyntheticOutputId, c.vocab_size, h, true, false, &w.output});
  }
  for (int32_t i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = w.layers[i];
    auto id = [i](SyntheticLayerTensor t) { return SyntheticTensorId(i, t); };
    using T = SyntheticLayerTensor;
    jobs.push_back({0, 1, h, false, true, &l.attn_norm});
    jobs.push_back({id(T::kWq), c.q_dim(), h, true, false, &l.wq});
    jobs.push_back({id(T::kWk), c.kv_dim(), h, true, false, &l.wk});
    jobs.push_back({id(T::kWv), c.kv_dim(), h, true, false, &l.wv});
    if (c.qkv_bias) {
      jobs.push_back({id(T::kBq), 1, c.q_dim(), false, false, &l.bq});
      jobs.push_back({id(T::kBk), 1, c.kv_dim(), false, false, &l.bk});
      jobs.push_back({id(T::kBv), 1, c.kv_dim(), false, false, &l.bv});
    }
    jobs.push_back({id(T::kWo), h, c.q_dim(), true, false, &l.wo});
    jobs.push_back({0, 1, h, false, true, &l.ffn_norm});
    jobs.push_back({id(T::kGate), c.ffn_dim, h, true, false, &l.w_gate});
    jobs.push_back({id(T::kUp), c.ffn_dim, h, true, false, &l.w_up});
    jobs.push_back({id(T::kDown), h, c.ffn_dim, true, false, &l.w_down});
  }

  int last_decile = -1;
  int64_t bytes = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Job& job = jobs[j];
    const size_t elem = job.bf16 ? 2 : 4;
    const size_t n = static_cast<size_t>(job.rows * job.cols);
    // Matrices: uninitialised heap (Fill writes every element; zeroing 16 GB first would
    // double the load time). Vectors: Model::owned_, like the other loaders' F32 copies.
    void* dst;
    if (job.bf16) {
      std::shared_ptr<uint16_t[]> buf(new (std::nothrow) uint16_t[n]);
      if (buf == nullptr) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "synthetic %s: cannot allocate %d bytes for tensor %d of %d (%d bytes in all)",
            c.name, n * elem, j, jobs.size(), SyntheticWeightBytes(c)));
      }
      dst = buf.get();
      model->backing_.push_back(std::shared_ptr<const void>(buf, buf.get()));
    } else {
      dst = model->owned_.emplace_back(n * elem).data();
    }
    Fill(job, seed, dst, num_threads);
    *job.target = QuantMatrix{job.bf16 ? GgmlType::kBF16 : GgmlType::kF32, job.rows, job.cols,
                              static_cast<size_t>(job.cols) * elem,
                              static_cast<const uint8_t*>(dst)};
    bytes += static_cast<int64_t>(n * elem);
    const int decile = static_cast<int>(10 * (j + 1) / jobs.size());
    if (progress && decile != last_decile) {
      last_decile = decile;
      progress(absl::StrFormat("synthetic weights: %d%% (%d/%d tensors, %.2f GB)", decile * 10,
                               j + 1, jobs.size(), static_cast<double>(bytes) / 1e9));
    }
  }
  if (c.tied_embeddings) w.output = w.token_embd;
  model->config_ = std::move(c);
  return model;
}

}  // namespace witcert
