#include "server/config/live_config.h"

namespace witcert::config {

absl::Status LiveConfig::Reload(std::vector<std::string>* ignored) {
  std::lock_guard<std::mutex> reload_lock(reload_mu_);
  absl::StatusOr<ServerConfig> loaded = LoadServerConfig(path_);
  if (!loaded.ok()) return loaded.status();
  if (overlay_) {
    if (absl::Status s = overlay_(&*loaded); !s.ok()) return s;
  }
  if (absl::Status s = ValidateServerConfig(*loaded); !s.ok()) return s;

  ServerConfig next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Only the reloadable keys move; the rest stays as started.
    next = current_;
    next.engine.gate = loaded->engine.gate;
    next.log = loaded->log;
    if (ignored != nullptr) *ignored = RestartOnlyChanges(current_, *loaded);
    current_ = next;
    ++reloads_;
  }
  if (apply_) apply_(next);
  return absl::OkStatus();
}

ServerConfig LiveConfig::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

int64_t LiveConfig::reloads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reloads_;
}

std::vector<std::string> RestartOnlyChanges(const ServerConfig& a, const ServerConfig& b) {
  std::vector<std::string> out;
  auto check = [&](bool differs, const char* key) {
    if (differs) out.push_back(key);
  };
  check(a.http.host != b.http.host, "http.host");
  check(a.http.port != b.http.port, "http.port");
  check(a.http.threads != b.http.threads, "http.threads");
  check(a.http.keep_alive_timeout_s != b.http.keep_alive_timeout_s, "http.keep_alive_timeout_s");
  check(a.http.keep_alive_max_requests != b.http.keep_alive_max_requests,
        "http.keep_alive_max_requests");
  check(a.http.max_body_bytes != b.http.max_body_bytes, "http.max_body_bytes");
  check(a.http.api_key != b.http.api_key, "http.api_key");
  check(a.http.model_name != b.http.model_name, "http.model_name");
  check(a.http.max_tokens_limit != b.http.max_tokens_limit, "http.max_tokens_limit");
  check(a.http.default_max_tokens != b.http.default_max_tokens, "http.default_max_tokens");
  check(a.metrics.enabled != b.metrics.enabled, "metrics.enabled");
  check(a.metrics.cert_labels != b.metrics.cert_labels, "metrics.cert_labels");
  check(a.engine.model_path != b.engine.model_path, "model.path");
  check(a.engine.chat_template != b.engine.chat_template, "model.chat_template");
  check(a.engine.threads != b.engine.threads, "model.threads");
  check(a.engine.max_context != b.engine.max_context, "model.max_context");
  check(a.engine.rope_scaling != b.engine.rope_scaling, "model.rope_scaling");
  check(a.engine.model_sampling_defaults != b.engine.model_sampling_defaults, "model.sampling_defaults");
  check(a.engine.kv.k_scheme != b.engine.kv.k_scheme, "kv.k_scheme");
  check(a.engine.kv.v_scheme != b.engine.kv.v_scheme, "kv.v_scheme");
  check(a.engine.kv.block_size != b.engine.kv.block_size, "kv.block_size");
  check(a.engine.kv.memory_bytes != b.engine.kv.memory_bytes, "kv.memory_mb");
  check(a.engine.kv.backing_store_bytes != b.engine.kv.backing_store_bytes, "kv.backing_store_mb");
  check(a.engine.kv.prefix_caching != b.engine.kv.prefix_caching, "kv.prefix_caching");
  check(a.engine.scheduler.max_running != b.engine.scheduler.max_running, "scheduler.max_running");
  check(a.engine.scheduler.max_batched_tokens != b.engine.scheduler.max_batched_tokens,
        "scheduler.max_batched_tokens");
  return out;
}

}  // namespace witcert::config
