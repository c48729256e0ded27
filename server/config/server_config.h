// The server's configuration: one JSON-with-comments file (config/witcert.default.jsonc is
// the documented default, compiled in) parsed into a ServerConfig; command-line flags
// override it afterwards.
//
// Why strict: a typo in a config key silently falling back to a default is how a gate
// threshold ends up not being what the operator thinks. Unknown keys and wrong types are
// errors that name the key path (`gate.tv_threshold: expected a number, got a string`).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/runtime/engine_config.h"

namespace witcert::config {

enum class CertLabels { kLayerHead, kLayer, kOff };
absl::StatusOr<CertLabels> ParseCertLabels(std::string_view text);
const char* CertLabelsName(CertLabels labels);

struct HttpConfig {
  std::string host = "127.0.0.1";
  int32_t port = 8000;
  int32_t threads = 256;             // httplib worker threads = max concurrent connections
  int64_t max_body_bytes = 4 << 20;  // larger bodies → 413
  int32_t read_timeout_s = 30;       // a client that sends its body slower than this is cut
  int32_t write_timeout_s = 30;
  // An idle keep-alive connection (also one whose request failed) is closed after this long.
  // It must outlast the idle expiry of the clients' pools (httpx, so the openai client: 5 s;
  // aiohttp: 15 s): a pool that reuses a connection in the instant the server closes it sends
  // a request into a closing socket, and that request fails ("Server disconnected without
  // sending a response"). With the server at 5 s too, loaded 64-stream runs hit that race.
  // Each idle connection pins a worker thread until the client or this timeout closes it
  // (shutdown ends idle connections at once: HttpServer::Stop).
  int32_t keep_alive_timeout_s = 75;
  int32_t keep_alive_max_requests = 1000;  // requests per connection before it is closed
  std::string api_key;               // "" → no auth (env WITCERT_API_KEY overrides)
  std::string model_name;            // id in /v1/models; "" → the model file's stem
  int32_t max_tokens_limit = 4096;   // larger max_tokens → 400 (absurd limit)
  int32_t default_max_tokens = 256;
};

struct LogConfig {
  std::string level = "info";  // trace | debug | info | warn | error | critical | off
};

struct MetricsConfig {
  bool enabled = true;
  CertLabels cert_labels = CertLabels::kLayerHead;
};

struct GrpcConfig {
  bool enabled = true;
  std::string host = "127.0.0.1";
  int32_t port = 50051;  // 0 → disabled
};

struct ServerConfig {
  HttpConfig http;
  GrpcConfig grpc;
  LogConfig log;
  MetricsConfig metrics;
  EngineConfig engine;
};

// The embedded default config text (config/witcert.default.jsonc at build time).
std::string_view DefaultConfigText();

// Parses `text` (JSON with // and /* */ comments) on top of `base` (keys absent from the
// text keep base's values). InvalidArgument naming the key path on any error.
absl::StatusOr<ServerConfig> ParseServerConfig(std::string_view text,
                                               const ServerConfig& base = ServerConfig());
// The default config, then `path` on top when non-empty. NotFound / InvalidArgument with
// the file name in the message.
absl::StatusOr<ServerConfig> LoadServerConfig(const std::string& path);

// Checks values (ranges, enum names, gate policy) after flags were applied.
absl::Status ValidateServerConfig(const ServerConfig& config);

}  // namespace witcert::config
