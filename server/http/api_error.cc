#include "server/http/api_error.h"

namespace witcert::http {

nlohmann::json ApiError::ToJson() const {
  nlohmann::json e = {{"message", message}, {"type", type}};
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return {{"error", e}};
}

std::string ApiError::Body() const { return DumpJson(ToJson()); }

ApiError InvalidRequest(std::string message, std::string param) {
  ApiError e;
  e.http_status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted: return 409;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kCancelled: return 499;  // client closed the request
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kDataLoss:
    default: return 500;
  }
}

ApiError ErrorFromStatus(const absl::Status& status, std::string param) {
  ApiError e;
  e.http_status = HttpStatusFor(status.code());
  e.message = std::string(status.message());
  e.param = std::move(param);
  switch (e.http_status) {
    case 400: e.type = "invalid_request_error"; break;
    case 401: e.type = "authentication_error"; break;
    case 403: e.type = "permission_error"; break;
    case 404: e.type = "not_found_error"; break;
    case 409: e.type = "conflict_error"; break;
    case 429: e.type = "rate_limit_error"; break;
    case 499: e.type = "cancelled"; break;
    case 503: e.type = "service_unavailable"; break;
    default: e.type = "server_error"; break;
  }
  if (status.code() == absl::StatusCode::kOutOfRange) e.code = "context_length_exceeded";
  else if (status.code() == absl::StatusCode::kResourceExhausted) e.code = "resource_exhausted";
  else if (status.code() == absl::StatusCode::kUnavailable) e.code = "unavailable";
  return e;
}

std::string DumpJson(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace witcert::http
