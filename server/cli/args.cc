#include "server/cli/args.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace witcert::cli {

void Args::Flag(const std::string& name, const std::string& default_value,
                const std::string& help) {
  order_.push_back(name);
  specs_[name] = {default_value, help, false};
}

void Args::Switch(const std::string& name, const std::string& help) {
  order_.push_back(name);
  specs_[name] = {"", help, true};
}

absl::Status Args::Parse(const std::vector<std::string>& argv) {
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("unexpected argument '%s' (see witcert %s --help)", arg, command_));
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto spec = specs_.find(name);
    if (spec == specs_.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("unknown flag --%s (see witcert %s --help)", name, command_));
    }
    if (spec->second.is_switch) {
      if (has_value) return absl::InvalidArgumentError("--" + name + " takes no value");
      values_[name] = "true";
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argv.size()) {
        return absl::InvalidArgumentError(absl::StrFormat("--%s needs a value", name));
      }
      value = argv[++i];
    }
    values_[name] = value;
  }
  return absl::OkStatus();
}

std::optional<int> Args::ParseOrExitCode(const std::vector<std::string>& argv) {
  if (absl::Status s = Parse(argv); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (help_requested()) {
    std::printf("%s", Help().c_str());
    return 0;
  }
  return std::nullopt;
}

std::string Args::Help() const {
  std::string out = absl::StrFormat("usage: witcert %s [flags]\n\n%s\n\nflags:\n", command_,
                                    summary_);
  for (const std::string& name : order_) {
    const Spec& spec = specs_.at(name);
    std::string left = spec.is_switch ? "--" + name : "--" + name + " VALUE";
    absl::StrAppendFormat(&out, "  %-26s %s", left, spec.help);
    if (!spec.is_switch && !spec.default_value.empty())
      absl::StrAppendFormat(&out, " (default: %s)", spec.default_value);
    out += "\n";
  }
  absl::StrAppend(&out, "  --help                     show this help\n");
  return out;
}

const std::string& Args::Get(const std::string& name) const {
  auto it = values_.find(name);
  return it != values_.end() ? it->second : specs_.at(name).default_value;
}

bool Args::Has(const std::string& name) const { return values_.count(name) > 0; }
bool Args::On(const std::string& name) const { return Has(name) && Get(name) == "true"; }

absl::Status Args::GetInt(const std::string& name, long long* out) const {
  const std::string& text = Get(name);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s expects an integer, got '%s'", name, text));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status Args::GetDouble(const std::string& name, double* out) const {
  const std::string& text = Get(name);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s expects a number, got '%s'", name, text));
  }
  *out = v;
  return absl::OkStatus();
}

}  // namespace witcert::cli
