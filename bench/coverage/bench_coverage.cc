// Certificate coverage on real prompts: the fraction of (layer, head, step) cells certified
// without repair, per KV scheme and δ, and the page-ins the repair gate needs per 1k cells.
//
//   bench_coverage MODEL [DECODE_TOKENS] [TV_THRESHOLD]
//   bench_coverage MODEL DECODE_TOKENS sweep   (observe only: coverage at several thresholds
//                                               and the median TV bound, from every cell)
// Prompts: natural prose, code, and a needle-in-a-haystack task (~1.5k tokens). Prefill runs
// in chunks of 256 tokens, so every chunk after the first reads stored KV and is metered like
// a decode step. Output: a Markdown table.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/runtime/loaded_engine.h"

namespace witcert {
namespace {

constexpr char kNatural[] =
    "The river had been rising for three days when the ferryman finally admitted that the "
    "crossing would have to close. He had worked the same stretch of water for thirty years, "
    "long enough to read its moods the way other men read newspapers, and he did not like what "
    "he saw: the colour had changed from green to the brown of strong tea, branches turned "
    "slowly in the current, and the sound of it at night had deepened into a steady roar. "
    "Travellers who arrived at the landing that morning found a hand-written sign nailed to the "
    "post. Some argued, some waited, and a few walked the eleven miles to the bridge upstream. "
    "Summarize the situation in two sentences.";

constexpr char kCode[] =
    "#include <vector>\n#include <algorithm>\n\n// Returns the indices that sort `v`.\n"
    "std::vector<int> Argsort(const std::vector<double>& v) {\n"
    "  std::vector<int> idx(v.size());\n  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;\n"
    "  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] < v[b]; });\n"
    "  return idx;\n}\n\nint main() {\n  std::vector<double> data = {3.5, -1.0, 2.25, 8.0};\n"
    "  auto order = Argsort(data);\n"
    "Explain what this program does and write a unit test for Argsort.";

std::string Needle() {
  std::string hay;
  const char* filler[] = {
      "The grass is green. The sky is blue. The sun is yellow. Here we go. ",
      "There and back again, the walk was long and the day was warm. ",
      "Numbers were written on the wall of the old mill, faded by rain. ",
  };
  for (int i = 0; i < 60; ++i) {
    hay += filler[i % 3];
    if (i == 31) hay += "The secret passkey is 71432. Remember it. ";
  }
  return hay + "What is the secret passkey mentioned above? The passkey is";
}

struct Scheme {
  const char* k;
  const char* v;
};

}  // namespace
}  // namespace witcert

