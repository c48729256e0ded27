#include "server/http/completion_route.h"

#include <atomic>
#include <chrono>
#include <random>

#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"
#include "server/http/openai_response.h"
#include "server/http/risk_report.h"

namespace witcert::http {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

constexpr int64_t kPollMs = 50;  // how often a streaming handler checks its client

// One request in flight: what has been produced so far and how to finish it (metrics, log).
struct Run {
  Endpoint endpoint = Endpoint::kChat;
  ResponseMeta meta;
  GenerationRequest parsed;
  std::shared_ptr<RequestStream> stream;
  GatePolicy policy;  // the policy the request asked for, tightened (for the report)
  Clock::time_point arrival = Clock::now();
  Clock::time_point last_token;
  bool has_token = false;
  double ttft_s = -1.0;
  std::string text;
  std::vector<SampledToken> tokens;       // all, for a whole response's logprobs
  std::vector<SampledToken> pending_lp;   // streaming: not yet sent
  int64_t text_bytes = 0;                 // completions text_offset
  bool finished = false;
  RequestEvent finish;

  void OnToken(const RequestEvent& e, metrics::ServingMetrics* m) {
    const Clock::time_point now = Clock::now();
    if (has_token) m->InterTokenLatency(Seconds(now - last_token));
    else ttft_s = Seconds(now - arrival);
    has_token = true;
    last_token = now;
    text += e.text;
    if (parsed.logprobs) {
      tokens.push_back(e.token);
      pending_lp.push_back(e.token);
    }
  }
};

json LogprobsFor(const Run& run, const std::vector<SampledToken>& tokens, const Tokenizer& tok,
                 int64_t offset) {
  if (!run.parsed.logprobs) return nullptr;
  return run.endpoint == Endpoint::kChat ? ChatLogprobs(tokens, tok)
                                         : CompletionLogprobs(tokens, tok, offset);
}

// Metrics and the one log line per request.
void Record(server::ServingContext* ctx, Run& run, const char* outcome) {
  const RequestEvent& f = run.finish;
  metrics::RequestRecord r;
  r.endpoint = run.endpoint == Endpoint::kChat ? "chat" : "completion";
  r.finish_reason = f.finish_reason;
  r.prompt_tokens = f.usage.prompt_tokens;
  r.completion_tokens = f.usage.completion_tokens;
  r.time_to_first_token_s = run.ttft_s;
  r.e2e_s = Seconds(Clock::now() - run.arrival);
  ctx->metrics->RequestFinished(r);
  spdlog::info("{} {}: prompt={} completion={} ttft={:.3f}s e2e={:.3f}s finish={} {} | {}",
               run.meta.id, r.endpoint, r.prompt_tokens, r.completion_tokens,
               std::max(0.0, r.time_to_first_token_s), r.e2e_s,
               FinishReasonName(f.finish_reason), outcome, RiskLogLine(f.risk));
}

json Report(server::ServingContext* ctx, const Run& run) {
  const EngineConfig& c = ctx->config->current().engine;
  return RiskReport(run.finish.risk, run.policy, c.kv.k_scheme, c.kv.v_scheme);
}

void HandleWhole(server::ServingContext* ctx, std::shared_ptr<Run> run, httplib::Response& res) {
  const Tokenizer& tok = *ctx->engine->tokenizer;
  while (true) {
    RequestEvent e = *run->stream->Next();
    if (e.kind == RequestEvent::Kind::kToken) {
      run->OnToken(e, ctx->metrics);
    } else if (e.kind == RequestEvent::Kind::kFinish) {
      run->finish = std::move(e);
      break;
    }
  }
  if (!run->finish.status.ok()) {
    Record(ctx, *run, "error");
    return SendError(ErrorFromStatus(run->finish.status), res);
  }
  Record(ctx, *run, "ok");
  const json body = FullResponse(run->endpoint, run->meta, run->text,
                                 OpenAiFinishReason(run->finish.finish_reason),
                                 run->finish.usage, LogprobsFor(*run, run->tokens, tok, 0),
                                 Report(ctx, *run));
  res.status = 200;
  res.set_content(DumpJson(body), "application/json");
}

void HandleStream(server::ServingContext* ctx, std::shared_ptr<Run> run, httplib::Response& res) {
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Request-Id", run->meta.id);
  auto sent_role = std::make_shared<bool>(false);
  res.set_chunked_content_provider(
      "text/event-stream",
      [ctx, run, sent_role](size_t /*offset*/, httplib::DataSink& sink) -> bool {
        const Tokenizer& tok = *ctx->engine->tokenizer;
        auto write = [&](const std::string& data) {
          if (sink.write(data.data(), data.size())) return true;
          run->stream->Cancel();  // the client is gone: free its KV blocks
          return false;
        };
        if (!*sent_role && run->endpoint == Endpoint::kChat) {
          *sent_role = true;
          if (!write(SseEvent(StreamChunk(run->endpoint, run->meta, "", true, nullptr, nullptr))))
            return false;
        }
        std::optional<RequestEvent> e = run->stream->Next(kPollMs);
        if (!e) {
          if (sink.is_writable && !sink.is_writable()) {
            run->stream->Cancel();
            return false;
          }
          return true;  // nothing yet; httplib calls again
        }
        if (e->kind == RequestEvent::Kind::kToken) {
          run->OnToken(*e, ctx->metrics);
          if (e->text.empty()) return true;  // held (partial UTF-8 / possible stop string)
          json lp = LogprobsFor(*run, run->pending_lp, tok, run->text_bytes);
          run->text_bytes += static_cast<int64_t>(e->text.size());
          run->pending_lp.clear();
          return write(SseEvent(StreamChunk(run->endpoint, run->meta, e->text, false, lp, nullptr)));
        }
        if (e->kind == RequestEvent::Kind::kCells) return true;  // not requested over HTTP
        run->finish = std::move(*e);
        run->finished = true;
        std::string out;
        if (!run->finish.status.ok()) {
          Record(ctx, *run, "error");
          out += SseEvent(ErrorFromStatus(run->finish.status).ToJson());
        } else {
          Record(ctx, *run, "ok");
          json lp = run->pending_lp.empty()
                        ? json(nullptr)
                        : LogprobsFor(*run, run->pending_lp, tok, run->text_bytes);
          const json report = Report(ctx, *run);
          json last = StreamChunk(run->endpoint, run->meta, "", false, lp,
                                  OpenAiFinishReason(run->finish.finish_reason));
          last["witcert"] = report;
          out += SseEvent(last);
          if (run->parsed.include_usage) {
            json usage = UsageChunk(run->endpoint, run->meta, run->finish.usage);
            usage["witcert"] = report;
            out += SseEvent(usage);
          }
        }
        out += kSseDone;
        if (!write(out)) return false;
        sink.done();
        return true;
      },
      [ctx, run](bool success) {
        if (!run->finished) {
          // Released before the finish event: the connection broke or the server is
          // stopping. Cancel, and account for the request once its finish arrives.
          run->stream->Cancel();
          while (true) {
            std::optional<RequestEvent> e = run->stream->Next(5000);
            if (!e) break;
            if (e->kind == RequestEvent::Kind::kFinish) {
              run->finish = std::move(*e);
              run->finished = true;
              Record(ctx, *run, "client disconnected");
              break;
            }
          }
        }
      });
}

}  // namespace

