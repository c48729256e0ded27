// Prefill tokens/s of the CUDA backend on a synthetic model: one prompt of P tokens run as
// chunks of C tokens (the engine's chunked prefill). The first chunk attends causally to
// itself (PrefillAttentionCuda, tensor cores); every later chunk's rows attend to the stored KV
// through the chunked-prefill kernel (MeteredPrefillCuda), and, with the meter on, each
// later-chunk row is a certificate cell, exactly as in serving. The items carry no Tier B
// budget (δ_loc = 0), so int8-dither's cells are Tier A, unless the scheme is named with a
// suffix: "int8-dither+tier-b" (δ_loc = 1e-9, the per-token min of Tier A and B),
// "int8-dither+scale-only" or "int8-dither+split-max" (the same δ_loc in Tier B's other forms,
// GatePolicy::tier_b_form).
//
// Usage: bench_prefill_gpu [preset=llama-3.1-8b] [prompts=8192,32768] [chunk=2048]
//                          [schemes=int8-rtn,fp16]
// Per (scheme, meter, prompt): wall time of all chunks' Forward() calls (input packing,
// GEMMs, attention, KV write, logits of the last token, stream sync), best of 2 runs after a
// warm-up run. Prints one markdown row each.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model/synthetic_model.h"
#include "engine/runtime/loaded_engine.h"

namespace witcert {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

std::vector<int64_t> ParseList(const char* s) {
  std::vector<int64_t> out;
  for (absl::string_view p : absl::StrSplit(s, ',')) {
    int64_t v = 0;
    if (absl::SimpleAtoi(p, &v) && v > 0) out.push_back(v);
  }
  return out;
}

// One prompt of `prompt` tokens in chunks; returns seconds, or < 0 on error (printed).
double RunPrompt(CudaBackend& backend, int vocab, int64_t prompt, int64_t chunk, const GatePolicy* policy,
                 double delta_loc) {
  KvCache& kv = backend.kv_cache();
  constexpr SeqId kSeq = 0;
  kv.FreeSequence(kSeq);
  if (!kv.AddSequence(kSeq).ok() || !kv.Reserve(kSeq, prompt).ok()) {
    std::fprintf(stderr, "KV reservation of %lld tokens failed\n", static_cast<long long>(prompt));
    return -1;
  }
  std::vector<TokenId> tokens(prompt);
  for (int64_t i = 0; i < prompt; ++i) tokens[i] = static_cast<TokenId>((i * 7919 + 13) % vocab);
  const auto t0 = Clock::now();
  for (int64_t p0 = 0; p0 < prompt; p0 += chunk) {
    const int64_t len = std::min(chunk, prompt - p0);
    ForwardItem item{.seq = kSeq, .tokens = absl::MakeSpan(tokens.data() + p0, len), .start_pos = p0,
                     .compute_logits = p0 + len == prompt, .decode_step = 0,
                     .delta_loc = policy != nullptr ? delta_loc : 0.0, .policy = policy};
    ForwardResult r;
    absl::Status st = backend.Forward(absl::MakeSpan(&item, 1), &r);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return -1;
    }
  }
  return Seconds(t0);
}

int Run(int argc, char** argv) {
  const std::string preset = argc > 1 ? argv[1] : "llama-3.1-8b";
  const std::vector<int64_t> prompts = ParseList(argc > 2 ? argv[2] : "8192,32768");
  const int64_t chunk = argc > 3 ? std::atoll(argv[3]) : 2048;
  const std::vector<std::string> schemes =
      absl::StrSplit(argc > 4 ? argv[4] : "int8-rtn,fp16", ',', absl::SkipEmpty());
  if (prompts.empty() || chunk <= 0) {
    std::fprintf(stderr, "usage: %s [preset] [prompts=8192,32768] [chunk=2048] [schemes=int8-rtn,fp16]\n", argv[0]);
    return 2;
  }
  if (!CudaBackend::DeviceAvailable()) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  auto model = SyntheticModelLoader::Create(preset, 1, {}, 0);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  const ModelConfig& c = (*model)->config();
  const int64_t longest = *std::max_element(prompts.begin(), prompts.end());
  GatePolicy observe;
  observe.mode = GateMode::kObserve;
  std::printf("| model | KV | meter | prompt | chunk | seconds | prefill tok/s |\n|---|---|---|---|---|---|---|\n");
  for (const std::string& label : schemes) {
    // "scheme+tier-b" / "+scale-only" / "+split-max": a Tier B budget, in the named form.
    const std::string scheme_name = label.substr(0, label.find('+'));
    const std::string suffix = label.size() > scheme_name.size() ? label.substr(scheme_name.size() + 1) : "";
    observe.tier_b_form = meter::TierBForm::kPerToken;
    if (!suffix.empty() && suffix != "tier-b") {
      const absl::StatusOr<meter::TierBForm> form = ParseTierBForm(suffix);
      if (!form.ok()) {
        std::fprintf(stderr, "unknown suffix '+%s' (tier-b, scale-only, split-max)\n", suffix.c_str());
        return 2;
      }
      observe.tier_b_form = *form;
    }
    const double delta_loc = suffix.empty() ? 0.0 : 1e-9;
    const char* scheme = scheme_name.c_str();
    KvConfig kv;
    kv.block_size = 16;
    kv.k_scheme = kv.v_scheme = scheme;
    auto o = MakeKvOptions(c, kv);
    if (!o.ok()) {
      std::fprintf(stderr, "%s\n", o.status().ToString().c_str());
      return 1;
    }
    o->num_blocks = (longest + 15) / 16 + 16;  // one prompt of the longest length
    auto b = CudaBackend::Create(**model, *o);
    if (!b.ok()) {
      std::fprintf(stderr, "%s\n", b.status().ToString().c_str());
      return 1;
    }
    for (const GatePolicy* policy : {static_cast<const GatePolicy*>(&observe), static_cast<const GatePolicy*>(nullptr)}) {
      for (int64_t prompt : prompts) {
        if (RunPrompt(**b, c.vocab_size, std::min<int64_t>(prompt, 2 * chunk), chunk, policy, delta_loc) < 0) return 1;
        double best = 1e30;
        for (int rep = 0; rep < 2; ++rep) {
          const double t = RunPrompt(**b, c.vocab_size, prompt, chunk, policy, delta_loc);
          if (t < 0) return 1;
          best = std::min(best, t);
        }
        std::printf("| synthetic:%s | %s | %s | %lld | %lld | %.3f | %.0f |\n", preset.c_str(), label.c_str(),
                    policy != nullptr ? "observe" : "off", static_cast<long long>(prompt),
                    static_cast<long long>(chunk), best, prompt / best);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace witcert

int main(int argc, char** argv) { return witcert::Run(argc, argv); }
