// Single-stream prefill and decode speed of the CPU engine, printed as one JSON line.
//
//   bench_cpu_generate MODEL PROMPT_TOKENS DECODE_TOKENS THREADS [KV_SCHEME] [GATE]
// The prompt is PROMPT_TOKENS copies of a fixed token sequence; decoding is greedy with EOS
// ignored so every run generates exactly DECODE_TOKENS. Prefill tok/s = prompt / time to first
// token; decode tok/s = (DECODE_TOKENS − 1) / (time from first to last token).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/runtime/loaded_engine.h"

int main(int argc, char** argv) {
  using namespace witcert;
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s MODEL PROMPT_TOKENS DECODE_TOKENS THREADS [KV_SCHEME] [GATE]\n",
                 argv[0]);
    return 2;
  }
  EngineConfig config;
  config.model_path = argv[1];
  const int prompt_tokens = std::atoi(argv[2]);
  const int decode_tokens = std::atoi(argv[3]);
  config.threads = std::atoi(argv[4]);
  if (argc > 5) config.kv.k_scheme = config.kv.v_scheme = argv[5];
  if (argc > 6) {
    auto mode = ParseGateMode(argv[6]);
    if (!mode.ok()) {
      std::fprintf(stderr, "%s\n", std::string(mode.status().message()).c_str());
      return 2;
    }
    config.gate.mode = *mode;
  }
  config.scheduler.max_batched_tokens = std::max(512, prompt_tokens);
  auto loaded = LoadEngine(config);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str());
    return 1;
  }
  const std::vector<TokenId> seed =
      (*loaded)->tokenizer->Encode("The quick brown fox jumps over the lazy dog. ", false);
  Request request;
  request.id = "bench";
  while (static_cast<int>(request.prompt.size()) < prompt_tokens)
    request.prompt.push_back(seed[request.prompt.size() % seed.size()]);
  request.sampling.temperature = 0.0f;
  request.stop.max_tokens = decode_tokens;
  request.stop.ignore_eos = true;

  auto stream = (*loaded)->engine->Submit(request);
  if (!stream.ok()) {
    std::fprintf(stderr, "%s\n", stream.status().ToString().c_str());
    return 1;
  }
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point first, last;
  int tokens = 0;
  RequestEvent finish;
  while (true) {
    RequestEvent e = *(*stream)->Next();
    if (e.kind == RequestEvent::Kind::kToken) {
      last = std::chrono::steady_clock::now();
      if (tokens++ == 0) first = last;
    } else if (e.kind == RequestEvent::Kind::kFinish) {
      finish = std::move(e);
      break;
    }
  }
  const double ttft = std::chrono::duration<double>(first - start).count();
  const double decode_s = std::chrono::duration<double>(last - first).count();
  std::printf(
      "{\"engine\": \"witcert\", \"threads\": %d, \"kv\": \"%s\", \"gate\": \"%s\", "
      "\"prompt_tokens\": %d, \"decode_tokens\": %d, \"prefill_tok_s\": %.2f, "
      "\"decode_tok_s\": %.2f, \"cells\": %lld, \"coverage\": %.4f}\n",
      config.threads, config.kv.k_scheme.c_str(), GateModeName(config.gate.mode),
      static_cast<int>(request.prompt.size()), tokens, request.prompt.size() / ttft,
      (tokens - 1) / decode_s, static_cast<long long>(finish.risk.cells), finish.risk.coverage);
  return 0;
}
