#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"
#include "server/http/api_error.h"
#include "server/http/openai_response.h"
#include "server/http/risk_report.h"
#include "server/metrics/exposition.h"

namespace witcert::http {
namespace {

using nlohmann::json;

void SendJson(const json& body, httplib::Response& res, int status = 200) {
  res.status = status;
  res.set_content(DumpJson(body), "application/json");
}

// Sends `error` and then ends the connection, for a request whose framing is lost (a body
// cut short by the read timeout, or a malformed head): waiting out the keep-alive for a next
// request would read it from the middle of this one. httplib 0.11 has no call for that, but
// it ends any connection whose content provider returns false, so this provider writes the
// whole body first and then returns false.
void SendErrorAndClose(const ApiError& error, httplib::Response& res) {
  res.status = error.http_status;
  res.set_header("Connection", "close");
  std::string body = error.Body();
  const size_t size = body.size();
  res.set_content_provider(
      size, "application/json",
      [body = std::move(body)](size_t offset, size_t length, httplib::DataSink& sink) {
        sink.write(body.data() + offset, length);
        return false;
      });
}

// Shuts the read side of every accepted connection on `port`. httplib's stop() only closes
// the listening socket: a worker waiting on an idle keep-alive connection would hold the
// shutdown for up to http.keep_alive_timeout_s (75 s measured with one idle client). With its
// read side shut, that wait sees end of stream and the worker exits, while a worker still
// writing a response (a stream in flight) finishes it first. httplib 0.11 does not expose its
// sockets, so they are found among this process's descriptors by their local port (and a
// peer: the listening socket has none). Runs once, at shutdown.
void EndConnectionReads(int port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (const dirent* entry = readdir(dir)) {
    const int fd = std::atoi(entry->d_name);
    if (fd <= 2 || fd == dirfd(dir)) continue;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
      continue;
    }
    int local_port = -1;
    if (local.ss_family == AF_INET) {
      local_port = ntohs(reinterpret_cast<const sockaddr_in*>(&local)->sin_port);
    } else if (local.ss_family == AF_INET6) {
      local_port = ntohs(reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port);
    }
    if (local_port == port) ::shutdown(fd, SHUT_RD);
  }
  closedir(dir);
}

bool NeedsAuth(const std::string& path) {
  return absl::StartsWith(path, "/v1/") || path == "/tokenize" || path == "/detokenize" ||
         absl::StartsWith(path, "/admin/");
}

}  // namespace

std::string RouteLabel(const std::string& path) {
  static const char* kRoutes[] = {"/v1/chat/completions", "/v1/completions", "/v1/models",
                                  "/health", "/metrics", "/tokenize", "/detokenize",
                                  "/admin/reload", "/admin/config"};
  for (const char* r : kRoutes) {
    if (path == r) return r;
  }
  if (absl::StartsWith(path, "/v1/models/")) return "/v1/models/{id}";
  return "other";
}

HttpServer::HttpServer(server::ServingContext* context, config::HttpConfig http)
    : ctx_(context), http_(std::move(http)), completions_(context) {
  api_key_ = http_.api_key;
  if (const char* env = std::getenv("WITCERT_API_KEY"); env != nullptr && *env != '\0') {
    api_key_ = env;
  }
  const size_t threads = static_cast<size_t>(std::max(1, http_.threads));
  server_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_.set_payload_max_length(static_cast<size_t>(http_.max_body_bytes));
  server_.set_read_timeout(http_.read_timeout_s, 0);
  server_.set_write_timeout(http_.write_timeout_s, 0);
  server_.set_keep_alive_timeout(http_.keep_alive_timeout_s);
  server_.set_keep_alive_max_count(static_cast<size_t>(http_.keep_alive_max_requests));
  RegisterRoutes();
}

HttpServer::~HttpServer() { Stop(); }

bool HttpServer::Authorized(const httplib::Request& req) const {
  if (api_key_.empty()) return true;
  return req.get_header_value("Authorization") == "Bearer " + api_key_;
}

