#include "server/http/completion_route.h"

#include <atomic>
#include <chrono>
#include <optional>
#include <random>

#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"
#include "engine/cert/records.h"
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
  bool first_of_prompt = true;  // usage counts each prompt once, on its first choice
  std::optional<RequestEvent> held;  // an event read before the handlers ran (see Next)
  std::string echo;             // completions with echo: the prompt's text, before the completion
  RequestEvent finish;

  // The next event: the held one first, then the stream's (nullopt after `timeout_ms`).
  std::optional<RequestEvent> Next(int64_t timeout_ms = -1) {
    if (held) {
      std::optional<RequestEvent> e = std::move(held);
      held.reset();
      return e;
    }
    return stream->Next(timeout_ms);
  }

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

// The n choices of one response: each its own engine request on the same prompt.
using Runs = std::vector<std::shared_ptr<Run>>;

// The response's report: the one choice's, or the choices' risk merged (MergeRiskSummaries).
json ResponseReport(server::ServingContext* ctx, const Runs& runs) {
  if (runs.size() == 1) return Report(ctx, *runs[0]);
  std::vector<RiskSummary> risks;
  for (const auto& run : runs) risks.push_back(run->finish.risk);
  const EngineConfig& c = ctx->config->current().engine;
  return RiskReport(MergeRiskSummaries(risks), runs[0]->policy, c.kv.k_scheme, c.kv.v_scheme);
}

// Each prompt once, the choices' completions added.
Usage ResponseUsage(const Runs& runs) {
  Usage u;
  for (const auto& run : runs) {
    if (run->first_of_prompt) u.prompt_tokens += run->finish.usage.prompt_tokens;
    u.completion_tokens += run->finish.usage.completion_tokens;
  }
  return u;
}

void HandleWhole(server::ServingContext* ctx, const Runs& runs, httplib::Response& res) {
  const Tokenizer& tok = *ctx->engine->tokenizer;
  for (const auto& run : runs) {
    while (true) {
      RequestEvent e = *run->Next();
      if (e.kind == RequestEvent::Kind::kToken) {
        run->OnToken(e, ctx->metrics);
      } else if (e.kind == RequestEvent::Kind::kFinish) {
        run->finish = std::move(e);
        break;
      }
    }
  }
  const Run* failed = nullptr;
  for (const auto& run : runs) {
    Record(ctx, *run, run->finish.status.ok() ? "ok" : "error");
    if (failed == nullptr && !run->finish.status.ok()) failed = run.get();
  }
  if (failed != nullptr) return SendError(ErrorFromStatus(failed->finish.status), res);
  std::vector<ChoiceResult> choices;
  for (const auto& run : runs) {
    choices.push_back({run->echo + run->text, OpenAiFinishReason(run->finish.finish_reason),
                       LogprobsFor(*run, run->tokens, tok, 0),
                       runs.size() > 1 ? Report(ctx, *run) : json(nullptr)});
  }
  const json body =
      FullResponse(runs[0]->endpoint, runs[0]->meta, choices, ResponseUsage(runs), ResponseReport(ctx, runs));
  res.status = 200;
  res.set_content(DumpJson(body), "application/json");
}

