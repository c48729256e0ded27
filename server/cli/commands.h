// The subcommands of the `witcert` executable. Each returns the process exit code.
#pragma once

#include <string>
#include <vector>

namespace witcert::cli {

int RunGenerate(const std::vector<std::string>& argv);
int RunChat(const std::vector<std::string>& argv);
int RunServe(const std::vector<std::string>& argv);

}  // namespace witcert::cli
