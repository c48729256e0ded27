// What `witcert serve` starts: front ends (HTTP today; gRPC beside it later) that share one
// engine, one metrics registry and one live config.
//
// Why an interface: the serve command owns process lifetime (signals, reload, shutdown)
// and should not know which protocols it serves. A gRPC front end implements FrontEnd,
// takes the same ServingContext, and is appended to the list the serve command starts.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "engine/runtime/loaded_engine.h"
#include "server/config/live_config.h"
#include "server/metrics/serving_metrics.h"

namespace witcert::server {

struct ServingContext {
  LoadedEngine* engine = nullptr;            // model, tokenizer, chat template, engine loop
  std::string model_id;                      // the id clients send as "model"
  metrics::ServingMetrics* metrics = nullptr;
  config::LiveConfig* config = nullptr;
  // Reloads the config file, records witcert_config_reload_total and logs the outcome.
  std::function<absl::Status()> reload;
};

class FrontEnd {
 public:
  virtual ~FrontEnd() = default;
  // Binds and starts serving on background threads; returns once the port is bound
  // (Unavailable when it cannot be).
  [[nodiscard]] virtual absl::Status Start() = 0;
  // Stops accepting, finishes or cancels what is in flight, joins its threads. Idempotent.
  virtual void Stop() = 0;
  // Where clients connect, for the startup line ("http://127.0.0.1:8000").
  virtual std::string Address() const = 0;
};

}  // namespace witcert::server
