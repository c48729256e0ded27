// WitCert's Prometheus metrics: what the front ends record per request, plus what is
// mirrored from the engine at scrape time (EngineStats, KV cache and backing-store stats,
// per-(layer, head) certificate counters).
//
// Request-side histograms (TTFT, inter-token latency, end-to-end latency) are observed by
// the front end that streamed the request, so they include queueing and detokenizing but
// not the network. Engine totals are mirrored, never double-counted.
#pragma once

#include <string>

#include "engine/runtime/engine.h"
#include "server/config/server_config.h"
#include "server/metrics/registry.h"

namespace witcert::metrics {

struct RequestRecord {
  std::string endpoint;  // "chat" | "completion" | "grpc" …
  FinishReason finish_reason = FinishReason::kNone;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  double time_to_first_token_s = -1.0;  // < 0: no token produced
  double e2e_s = 0.0;
};

class ServingMetrics {
 public:
  ServingMetrics();

  // Mirrors engine, KV and certificate stats on every scrape. `engine` must outlive this.
  void BindEngine(Engine* engine, config::CertLabels cert_labels);

  void RequestFinished(const RequestRecord& record);
  void InterTokenLatency(double seconds);
  // One HTTP response (`route` from a fixed set, so cardinality stays bounded).
  void HttpResponse(const std::string& route, int status);
  void ConfigReload(bool ok);

  std::string Render() const { return registry_.Render(); }
  Registry& registry() { return registry_; }

 private:
  Registry registry_;
  Family& ttft_;
  Family& itl_;
  Family& e2e_;
  Family& request_prompt_tokens_;
  Family& request_generation_tokens_;
  Family& finished_;
  Family& http_;
  Family& reloads_;
};

// Registers the per-(layer, head) certificate families and their collector
// (server/metrics/cert_metrics.cc).
void AddCertificateMetrics(Registry& registry, const Engine& engine, config::CertLabels labels);

}  // namespace witcert::metrics
