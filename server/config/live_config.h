// The config in force, and reloading it from its file while the server runs (SIGHUP or
// POST /admin/reload).
//
// Why only some keys: the gate policy (thresholds, δ, page-in budget, audit rate) and the
// log level can change between requests without touching the model or the KV pool; the
// engine swaps its policy for requests admitted afterwards, so nothing in flight is dropped.
// Everything else (model, KV pool, ports) needs a restart: a reload that changes it is
// applied for the reloadable keys and the rest is logged as ignored. An invalid file changes
// nothing.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/config/server_config.h"

namespace witcert::config {

class LiveConfig {
 public:
  // `path` "" → the embedded default only (reload then re-reads nothing new). `overlay`
  // re-applies command-line flags on top of what the file says.
  using Overlay = std::function<absl::Status(ServerConfig*)>;
  using Apply = std::function<void(const ServerConfig&)>;

  LiveConfig(std::string path, ServerConfig initial, Overlay overlay)
      : path_(std::move(path)), current_(std::move(initial)), overlay_(std::move(overlay)) {}

  // Called with the new config after each successful reload (and never on failure).
  void OnApply(Apply apply) { apply_ = std::move(apply); }

  // Re-reads the file, validates, applies. On error the config in force stays and the
  // returned status says why (the message names the key). `ignored` (optional) receives
  // the changed keys that need a restart.
  absl::Status Reload(std::vector<std::string>* ignored = nullptr);

  ServerConfig current() const;
  const std::string& path() const { return path_; }
  int64_t reloads() const;

 private:
  const std::string path_;
  mutable std::mutex mu_;
  ServerConfig current_;
  Overlay overlay_;
  Apply apply_;
  int64_t reloads_ = 0;
  std::mutex reload_mu_;  // one reload at a time
};

// Keys that differ between `a` and `b` and are not reloadable (for the "needs a restart"
// log line).
std::vector<std::string> RestartOnlyChanges(const ServerConfig& a, const ServerConfig& b);

}  // namespace witcert::config