// Streams every choice's chunks as its tokens arrive (choices interleave, each chunk naming its
// index); each choice ends with its finish chunk, carrying its report, and the response with
// the usage chunk (stream_options.include_usage) and [DONE].
void HandleStream(server::ServingContext* ctx, const Runs& runs, httplib::Response& res) {
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Request-Id", runs[0]->meta.id);
  struct StreamState {
    Runs runs;
    bool sent_openers = false;  // chat: each choice's role chunk; completions: its echo
    size_t next = 0;  // the run polled first, rotating so no choice starves the others
    size_t open = 0;  // runs not finished
  };
  auto state = std::make_shared<StreamState>();
  state->runs = runs;
  state->open = runs.size();
  res.set_chunked_content_provider(
      "text/event-stream",
      [ctx, state](size_t /*offset*/, httplib::DataSink& sink) -> bool {
        const Tokenizer& tok = *ctx->engine->tokenizer;
        const Runs& all = state->runs;
        auto cancel_all = [&] {
          for (const auto& run : all) run->stream->Cancel();  // the client is gone: free their KV blocks
        };
        auto write = [&](const std::string& data) {
          if (sink.write(data.data(), data.size())) return true;
          cancel_all();
          return false;
        };
        const Endpoint endpoint = all[0]->endpoint;
        const ResponseMeta& meta = all[0]->meta;
        if (!state->sent_openers) {
          state->sent_openers = true;
          std::string out;
          for (size_t i = 0; i < all.size(); ++i) {
            const int32_t index = static_cast<int32_t>(i);
            if (endpoint == Endpoint::kChat) {
              out += SseEvent(StreamChunk(endpoint, meta, index, "", true, nullptr, nullptr));
            } else if (!all[i]->echo.empty()) {
              out += SseEvent(StreamChunk(endpoint, meta, index, all[i]->echo, false, nullptr, nullptr));
            }
          }
          if (!out.empty() && !write(out)) return false;
        }
        // An event from any open run, without waiting; else wait on the first open one.
        std::optional<RequestEvent> e;
        size_t which = 0;
        for (size_t k = 0; k < all.size() && !e; ++k) {
          which = (state->next + k) % all.size();
          if (!all[which]->finished) e = all[which]->Next(0);
        }
        if (!e) {
          which = 0;
          while (all[which]->finished) ++which;  // open > 0 while the provider runs
          e = all[which]->Next(kPollMs);
        }
        if (!e) {
          if (sink.is_writable && !sink.is_writable()) {
            cancel_all();
            return false;
          }
          return true;  // nothing yet; httplib calls again
        }
        state->next = (which + 1) % all.size();
        Run& run = *all[which];
        const int32_t index = static_cast<int32_t>(which);
        if (e->kind == RequestEvent::Kind::kToken) {
          run.OnToken(*e, ctx->metrics);
          if (e->text.empty()) return true;  // held (partial UTF-8 / possible stop string)
          json lp = LogprobsFor(run, run.pending_lp, tok, run.text_bytes);
          run.text_bytes += static_cast<int64_t>(e->text.size());
          run.pending_lp.clear();
          return write(SseEvent(StreamChunk(endpoint, meta, index, e->text, false, lp, nullptr)));
        }
        if (e->kind == RequestEvent::Kind::kCells) return true;  // not requested over HTTP
        run.finish = std::move(*e);
        run.finished = true;
        --state->open;
        std::string out;
        if (!run.finish.status.ok()) {
          Record(ctx, run, "error");
          cancel_all();  // the response ends here; the others are accounted as they finish
          out += SseEvent(ErrorFromStatus(run.finish.status).ToJson());
        } else {
          Record(ctx, run, "ok");
          json lp = run.pending_lp.empty() ? json(nullptr) : LogprobsFor(run, run.pending_lp, tok, run.text_bytes);
          json last = StreamChunk(endpoint, meta, index, "", false, lp, OpenAiFinishReason(run.finish.finish_reason));
          last["witcert"] = Report(ctx, run);
          out += SseEvent(last);
          if (state->open > 0) return write(out);
          if (run.parsed.include_usage) {
            json usage = UsageChunk(endpoint, meta, ResponseUsage(all));
            usage["witcert"] = ResponseReport(ctx, all);
            out += SseEvent(usage);
          }
        }
        out += kSseDone;
        if (!write(out)) return false;
        sink.done();
        return true;
      },
      [ctx, state](bool /*success*/) {
        for (const auto& run : state->runs) {
          if (run->finished) continue;
          // Released before this choice's finish event: the connection broke, the server is
          // stopping, or another choice failed. Cancel, and account for the request once its
          // finish arrives.
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
  limits.sampling_defaults = ctx_->engine->sampling_defaults;

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
  std::vector<std::vector<TokenId>> prompts;  // [prompts][tokens]
  if (endpoint == Endpoint::kChat) {
    absl::StatusOr<std::string> text = RenderChatPrompt(le.chat_template, p);
    if (!text.ok()) return SendError(InvalidRequest(std::string(text.status().message()), "messages"), res);
    prompts.push_back(le.tokenizer->Encode(*text, /*parse_special=*/true));
  }
  std::vector<std::string> echoes;  // [prompts] the prompt's text when echo is asked for
  for (const CompletionPrompt& prompt : p.prompts) {
    if (p.echo) echoes.push_back(prompt.is_tokens ? le.tokenizer->Decode(prompt.tokens) : prompt.text);
    if (!prompt.is_tokens) {
      prompts.push_back(le.tokenizer->Encode(prompt.text, /*parse_special=*/false, /*add_bos=*/true));
      continue;
    }
    const int32_t vocab = le.tokenizer->vocab_size();
    for (int32_t t : prompt.tokens) {
      if (t >= vocab) {
        return SendError(
            InvalidRequest(absl::StrFormat("token id %d is outside the vocabulary (%d)", t, vocab),
                           "prompt"),
            res);
      }
    }
    prompts.push_back(prompt.tokens);
  }
  request.sampling = p.sampling;
  for (const auto& [token, bias] : p.sampling.logit_bias) {
    if (token >= le.tokenizer->vocab_size()) {
      return SendError(InvalidRequest(absl::StrFormat("logit_bias token %d is outside the vocabulary (%d)", token,
                                                      le.tokenizer->vocab_size()),
                                      "logit_bias"),
                       res);
    }
  }
  for (int32_t token : p.stop.stop_token_ids) {
    if (token >= le.tokenizer->vocab_size()) {
      return SendError(InvalidRequest(absl::StrFormat("stop_token_ids: %d is outside the vocabulary (%d)", token,
                                                      le.tokenizer->vocab_size()),
                                      "stop_token_ids"),
                       res);
    }
  }
  // No per-cell events: the TV-bound histogram is mirrored from the engine's counters and the
  // risk summary comes with the finish event.
  request.stop = p.stop;
  run->policy = le.engine->policy();
  if (p.gate.any()) {
    GatePolicy want = MakeGateRequest(p.gate, run->policy);
    request.gate = want;
    run->policy = Tighten(run->policy, want);
  }

  // n choices per prompt: n requests on each, prompt-major. Choice c has id "<id>-c" in the
  // engine and, when seeded, seed + c, so the choices differ and each is reproducible. Where the
  // engine reuses computed prompt prefixes, a prompt's first choice goes first and the others
  // follow once it has produced its first event, so the prompt is prefilled once (vLLM forks
  // parallel samples after the prefill the same way); otherwise all go at once.
  Runs runs(prompts.size() * static_cast<size_t>(p.n));
  const bool several = runs.size() > 1;
  const bool share_prefill = p.n > 1 && le.engine->ReusesPromptPrefixes();
  const Run unsubmitted = *run;  // choices start from it, not from a run that has events
  auto submit = [&](size_t k, int32_t i) -> bool {
    const size_t c = k * static_cast<size_t>(p.n) + static_cast<size_t>(i);
    auto choice = c == 0 ? run : std::make_shared<Run>(unsubmitted);
    choice->first_of_prompt = i == 0;
    if (k < echoes.size()) choice->echo = echoes[k];
    Request r = request;
    r.prompt = prompts[k];
    if (several) r.id = absl::StrFormat("%s-%d", run->meta.id, c);
    if (several && r.sampling.seed.has_value()) r.sampling.seed = *r.sampling.seed + static_cast<uint64_t>(c);
    absl::StatusOr<std::shared_ptr<RequestStream>> stream = le.engine->Submit(std::move(r));
    if (!stream.ok()) {
      for (const auto& submitted : runs) {
        if (submitted != nullptr) submitted->stream->Cancel();  // their finish is not awaited
      }
      const std::string param =
          stream.status().code() == absl::StatusCode::kOutOfRange ? "messages" : "";
      SendError(ErrorFromStatus(stream.status(),
                                endpoint == Endpoint::kChat ? param
                                : param.empty()             ? ""
                                                            : "prompt"),
                res);
      return false;
    }
    choice->stream = *stream;
    runs[c] = std::move(choice);
    return true;
  };
  for (size_t k = 0; k < prompts.size(); ++k) {
    if (!submit(k, 0)) return;
  }
  for (size_t k = 0; k < prompts.size(); ++k) {
    if (share_prefill) {
      Run& first = *runs[k * static_cast<size_t>(p.n)];
      first.held = first.stream->Next();  // the prompt is in the cache once this arrives
    }
    for (int32_t i = 1; i < p.n; ++i) {
      if (!submit(k, i)) return;
    }
  }
  res.set_header("X-Request-Id", run->meta.id);
  if (p.stream) return HandleStream(ctx_, runs, res);
  HandleWhole(ctx_, runs, res);
}

}  // namespace witcert::http
