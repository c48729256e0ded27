#include "server/metrics/serving_metrics.h"

namespace witcert::metrics {
namespace {

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5,
          0.75,  1.0,    2.5,   5.0,  7.5,   10.0, 20.0,  40.0, 80.0, 160.0};
}
std::vector<double> TokenBuckets() { return ExponentialBuckets(1, 2, 16); }  // 1 … 32768

}  // namespace

ServingMetrics::ServingMetrics()
    : ttft_(registry_.Histogram("witcert_time_to_first_token_seconds",
                                "Time from request arrival to its first generated token.",
                                LatencyBuckets())),
      itl_(registry_.Histogram("witcert_inter_token_latency_seconds",
                               "Time between consecutive generated tokens of a request.",
                               LatencyBuckets())),
      e2e_(registry_.Histogram("witcert_e2e_request_latency_seconds",
                               "Time from request arrival to its last token.",
                               LatencyBuckets())),
      request_prompt_tokens_(registry_.Histogram("witcert_request_prompt_tokens",
                                                 "Prompt length of finished requests.",
                                                 TokenBuckets())),
      request_generation_tokens_(registry_.Histogram(
          "witcert_request_generation_tokens", "Generated tokens of finished requests.",
          TokenBuckets())),
      finished_(registry_.Counter("witcert_request_finished_total",
                                  "Finished requests by finish reason.", {"finish_reason"})),
      http_(registry_.Counter("witcert_http_requests_total",
                              "HTTP responses by route and status code.", {"route", "code"})),
      reloads_(registry_.Counter("witcert_config_reload_total",
                                 "Config reloads (SIGHUP or /admin/reload) by result.",
                                 {"result"})) {
  // Both results exist from the start so rate() and alerts see a zero, not an absence.
  reloads_.Get({"ok"});
  reloads_.Get({"error"});
}

void ServingMetrics::BindEngine(Engine* engine, config::CertLabels cert_labels) {
  Family& running = registry_.Gauge("witcert_num_requests_running",
                                    "Requests in the running batch.");
  Family& waiting = registry_.Gauge("witcert_num_requests_waiting",
                                    "Requests waiting for KV capacity or a batch slot.");
  Family& prompt = registry_.Counter("witcert_prompt_tokens_total", "Prompt tokens admitted.");
  Family& generation =
      registry_.Counter("witcert_generation_tokens_total", "Tokens generated.");
  Family& steps = registry_.Counter("witcert_engine_steps_total", "Forward passes run.");
  Family& preemptions = registry_.Counter(
      "witcert_num_preemptions_total", "Sequences preempted (KV blocks freed, recomputed later).");
  Family& blocks_total = registry_.Gauge("witcert_kv_blocks", "KV pool blocks (capacity).");
  Family& blocks_free = registry_.Gauge("witcert_kv_blocks_free", "Free KV pool blocks.");
  Family& usage = registry_.Gauge("witcert_kv_cache_usage_ratio",
                                  "Fraction of KV pool blocks in use (0 to 1).");
  Family& promotions = registry_.Counter(
      "witcert_kv_promotions_total", "KV blocks paged in exact from the backing store.");
  Family& backing_used = registry_.Gauge("witcert_backing_store_bytes",
                                         "Bytes held by the exact KV backing store.");
  Family& backing_cap = registry_.Gauge("witcert_backing_store_capacity_bytes",
                                        "Capacity of the exact KV backing store.");
  Family& evictions = registry_.Counter(
      "witcert_backing_store_evictions_total",
      "Backing-store entries of finished sequences evicted for space.");
  Family& refused = registry_.Counter(
      "witcert_backing_store_refused_blocks_total",
      "Blocks never stored in the backing store for lack of space (unrepairable).");
  Family& prefix_queries =
      registry_.Counter("witcert_prefix_cache_queries_total",
                        "Prompt tokens of admitted requests looked up in the prefix cache.");
  Family& prefix_hits = registry_.Counter(
      "witcert_prefix_cache_hits_total",
      "Prompt tokens found in the prefix cache (their KV reused, not recomputed).");
  Family& prefix_blocks = registry_.Gauge("witcert_prefix_cache_blocks",
                                          "KV blocks listed in the prefix cache (in use or idle).");
  registry_.AddCollector([=, &running, &waiting, &prompt, &generation, &steps, &preemptions,
                          &blocks_total, &blocks_free, &usage, &promotions, &backing_used,
                          &backing_cap, &evictions, &refused, &prefix_queries, &prefix_hits,
                          &prefix_blocks] {
    const EngineStats s = engine->Stats();
    running.Get().Set(s.running);
    waiting.Get().Set(s.waiting);
    prompt.Get().Set(static_cast<double>(s.prompt_tokens));
    generation.Get().Set(static_cast<double>(s.generation_tokens));
    steps.Get().Set(static_cast<double>(s.steps));
    preemptions.Get().Set(static_cast<double>(s.preemptions));
    blocks_total.Get().Set(static_cast<double>(s.kv_blocks_total));
    blocks_free.Get().Set(static_cast<double>(s.kv_blocks_free));
    usage.Get().Set(s.kv_blocks_total > 0
                        ? 1.0 - static_cast<double>(s.kv_blocks_free) / s.kv_blocks_total
                        : 0.0);
    const KvCacheStats kv = engine->backend().KvStats();
    promotions.Get().Set(static_cast<double>(kv.promotions));
    backing_used.Get().Set(static_cast<double>(kv.backing.used_bytes));
    backing_cap.Get().Set(static_cast<double>(kv.backing.capacity_bytes));
    evictions.Get().Set(static_cast<double>(kv.backing.evicted_blocks));
    refused.Get().Set(static_cast<double>(kv.backing.refused_blocks));
    prefix_queries.Get().Set(static_cast<double>(kv.prefix_query_tokens));
    prefix_hits.Get().Set(static_cast<double>(kv.prefix_hit_tokens));
    prefix_blocks.Get().Set(static_cast<double>(kv.prefix_cached_blocks));
  });
  AddCertificateMetrics(registry_, *engine, cert_labels);
}

void ServingMetrics::RequestFinished(const RequestRecord& r) {
  finished_.Get({FinishReasonName(r.finish_reason)}).Inc();
  if (r.time_to_first_token_s >= 0) ttft_.GetHistogram().Observe(r.time_to_first_token_s);
  e2e_.GetHistogram().Observe(r.e2e_s);
  request_prompt_tokens_.GetHistogram().Observe(static_cast<double>(r.prompt_tokens));
  request_generation_tokens_.GetHistogram().Observe(static_cast<double>(r.completion_tokens));
}

void ServingMetrics::InterTokenLatency(double seconds) { itl_.GetHistogram().Observe(seconds); }

void ServingMetrics::HttpResponse(const std::string& route, int status) {
  http_.Get({route, std::to_string(status)}).Inc();
}

void ServingMetrics::ConfigReload(bool ok) { reloads_.Get({ok ? "ok" : "error"}).Inc(); }

}  // namespace witcert::metrics
