// The gRPC API as one of `witcert serve`'s front ends, beside HTTP.
#pragma once

#include <memory>
#include <string>

#include "server/config/server_config.h"
#include "server/grpc/grpc_server.h"
#include "server/http/front_end.h"

namespace witcert::grpc_api {

class GrpcFrontEnd : public server::FrontEnd {
 public:
  GrpcFrontEnd(LoadedEngine* engine, const config::ServerConfig& config, std::string address)
      : engine_(engine), engine_config_(config.engine), address_(std::move(address)) {}

  absl::Status Start() override {
    auto server = GrpcServer::Start(*engine_, engine_config_, address_);
    if (!server.ok()) return server.status();
    server_ = std::move(*server);
    return absl::OkStatus();
  }
  void Stop() override {
    if (server_) server_->Shutdown();
  }
  std::string Address() const override { return "grpc://" + address_; }

 private:
  LoadedEngine* engine_;
  EngineConfig engine_config_;
  std::string address_;
  std::unique_ptr<GrpcServer> server_;
};

}  // namespace witcert::grpc_api
