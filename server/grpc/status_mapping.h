// absl::Status → grpc::Status. Both use the canonical code space, so the mapping is 1:1
// (INVALID_ARGUMENT stays INVALID_ARGUMENT, RESOURCE_EXHAUSTED stays RESOURCE_EXHAUSTED, ...).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace witcert::grpc_api {

inline ::grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return ::grpc::Status::OK;
  return ::grpc::Status(static_cast<::grpc::StatusCode>(status.code()),
                        std::string(status.message()));
}

}  // namespace witcert::grpc_api
