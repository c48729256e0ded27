// OpenAI-shaped errors and the one place absl::StatusCode becomes an HTTP status.
//
// Body: {"error": {"message", "type", "param", "code"}} (param and code may be null), as the
// official clients expect; they raise BadRequestError, NotFoundError, RateLimitError, …
// from the HTTP status alone, so the status is what must be right.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace witcert::http {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" → null
  std::string code;   // "" → null

  nlohmann::json ToJson() const;
  std::string Body() const;  // serialized ToJson()
};

ApiError InvalidRequest(std::string message, std::string param = "");

// absl::StatusCode → HTTP status (the single mapping used by every route).
int HttpStatusFor(absl::StatusCode code);
// A full error for a Status from the engine or the config layer. OutOfRange (the prompt
// does not fit the context) carries code "context_length_exceeded".
ApiError ErrorFromStatus(const absl::Status& status, std::string param = "");

// Serializes JSON to text; invalid UTF-8 in strings becomes U+FFFD instead of throwing.
std::string DumpJson(const nlohmann::json& value);

}  // namespace witcert::http
