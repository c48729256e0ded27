// libFuzzer entry point for the server's config file (JSON with comments): the bytes of a file
// an operator edits and reloads while the server runs. Any bytes must give a config or an
// error that names what is wrong; never a crash or an exception. A parsed config goes on through
// what startup and reload do with it: validation and the restart-only diff against the default.
#include <cstdint>
#include <string_view>

#include "server/config/live_config.h"
#include "server/config/server_config.h"
#include "tests/testing/fuzz_check.h"

using witcert::testing::FuzzCheck;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace witcert::config;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  static const ServerConfig kDefault = *ParseServerConfig(DefaultConfigText());
  for (const ServerConfig* base : {&kDefault, static_cast<const ServerConfig*>(nullptr)}) {
    const absl::StatusOr<ServerConfig> parsed = base != nullptr ? ParseServerConfig(text, *base) : ParseServerConfig(text);
    if (!parsed.ok()) {
      FuzzCheck(parsed.status().code() == absl::StatusCode::kInvalidArgument);
      FuzzCheck(!parsed.status().message().empty());
      continue;
    }
    const absl::Status valid = ValidateServerConfig(*parsed);
    FuzzCheck(valid.ok() || !valid.message().empty());
    (void)RestartOnlyChanges(kDefault, *parsed);
  }
  return 0;
}