void HttpServer::RegisterRoutes() {
  server_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (NeedsAuth(req.path) && !Authorized(req)) {
      ApiError e;
      e.http_status = 401;
      e.type = "authentication_error";
      e.code = "invalid_api_key";
      e.message = "missing or invalid API key (send `Authorization: Bearer <key>`)";
      SendError(e, res);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  // httplib answers some requests itself (no route, body too large, unreadable request):
  // give those the OpenAI error shape too. Handlers that already wrote a body keep it.
  server_.set_error_handler(httplib::Server::HandlerWithResponse(
      [](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.http_status = res.status;
    switch (res.status) {
      case 404:
        e.type = "not_found_error";
        e.message = absl::StrFormat("no route for %s %s", req.method, req.path);
        break;
      case 413:
        e.message = "the request body is larger than this server accepts (http.max_body_bytes)";
        e.code = "request_too_large";
        break;
      case 400:
        e.message = "malformed HTTP request";
        break;
      default:
        e.type = res.status >= 500 ? "server_error" : "invalid_request_error";
        e.message = absl::StrFormat("HTTP %d", res.status);
    }
    if (res.status == 404 || res.status == 405) {
      SendError(e, res);  // a well-formed request: the connection stays usable
    } else {
      SendErrorAndClose(e, res);
    }
    return httplib::Server::HandlerResponse::Handled;
  }));

  server_.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        spdlog::error("request handler threw: {}", what);
        ApiError e;
        e.http_status = 500;
        e.type = "server_error";
        e.message = "internal error";
        SendError(e, res);
      });

  server_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    ctx_->metrics->HttpResponse(RouteLabel(req.path), res.status);
    spdlog::debug("{} {} → {}", req.method, req.path, res.status);
  });

  server_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    completions_.Handle(Endpoint::kChat, req, res);
  });
  server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    completions_.Handle(Endpoint::kCompletion, req, res);
  });

  auto model_json = [this] {
    return json{{"id", ctx_->model_id},
                {"object", "model"},
                {"created", 0},
                {"owned_by", "witcert"},
                {"max_model_len", ctx_->engine->engine->max_context()}};
  };
  server_.Get("/v1/models", [model_json](const httplib::Request&, httplib::Response& res) {
    SendJson({{"object", "list"}, {"data", json::array({model_json()})}}, res);
  });
  server_.Get(R"(/v1/models/(.+))", [this, model_json](const httplib::Request& req,
                                                       httplib::Response& res) {
    if (req.matches[1] != ctx_->model_id) {
      ApiError e;
      e.http_status = 404;
      e.param = "model";
      e.code = "model_not_found";
      e.message = absl::StrFormat("The model '%s' does not exist", std::string(req.matches[1]));
      return SendError(e, res);
    }
    SendJson(model_json(), res);
  });

  server_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    SendJson({{"status", "ok"}}, res);
  });

  server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    if (!ctx_->config->current().metrics.enabled) {
      return SendError(ErrorFromStatus(absl::NotFoundError("metrics are disabled")), res);
    }
    res.set_content(ctx_->metrics->Render(), metrics::kExpositionContentType);
  });

  server_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    json body;
    ApiError error;
    if (!ParseJsonObject(req.body, &body, &error)) return SendError(error, res);
    const LoadedEngine& le = *ctx_->engine;
    std::vector<int32_t> tokens;
    auto prompt = body.find("prompt");
    auto messages = body.find("messages");
    bool add_special = true;
    if (auto it = body.find("add_special_tokens"); it != body.end() && !it->is_null()) {
      if (!it->is_boolean()) {
        return SendError(InvalidRequest("'add_special_tokens' must be a boolean",
                                        "add_special_tokens"), res);
      }
      add_special = it->get<bool>();
    }
    if (prompt != body.end() && prompt->is_string()) {
      tokens = le.tokenizer->Encode(prompt->get<std::string>(), /*parse_special=*/false,
                                    /*add_bos=*/add_special);
    } else if (messages != body.end()) {
      // Reuse the chat parser for the messages (and its validation).
      json chat = {{"messages", *messages}};
      for (const char* key : {"add_generation_prompt", "continue_final_message"}) {
        if (body.contains(key)) chat[key] = body[key];
      }
      GenerationRequest parsed;
      if (!ParseGenerationRequest(DumpJson(chat), Endpoint::kChat, ParseLimits(), &parsed,
                                  &error)) {
        return SendError(error, res);
      }
      absl::StatusOr<std::string> text = RenderChatPrompt(le.chat_template, parsed);
      if (!text.ok()) return SendError(InvalidRequest(std::string(text.status().message()), "messages"), res);
      tokens = le.tokenizer->Encode(*text, /*parse_special=*/true);
    } else {
      return SendError(InvalidRequest("'prompt' (a string) or 'messages' is required", "prompt"),
                       res);
    }
    SendJson({{"tokens", tokens},
              {"count", tokens.size()},
              {"max_model_len", le.engine->max_context()}},
             res);
  });

  server_.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    json body;
    ApiError error;
    if (!ParseJsonObject(req.body, &body, &error)) return SendError(error, res);
    auto it = body.find("tokens");
    if (it == body.end() || !it->is_array()) {
      return SendError(InvalidRequest("'tokens' (an array of token ids) is required", "tokens"),
                       res);
    }
    const int32_t vocab = ctx_->engine->tokenizer->vocab_size();
    std::vector<int32_t> ids;
    for (const json& t : *it) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab) {
        return SendError(
            InvalidRequest(absl::StrFormat("'tokens' must hold token ids in [0, %d)", vocab),
                           "tokens"),
            res);
      }
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    SendJson({{"prompt", ctx_->engine->tokenizer->Decode(ids)}}, res);
  });

  auto config_json = [this] {
    const config::ServerConfig c = ctx_->config->current();
    const GatePolicy p = ctx_->engine->engine->policy();
    return json{{"log", {{"level", c.log.level}}},
                {"gate", GatePolicyJson(p)},
                {"reloads", ctx_->config->reloads()},
                {"config_file", ctx_->config->path()}};
  };
  server_.Get("/admin/config", [config_json](const httplib::Request&, httplib::Response& res) {
    SendJson(config_json(), res);
  });
  server_.Post("/admin/reload", [this, config_json](const httplib::Request&,
                                                    httplib::Response& res) {
    absl::Status s = ctx_->reload();
    if (!s.ok()) {
      ApiError e = ErrorFromStatus(s);
      e.code = "invalid_config";
      return SendError(e, res);
    }
    json body = config_json();
    body["status"] = "reloaded";
    SendJson(body, res);
  });
}

absl::Status HttpServer::Start() {
  if (!server_.bind_to_port(http_.host, http_.port)) {
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on %s:%d (address in use or not available)", http_.host,
                        http_.port));
  }
  listener_ = std::thread([this] { server_.listen_after_bind(); });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (server_.is_running()) server_.stop();
  EndConnectionReads(http_.port);
  if (listener_.joinable()) listener_.join();
}

std::string HttpServer::Address() const {
  return absl::StrFormat("http://%s:%d", http_.host, http_.port);
}

}  // namespace witcert::http
