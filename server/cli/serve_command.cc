// `witcert serve`: loads the engine, starts the front ends (OpenAI-compatible HTTP; gRPC
// joins the same list), and owns the process: SIGHUP reloads the config, SIGINT / SIGTERM
// stop it cleanly.
//
// Signals are blocked before any thread starts and taken synchronously by the main thread
// with sigwait, so reload and shutdown run as ordinary code rather than in a handler.
#ifdef WITCERT_NO_SERVER
// Built without the server's dependencies (-DWITCERT_SERVER=OFF).
#include <cstdio>

#include "server/cli/commands.h"

namespace witcert::cli {
int RunServe(const std::vector<std::string>& argv) {
  std::fprintf(stderr, "error: this witcert was built without the server "
                       "(-DWITCERT_SERVER=OFF); use `witcert chat` or `witcert generate`\n");
  return 1;
}
}  // namespace witcert::cli
#else
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"
#include "server/cli/args.h"
#include "server/cli/commands.h"
#include "server/cli/engine_flags.h"
#include "server/cli/generation_io.h"
#include "server/config/live_config.h"
#include "server/grpc/grpc_front_end.h"
#include "server/http/http_server.h"
#include "server/metrics/serving_metrics.h"

namespace witcert::cli {
namespace {

absl::Status ApplyServeFlags(const Args& args, config::ServerConfig* c) {
  if (absl::Status s = ApplyEngineFlags(args, &c->engine); !s.ok()) return s;
  if (args.Has("host")) c->http.host = args.Get("host");
  if (args.Has("port")) {
    long long port = 0;
    if (absl::Status s = args.GetInt("port", &port); !s.ok()) return s;
    if (port < 1 || port > 65535) return absl::InvalidArgumentError("--port must be in [1, 65535]");
    c->http.port = static_cast<int32_t>(port);
  }
  if (args.Has("grpc-host")) c->grpc.host = args.Get("grpc-host");
  if (args.Has("grpc-port")) {
    long long port = 0;
    if (absl::Status s = args.GetInt("grpc-port", &port); !s.ok()) return s;
    if (port < 0 || port > 65535)
      return absl::InvalidArgumentError("--grpc-port must be in [0, 65535] (0 = no gRPC)");
    c->grpc.port = static_cast<int32_t>(port);
  }
  if (args.Has("log-level")) c->log.level = args.Get("log-level");
  if (args.Has("cert-labels")) {
    auto labels = config::ParseCertLabels(args.Get("cert-labels"));
    if (!labels.ok()) return absl::InvalidArgumentError(absl::StrCat("--cert-labels: ", labels.status().message()));
    c->metrics.cert_labels = *labels;
  }
  return config::ValidateServerConfig(*c);
}

void SetLogLevel(const std::string& level) {
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace

int RunServe(const std::vector<std::string>& argv) {
  // Before any thread exists, so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a vanished client is a failed write, not a dead server

  Args args("serve", "Serve the model over an OpenAI-compatible HTTP API with Prometheus "
                     "metrics at /metrics.");
  args.Flag("config", "", "config file (JSON with comments); see config/witcert.default.jsonc");
  args.Flag("host", "127.0.0.1", "address to bind");
  args.Flag("port", "8000", "TCP port");
  args.Flag("grpc-host", "127.0.0.1", "address to bind the gRPC API");
  args.Flag("grpc-port", "50051", "gRPC port (0 = no gRPC)");
  args.Flag("log-level", "info", "trace | debug | info | warn | error | critical | off");
  args.Flag("cert-labels", "layer_head", "certificate metric labels: layer_head | layer | off");
  DeclareEngineFlags(args);
  if (absl::Status s = args.Parse(argv); !s.ok()) {
    std::fprintf(stderr, "error: %s\n\n%s", std::string(s.message()).c_str(), args.Help().c_str());
    return 2;
  }
  if (args.help_requested()) {
    std::printf("%s", args.Help().c_str());
    return 0;
  }

  const std::string config_path = args.Get("config");
  absl::StatusOr<config::ServerConfig> loaded = config::LoadServerConfig(config_path);
  if (!loaded.ok()) {
    std::fprintf(stderr, "witcert: config error: %s\n", std::string(loaded.status().message()).c_str());
    return 2;
  }
  config::ServerConfig cfg = *loaded;
  if (absl::Status s = ApplyServeFlags(args, &cfg); !s.ok()) {
    std::fprintf(stderr, "witcert: error: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  SetLogLevel(cfg.log.level);

  absl::StatusOr<std::unique_ptr<LoadedEngine>> le = LoadWithProgress(cfg.engine);
  if (!le.ok()) {
    std::fprintf(stderr, "witcert: error: %s\n", le.status().ToString().c_str());
    return 1;
  }
  const std::string model_id =
      cfg.http.model_name.empty() ? std::filesystem::path(cfg.engine.model_path).stem().string()
                                  : cfg.http.model_name;

  metrics::ServingMetrics serving_metrics;
  serving_metrics.BindEngine((*le)->engine.get(), cfg.metrics.cert_labels);

  config::LiveConfig live(config_path, cfg, [&args](config::ServerConfig* c) {
    return ApplyServeFlags(args, c);
  });
  Engine* engine = (*le)->engine.get();
  live.OnApply([engine](const config::ServerConfig& c) {
    engine->ReloadPolicy(c.engine.gate);
    SetLogLevel(c.log.level);
  });

  server::ServingContext ctx;
  ctx.engine = le->get();
  ctx.model_id = model_id;
  ctx.metrics = &serving_metrics;
  ctx.config = &live;
  ctx.reload = [&live, &serving_metrics]() -> absl::Status {
    std::vector<std::string> ignored;
    absl::Status s = live.Reload(&ignored);
    serving_metrics.ConfigReload(s.ok());
    if (!s.ok()) {
      spdlog::error("config reload rejected, the previous config stays in force: {}",
                    std::string(s.message()));
      return s;
    }
    spdlog::info("config reloaded from {}", live.path().empty() ? "(defaults)" : live.path());
    if (!ignored.empty()) {
      spdlog::warn("config keys that need a restart were left unchanged: {}",
                   absl::StrJoin(ignored, ", "));
    }
    return s;
  };

  std::vector<std::unique_ptr<server::FrontEnd>> front_ends;
  front_ends.push_back(std::make_unique<http::HttpServer>(&ctx, cfg.http));
  if (cfg.grpc.enabled && cfg.grpc.port != 0) {
    front_ends.push_back(std::make_unique<grpc_api::GrpcFrontEnd>(
        le->get(), cfg, absl::StrCat(cfg.grpc.host, ":", cfg.grpc.port)));
  }
  for (auto& fe : front_ends) {
    if (absl::Status s = fe->Start(); !s.ok()) {
      std::fprintf(stderr, "witcert: error: %s\n", std::string(s.message()).c_str());
      for (auto& other : front_ends) other->Stop();
      return 1;
    }
  }
  std::printf("witcert: serving %s at %s (OpenAI API at /v1)\n", model_id.c_str(),
              front_ends.front()->Address().c_str());
  for (size_t i = 1; i < front_ends.size(); ++i)
    std::printf("witcert: also serving %s\n", front_ends[i]->Address().c_str());
  std::fflush(stdout);

  while (true) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig == SIGHUP) {
      spdlog::info("SIGHUP: reloading the config");
      (void)ctx.reload();
      continue;
    }
    spdlog::info("signal {}: shutting down", sig);
    break;
  }
  for (auto& fe : front_ends) fe->Stop();
  return 0;
}

}  // namespace witcert::cli
#endif  // WITCERT_NO_SERVER