int main(int argc, char** argv) {
  using namespace witcert;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL [DECODE_TOKENS] [TV_THRESHOLD | sweep [SCHEME]]\n", argv[0]);
    return 2;
  }
  const int decode = argc > 2 ? std::atoi(argv[2]) : 32;
  const bool sweep = argc > 3 && std::string(argv[3]) == "sweep";
  const float threshold = argc > 3 && !sweep ? std::strtof(argv[3], nullptr) : 0.05f;
  const std::string only = sweep && argc > 4 ? argv[4] : "";  // sweep one scheme
  const std::vector<std::pair<std::string, std::string>> prompts = {
      {"natural", kNatural}, {"code", kCode}, {"needle", Needle()}};
  const Scheme schemes[] = {{"fp16", "fp16"},         {"fp8-e4m3", "fp8-e4m3"},
                            {"fp8-e4m3-raw", "fp8-e4m3-raw"}, {"int8-rtn", "int8-rtn"},
                            {"int8-dither", "int8-dither"},   {"int4-rtn", "int4-rtn"},
                            {"kivi2", "kivi2"}};
  const double deltas[] = {1e-2, 2e-5};
  std::printf("| K/V scheme | δ | prompt | cells | coverage | Tier B cells | max TV bound | "
              "page-ins / 1k cells (repair) | uncertified after repair |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  std::vector<float> tv_bounds;  // every cell's TV bound before the gate (sweep mode)
  auto run = [&](LoadedEngine& le, const std::string& name,
                 const std::string& text) -> absl::StatusOr<RequestEvent> {
    Request request;
    request.id = name;
    request.prompt = le.tokenizer->Encode(le.chat_template.Apply({{"user", text}}, true), true);
    request.sampling.temperature = 0.0f;
    request.stop.max_tokens = decode;
    request.stop.ignore_eos = true;
    request.emit_cells = sweep;
    auto stream = le.engine->Submit(request);
    if (!stream.ok()) return stream.status();
    while (true) {
      RequestEvent e = *(*stream)->Next();
      if (e.kind == RequestEvent::Kind::kCells) {
        for (const CellRecord& c : e.cells) tv_bounds.push_back(c.tv_before);
      }
      if (e.kind == RequestEvent::Kind::kFinish) return e;
    }
  };
  if (sweep) {
    const float thresholds[] = {0.01f, 0.05f, 0.1f, 0.2f, 0.5f};
    std::printf("| K/V scheme | δ | prompt | cells | median TV bound | coverage at TV ≤ 0.01 | "
                "0.05 | 0.1 | 0.2 | 0.5 |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- "
                "| --- |\n");
    for (const Scheme& scheme : schemes) {
      if (!only.empty() && only != scheme.k) continue;
      const bool tier_b = std::string(scheme.k) == "int8-dither";
      for (double delta : deltas) {
        // Tier B schemes in their three forms (GatePolicy::tier_b_form), side by side.
        for (meter::TierBForm form : meter::kTierBForms) {
          const bool other_form = form != meter::TierBForm::kPerToken;
          if (!tier_b && (delta != deltas[0] || other_form)) continue;
          EngineConfig config;
          config.model_path = argv[1];
          config.kv.k_scheme = scheme.k;
          config.kv.v_scheme = scheme.v;
          config.gate.mode = GateMode::kObserve;
          config.gate.delta_req = delta;
          config.gate.tier_b_form = form;
          config.scheduler.max_batched_tokens = 256;
          auto loaded = LoadEngine(config);
          if (!loaded.ok()) return 1;
          for (const auto& [name, text] : prompts) {
            tv_bounds.clear();
            auto observed = run(**loaded, name, text);
            if (!observed.ok() || tv_bounds.empty()) return 1;
            std::vector<float> sorted = tv_bounds;
            std::sort(sorted.begin(), sorted.end());
            std::printf("| %s / %s%s | %s | %s | %zu | %.3g |", scheme.k, scheme.v,
                        other_form ? absl::StrCat(" (", meter::TierBFormName(form), ")").c_str() : "",
                        tier_b ? absl::StrFormat("%g", delta).c_str() : "–", name.c_str(),
                        sorted.size(), sorted[sorted.size() / 2]);
            for (float t : thresholds) {
              const size_t n = std::upper_bound(sorted.begin(), sorted.end(), t) - sorted.begin();
              std::printf(" %.1f%% |", 100.0 * n / sorted.size());
            }
            std::printf("\n");
            std::fflush(stdout);
          }
        }
      }
    }
    return 0;
  }
  for (const Scheme& scheme : schemes) {
    for (double delta : deltas) {
      const bool tier_b = std::string(scheme.k) == "int8-dither";
      if (!tier_b && delta != deltas[0]) continue;  // δ only matters for Tier B
      std::unique_ptr<LoadedEngine> engines[2];
      const GateMode modes[2] = {GateMode::kObserve, GateMode::kRepair};
      for (int m = 0; m < 2; ++m) {
        EngineConfig config;
        config.model_path = argv[1];
        config.kv.k_scheme = scheme.k;
        config.kv.v_scheme = scheme.v;
        config.gate.mode = modes[m];
        config.gate.tv_threshold = threshold;
        config.gate.delta_req = delta;
        config.gate.pagein_budget_per_step = 8;
        config.scheduler.max_batched_tokens = 256;
        auto loaded = LoadEngine(config);
        if (!loaded.ok()) {
          std::fprintf(stderr, "%s: %s\n", scheme.k, loaded.status().ToString().c_str());
          return 1;
        }
        engines[m] = std::move(*loaded);
      }
      for (const auto& [name, text] : prompts) {
        auto observed = run(*engines[0], name, text);
        auto repaired = run(*engines[1], name, text);
        if (!observed.ok() || !repaired.ok()) return 1;
        const RiskSummary& o = observed->risk;
        const RiskSummary& r = repaired->risk;
        std::printf("| %s / %s | %s | %s (%lld tok) | %lld | %.1f%% | %s | %.3g | %.1f | %lld |\n",
                    scheme.k, scheme.v, tier_b ? absl::StrFormat("%g", delta).c_str() : "–",
                    name.c_str(), static_cast<long long>(observed->usage.prompt_tokens),
                    static_cast<long long>(o.cells), 100.0 * o.coverage,
                    tier_b ? "yes" : "no", o.max_tv_before,
                    r.cells ? 1000.0 * r.pageins / r.cells : 0.0,
                    static_cast<long long>(r.uncertified_cells));
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
