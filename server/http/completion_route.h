// POST /v1/chat/completions and POST /v1/completions: request → engine → response, whole or
// streamed as server-sent events.
//
// Streaming: the chunked content provider blocks on the request's event stream with a
// short timeout, writes each token as an SSE event, and cancels the request the moment a
// write fails or the connection is released unfinished (a client that went away), so its
// KV blocks return to the pool within one engine step.
#pragma once

#include "httplib.h"
#include "server/http/front_end.h"
#include "server/http/openai_request.h"

namespace witcert::http {

class CompletionRoute {
 public:
  explicit CompletionRoute(server::ServingContext* context) : ctx_(context) {}
  void Handle(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);

 private:
  server::ServingContext* ctx_;
};

// "chatcmpl-<24 hex>" / "cmpl-<24 hex>": unique per process run.
std::string NewRequestId(Endpoint endpoint);

// Writes an OpenAI error as the response.
void SendError(const ApiError& error, httplib::Response& res);

}  // namespace witcert::http
