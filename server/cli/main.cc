// `witcert`: the WitCert command line — generate, chat and serve.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "server/cli/commands.h"

namespace {

constexpr char kUsage[] =
    "WitCert: an LLM inference server whose quantized KV cache carries a sound, per-step\n"
    "certificate of the attention error it causes.\n\n"
    "usage: witcert <command> [flags]\n\n"
    "commands:\n"
    "  generate   complete a prompt and print the result\n"
    "  chat       chat with the model on the terminal\n"
    "  serve      run the OpenAI-compatible HTTP / gRPC server\n\n"
    "`witcert <command> --help` lists a command's flags.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    std::printf("%s", kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  std::vector<std::string> rest(argv + 2, argv + argc);
  if (command == "generate") return witcert::cli::RunGenerate(rest);
  if (command == "chat") return witcert::cli::RunChat(rest);
  if (command == "serve") return witcert::cli::RunServe(rest);
  std::fprintf(stderr, "error: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
