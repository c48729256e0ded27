// The gRPC front end: witcert.v1.Inference, grpc.health.v1 and server reflection.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/runtime/engine_config.h"
#include "engine/runtime/loaded_engine.h"

namespace grpc {
class Server;
}

namespace witcert::grpc_api {

class InferenceService;

class GrpcServer {
 public:
  // Starts serving on `address` ("127.0.0.1:50051"; port 0 → a free port). The engine and
  // config must outlive the server.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(LoadedEngine& engine,
                                                           const EngineConfig& config,
                                                           const std::string& address);
  ~GrpcServer();  // Shutdown() if still running

  int port() const { return port_; }
  void Shutdown();

 private:
  GrpcServer() = default;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<::grpc::Server> server_;
  int port_ = 0;
};

}  // namespace witcert::grpc_api
