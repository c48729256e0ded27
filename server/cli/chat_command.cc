// `witcert chat`: an interactive conversation on the terminal.
#include <cstdio>
#include <optional>
#include <iostream>

#include "server/cli/commands.h"
#include "server/cli/engine_flags.h"
#include "server/cli/generation_io.h"

namespace witcert::cli {

int RunChat(const std::vector<std::string>& argv) {
  Args args("chat", "Chats with the model on the terminal. Type /reset to start over, "
                    "/exit (or Ctrl-D) to leave.");
  DeclareEngineFlags(args);
  args.Flag("system", "", "a system prompt (default: the model's own, if any)");
  args.Flag("max-tokens", "512", "tokens per reply at most");
  args.Flag("temperature", "0.7", "sampling temperature (0 = greedy)");
  args.Flag("seed", "", "RNG seed");
  args.Switch("quiet", "no summary line after each reply");
  if (std::optional<int> done = args.ParseOrExitCode(argv)) return *done;
  EngineConfig config;
  long long max_tokens = 0, seed = 0;
  double temperature = 0;
  for (absl::Status st : {ApplyEngineFlags(args, &config), args.GetInt("max-tokens", &max_tokens),
                          args.GetDouble("temperature", &temperature)}) {
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
      return 2;
    }
  }
  if (args.Has("seed") && !args.GetInt("seed", &seed).ok()) {
    std::fprintf(stderr, "error: --seed expects an integer\n");
    return 2;
  }
  auto loaded = LoadWithProgress(config);
  if (!loaded.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(loaded.status().message()).c_str());
    return 1;
  }
  LoadedEngine& le = **loaded;
  std::vector<ChatMessage> history;
  auto reset = [&] {
    history.clear();
    if (args.Has("system")) history.push_back({"system", args.Get("system")});
  };
  reset();
  std::fprintf(stderr, "witcert: chat ready — /reset to start over, /exit to leave\n");
  std::string line;
  int turn = 0;
  while (true) {
    std::printf("> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      reset();
      continue;
    }
    if (line.empty()) continue;
    history.push_back({"user", line});
    Request request;
    request.id = "cli-chat-" + std::to_string(turn++);
    request.prompt = le.tokenizer->Encode(le.chat_template.Apply(history, true), true);
    request.sampling.temperature = static_cast<float>(temperature);
    if (args.Has("seed")) request.sampling.seed = static_cast<uint64_t>(seed + turn);
    request.stop.max_tokens = static_cast<int32_t>(max_tokens);
    auto result = StreamRequest(*le.engine, std::move(request), stdout);
    std::printf("\n");
    if (!result.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(result.status().message()).c_str());
      history.pop_back();
      continue;
    }
    history.push_back({"assistant", result->text});
    if (!args.On("quiet")) std::fprintf(stderr, "%s\n", SummaryLine(*result).c_str());
  }
  std::printf("\n");
  return 0;
}

}  // namespace witcert::cli
