// Single-stream prefill and decode speed of the CPU engine, printed as one JSON line.
//
//   bench_cpu_generate MODEL PROMPT_TOKENS DECODE_TOKENS THREADS [KV_SCHEME] [GATE] [STREAMS]
//                      [TIER_B_FORM]
// TIER_B_FORM (per-token, scale-only, split-max: gate.tier_b_form) matters for int8-dither only.
// The prompt is PROMPT_TOKENS copies of a fixed token sequence; decoding is greedy with EOS
// ignored so every run generates exactly DECODE_TOKENS. Prefill tok/s = prompt / time to first
// token; decode tok/s = (DECODE_TOKENS − 1) / (time from first to last token).
// STREAMS > 1 submits that many such requests at once (each prompt starts with a different
// token so no two are identical) and reports the aggregate: prefill tok/s = all prompt
// tokens / time until every stream has its first token; decode tok/s = tokens generated
// after that point / time from that point to the last token. This is the engine-alone
// batching gain, without HTTP or clients.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "engine/runtime/loaded_engine.h"

namespace {

// *out = the parsed value, or the error printed and false.
template <class T>
bool ParsedArg(const absl::StatusOr<T>& parsed, T* out) {
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", std::string(parsed.status().message()).c_str());
    return false;
  }
  *out = *parsed;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace witcert;
  if (argc < 5) {
    std::fprintf(stderr,
                 "usage: %s MODEL PROMPT_TOKENS DECODE_TOKENS THREADS [KV_SCHEME] [GATE] "
                 "[STREAMS] [TIER_B_FORM]\n",
                 argv[0]);
    return 2;
  }
  EngineConfig config;
  config.model_path = argv[1];
  const int prompt_tokens = std::atoi(argv[2]);
  const int decode_tokens = std::atoi(argv[3]);
  config.threads = std::atoi(argv[4]);
  if (argc > 5) config.kv.k_scheme = config.kv.v_scheme = argv[5];
  if (argc > 6 && !ParsedArg(ParseGateMode(argv[6]), &config.gate.mode)) return 2;
  const int streams = argc > 7 ? std::max(1, std::atoi(argv[7])) : 1;
  if (argc > 8 && !ParsedArg(ParseTierBForm(argv[8]), &config.gate.tier_b_form)) return 2;
  config.scheduler.max_batched_tokens = std::max(512, prompt_tokens);
  auto loaded = LoadEngine(config);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str());
    return 1;
  }
  const std::vector<TokenId> seed =
      (*loaded)->tokenizer->Encode("The quick brown fox jumps over the lazy dog. ", false);
  std::vector<std::shared_ptr<RequestStream>> handles;
  const auto start = std::chrono::steady_clock::now();
  size_t prompt_len = 0;
  for (int s = 0; s < streams; ++s) {
    Request request;
    request.id = "bench-" + std::to_string(s);
    while (static_cast<int>(request.prompt.size()) < prompt_tokens)
      request.prompt.push_back(seed[(request.prompt.size() + s) % seed.size()]);
    request.sampling.temperature = 0.0f;
    request.stop.max_tokens = decode_tokens;
    request.stop.ignore_eos = true;
    prompt_len = request.prompt.size();
    auto stream = (*loaded)->engine->Submit(request);
    if (!stream.ok()) {
      std::fprintf(stderr, "%s\n", stream.status().ToString().c_str());
      return 1;
    }
    handles.push_back(*stream);
  }
  // Each stream is read on its own thread so every token is stamped when it arrives.
  std::vector<std::vector<std::chrono::steady_clock::time_point>> stamps(streams);
  std::vector<RequestEvent> finishes(streams);
  std::vector<std::thread> readers;
  for (int s = 0; s < streams; ++s) {
    readers.emplace_back([&, s] {
      while (true) {
        RequestEvent e = *handles[s]->Next();
        if (e.kind == RequestEvent::Kind::kToken) {
          stamps[s].push_back(std::chrono::steady_clock::now());
        } else if (e.kind == RequestEvent::Kind::kFinish) {
          finishes[s] = std::move(e);
          return;
        }
      }
    });
  }
  for (std::thread& t : readers) t.join();
  auto first = start, last = start;
  for (const auto& st : stamps) {
    if (st.empty()) {
      std::fprintf(stderr, "a stream produced no tokens\n");
      return 1;
    }
    first = std::max(first, st.front());
    last = std::max(last, st.back());
  }
  int64_t after_first = 0, tokens = 0, cells = 0;
  double coverage = 0.0;
  for (int s = 0; s < streams; ++s) {
    tokens += static_cast<int64_t>(stamps[s].size());
    for (const auto& t : stamps[s]) after_first += t > first ? 1 : 0;
    cells += finishes[s].risk.cells;
    coverage += finishes[s].risk.coverage / streams;
  }
  const double ttft = std::chrono::duration<double>(first - start).count();
  const double decode_s = std::chrono::duration<double>(last - first).count();
  std::printf(
      "{\"engine\": \"witcert\", \"threads\": %d, \"kv\": \"%s\", \"gate\": \"%s\", \"tier_b_form\": \"%s\", "
      "\"streams\": %d, \"prompt_tokens\": %zu, \"decode_tokens\": %lld, "
      "\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, \"cells\": %lld, "
      "\"coverage\": %.4f}\n",
      config.threads, config.kv.k_scheme.c_str(), GateModeName(config.gate.mode),
      meter::TierBFormName(config.gate.tier_b_form), streams,
      prompt_len, static_cast<long long>(tokens), streams * prompt_len / ttft,
      after_first / decode_s, static_cast<long long>(cells), coverage);
  return 0;
}