std::string NewRequestId(Endpoint endpoint) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  const uint64_t n = counter.fetch_add(1) + 1;
  // salt (16 hex) + counter (8 hex): unique within the run, unpredictable across runs.
  return absl::StrFormat("%s-%016x%08x", endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl", salt,
                         n & 0xffffffffu);
}

void SendError(const ApiError& error, httplib::Response& res) {
  res.status = error.http_status;
  res.set_content(error.Body(), "application/json");
}

void CompletionRoute::Handle(Endpoint endpoint, const httplib::Request& req,
                             httplib::Response& res) {
  const config::ServerConfig cfg = ctx_->config->current();
  ParseLimits limits;
  limits.max_tokens_limit = cfg.http.max_tokens_limit;
  limits.default_max_tokens = cfg.http.default_max_tokens;

  auto run = std::make_shared<Run>();
  run->endpoint = endpoint;
  ApiError error;
  if (!ParseGenerationRequest(req.body, endpoint, limits, &run->parsed, &error)) {
    return SendError(error, res);
  }
  const GenerationRequest& p = run->parsed;
  if (!p.model.empty() && p.model != ctx_->model_id) {
    ApiError e;
    e.http_status = 404;
    e.type = "invalid_request_error";
    e.param = "model";
    e.code = "model_not_found";
    e.message = absl::StrFormat("The model '%s' does not exist; this server serves '%s'",
                                p.model, ctx_->model_id);
    return SendError(e, res);
  }

  LoadedEngine& le = *ctx_->engine;
  Request request;
  run->meta.id = NewRequestId(endpoint);
  run->meta.created = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  run->meta.model = ctx_->model_id;
  request.id = run->meta.id;
  if (endpoint == Endpoint::kChat) {
    request.prompt = le.tokenizer->Encode(le.chat_template.Apply(p.messages, true),
                                          /*parse_special=*/true);
  } else if (p.prompt_is_tokens) {
    const int32_t vocab = le.tokenizer->vocab_size();
    for (int32_t t : p.prompt_tokens) {
      if (t >= vocab) {
        return SendError(
            InvalidRequest(absl::StrFormat("token id %d is outside the vocabulary (%d)", t, vocab),
                           "prompt"),
            res);
      }
    }
    request.prompt = p.prompt_tokens;
  } else {
    request.prompt = le.tokenizer->Encode(p.prompt_text, /*parse_special=*/false,
                                          /*add_bos=*/true);
  }
  request.sampling = p.sampling;
  // No per-cell events: the TV-bound histogram is mirrored from the engine's counters and the
  // risk summary comes with the finish event.
  request.stop = p.stop;
  run->policy = le.engine->policy();
  if (p.gate.any()) {
    GatePolicy want = MakeGateRequest(p.gate, run->policy);
    request.gate = want;
    run->policy = Tighten(run->policy, want);
  }

  absl::StatusOr<std::shared_ptr<RequestStream>> stream = le.engine->Submit(std::move(request));
  if (!stream.ok()) {
    const std::string param =
        stream.status().code() == absl::StatusCode::kOutOfRange ? "messages" : "";
    return SendError(ErrorFromStatus(stream.status(),
                                     endpoint == Endpoint::kChat ? param
                                     : param.empty()             ? ""
                                                                 : "prompt"),
                     res);
  }
  run->stream = *stream;
  res.set_header("X-Request-Id", run->meta.id);
  if (p.stream) return HandleStream(ctx_, run, res);
  HandleWhole(ctx_, run, res);
}

}  // namespace witcert::http
