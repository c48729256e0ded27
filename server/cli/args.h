// A small command-line parser for `witcert <subcommand> --flag value ...`.
//
// Flags are declared with a default and a help line, so `--help` is generated and an
// unknown flag or a malformed value is a clear error rather than a silent default.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace witcert::cli {

class Args {
 public:
  Args(std::string command, std::string summary)
      : command_(std::move(command)), summary_(std::move(summary)) {}

  // Declares a flag taking a value (`--name VALUE` or `--name=VALUE`).
  void Flag(const std::string& name, const std::string& default_value, const std::string& help);
  // Declares a boolean switch (`--name`).
  void Switch(const std::string& name, const std::string& help);

  // Parses argv after the subcommand. `--help` sets help_requested().
  absl::Status Parse(const std::vector<std::string>& argv);
  // Parse() for a subcommand's entry point: prints the error (→ 2) or the help (→ 0) and
  // returns the exit code then; nullopt when the command should run.
  std::optional<int> ParseOrExitCode(const std::vector<std::string>& argv);
  bool help_requested() const { return help_; }
  std::string Help() const;

  const std::string& Get(const std::string& name) const;
  bool Has(const std::string& name) const;  // given on the command line
  bool On(const std::string& name) const;   // switch set
  absl::Status GetInt(const std::string& name, long long* out) const;
  absl::Status GetDouble(const std::string& name, double* out) const;

 private:
  struct Spec {
    std::string default_value;
    std::string help;
    bool is_switch = false;
  };
  std::string command_;
  std::string summary_;
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::string> values_;
  bool help_ = false;
};

}  // namespace witcert::cli
