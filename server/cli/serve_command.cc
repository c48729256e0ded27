// `witcert serve`: placeholder until the HTTP/gRPC server lands (issue: the server).
#include <cstdio>

#include "server/cli/commands.h"

namespace witcert::cli {

int RunServe(const std::vector<std::string>& argv) {
  std::fprintf(stderr, "error: `witcert serve` is not available in this build yet; "
                       "use `witcert chat` or `witcert generate`\n");
  return 1;
}

}  // namespace witcert::cli
