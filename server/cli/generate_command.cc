// `witcert generate`: one completion, printed as it is generated.
#include <cstdio>
#include <optional>

#include "server/cli/commands.h"
#include "server/cli/engine_flags.h"
#include "server/cli/generation_io.h"

namespace witcert::cli {

int RunGenerate(const std::vector<std::string>& argv) {
  Args args("generate", "Generates a completion of --prompt and prints it.");
  DeclareEngineFlags(args);
  args.Flag("prompt", "", "the prompt text (required)");
  args.Switch("chat", "wrap the prompt as a user message in the model's chat template");
  args.Flag("max-tokens", "128", "tokens to generate at most");
  args.Flag("temperature", "0.8", "sampling temperature (0 = greedy)");
  args.Flag("top-p", "0.95", "nucleus sampling mass");
  args.Flag("top-k", "40", "keep the k most likely tokens (0 = off)");
  args.Flag("min-p", "0.05", "drop tokens below min-p times the top probability");
  args.Flag("seed", "", "RNG seed (makes sampling reproducible)");
  args.Flag("stop", "", "a stop string");
  args.Switch("ignore-eos", "keep generating past end-of-generation tokens");
  if (std::optional<int> done = args.ParseOrExitCode(argv)) return *done;
  if (!args.Has("prompt")) {
    std::fprintf(stderr, "error: --prompt is required (see witcert generate --help)\n");
    return 2;
  }
  EngineConfig config;
  Request request;
  long long max_tokens = 0, top_k = 0, seed = 0;
  double temperature = 0, top_p = 0, min_p = 0;
  for (absl::Status st : {ApplyEngineFlags(args, &config), args.GetInt("max-tokens", &max_tokens),
                          args.GetInt("top-k", &top_k), args.GetDouble("temperature", &temperature),
                          args.GetDouble("top-p", &top_p), args.GetDouble("min-p", &min_p)}) {
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
      return 2;
    }
  }
  if (args.Has("seed")) {
    if (absl::Status st = args.GetInt("seed", &seed); !st.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
      return 2;
    }
    request.sampling.seed = static_cast<uint64_t>(seed);
  }
  request.sampling.temperature = static_cast<float>(temperature);
  request.sampling.top_p = static_cast<float>(top_p);
  request.sampling.top_k = static_cast<int32_t>(top_k);
  request.sampling.min_p = static_cast<float>(min_p);
  request.stop.max_tokens = static_cast<int32_t>(max_tokens);
  request.stop.ignore_eos = args.On("ignore-eos");
  if (args.Has("stop")) request.stop.stop.push_back(args.Get("stop"));

  auto loaded = LoadWithProgress(config);
  if (!loaded.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(loaded.status().message()).c_str());
    return 1;
  }
  LoadedEngine& le = **loaded;
  if (args.On("chat")) {
    const std::string text = le.chat_template.Apply({{"user", args.Get("prompt")}}, true);
    request.prompt = le.tokenizer->Encode(text, /*parse_special=*/true);
  } else {
    request.prompt = le.tokenizer->Encode(args.Get("prompt"), /*parse_special=*/false,
                                          /*add_bos=*/true);
  }
  request.id = "cli-generate";
  auto result = StreamRequest(*le.engine, std::move(request), stdout);
  std::printf("\n");
  if (!result.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(result.status().message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "%s\n", SummaryLine(*result).c_str());
  return 0;
}

}  // namespace witcert::cli
