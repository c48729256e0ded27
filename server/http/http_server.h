// The OpenAI-compatible HTTP front end (cpp-httplib): routes, API-key check, body limit,
// OpenAI-shaped errors for everything httplib itself rejects (404, 413), and a worker
// pool sized from the config so many streaming clients are served at once.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "server/http/completion_route.h"
#include "server/http/front_end.h"

namespace witcert::http {

class HttpServer : public server::FrontEnd {
 public:
  HttpServer(server::ServingContext* context, config::HttpConfig http);
  ~HttpServer() override;

  [[nodiscard]] absl::Status Start() override;
  void Stop() override;
  std::string Address() const override;

 private:
  void RegisterRoutes();
  bool Authorized(const httplib::Request& req) const;

  server::ServingContext* ctx_;
  config::HttpConfig http_;
  std::string api_key_;
  httplib::Server server_;
  CompletionRoute completions_;
  std::thread listener_;
};

// Route label for metrics: the route pattern for known paths, "other" for the rest.
std::string RouteLabel(const std::string& path);

}  // namespace witcert::http
