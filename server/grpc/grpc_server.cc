#include "server/grpc/grpc_server.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/grpc/status_mapping.h"
#include "spdlog/spdlog.h"
#include "witcert/v1/inference.grpc.pb.h"

namespace witcert::grpc_api {
namespace {

constexpr int32_t kDefaultMaxTokens = 256;

// The request's messages, their roles checked as the HTTP API checks them (ChatRole).
template <class Messages>
absl::Status ChatMessagesOf(const Messages& in, std::vector<ChatMessage>* out) {
  for (int i = 0; i < in.size(); ++i) {
    absl::StatusOr<std::string> role = ChatRole(in[i].role());
    if (!role.ok()) return absl::InvalidArgumentError(absl::StrCat("messages[", i, "].role: ", role.status().message()));
    out->push_back({*std::move(role), in[i].content()});
  }
  return absl::OkStatus();
}

// Unset fields take `defaults` (LoadedEngine::sampling_defaults).
void FillSampling(const v1::SamplingOptions& in, const SamplingParams& defaults, Request* out) {
  SamplingParams& s = out->sampling;
  s = defaults;
  s.logprobs = true;  // TokenEvent carries each token's logprob
  if (in.has_temperature()) s.temperature = in.temperature();
  if (in.has_top_p()) s.top_p = in.top_p();
  if (in.has_top_k()) s.top_k = in.top_k();
  if (in.has_min_p()) s.min_p = in.min_p();
  if (in.has_seed()) s.seed = in.seed();
  if (in.has_presence_penalty()) s.presence_penalty = in.presence_penalty();
  if (in.has_frequency_penalty()) s.frequency_penalty = in.frequency_penalty();
  out->stop.max_tokens = in.max_tokens() > 0 ? in.max_tokens() : kDefaultMaxTokens;
  out->stop.stop.assign(in.stop().begin(), in.stop().end());
  out->stop.ignore_eos = in.ignore_eos();
  for (const auto& [token, bias] : in.logit_bias()) s.logit_bias.emplace_back(token, bias);
  if (in.has_repetition_penalty()) s.repetition_penalty = in.repetition_penalty();
  out->stop.min_tokens = in.min_tokens();
  out->stop.stop_token_ids.assign(in.stop_token_ids().begin(), in.stop_token_ids().end());
  s.json_object = in.json_object();
  s.guided_choice.assign(in.guided_choice().begin(), in.guided_choice().end());
}

absl::Status FillGate(const v1::GateOverride& in, Request* out) {
  if (in.mode().empty() && !in.has_tv_threshold() && !in.has_v_threshold() && !in.has_delta() &&
      in.tier_b_form().empty())
    return absl::OkStatus();
  GatePolicy tighter = LoosestGatePolicy();  // fields the request leaves unset
  if (!in.mode().empty()) {
    auto mode = ParseGateMode(in.mode());
    if (!mode.ok()) return mode.status();
    tighter.mode = *mode;
  } else {
    tighter.mode = GateMode::kOff;  // no say on the mode: Tighten keeps the server's
  }
  // The HTTP front end's ranges (CheckGateOverride): a 0 or a NaN is an error, not a switch.
  auto check = [](const char* key, bool set, double value) {
    return set ? CheckGateOverride(key, absl::StrCat("gate.", key), value) : absl::OkStatus();
  };
  for (const absl::Status& s : {check("tv_threshold", in.has_tv_threshold(), in.tv_threshold()),
                                check("v_threshold", in.has_v_threshold(), in.v_threshold()),
                                check("delta", in.has_delta(), in.delta())}) {
    if (!s.ok()) return s;
  }
  if (in.has_tv_threshold()) tighter.tv_threshold = in.tv_threshold();
  if (in.has_v_threshold()) tighter.v_threshold = in.v_threshold();
  if (in.has_delta()) tighter.delta_req = in.delta();
  if (!in.tier_b_form().empty()) {
    auto form = ParseTierBForm(in.tier_b_form());
    if (!form.ok()) return form.status();
    tighter.tier_b_form = *form;
  }
  out->gate = tighter;
  return absl::OkStatus();
}

void FillCell(const CellRecord& c, v1::CertificateCell* out) {
  out->set_layer(c.layer);
  out->set_head(c.head);
  out->set_step(c.step);
  out->set_tv_bound_before(c.tv_before);
  out->set_tv_bound_after(c.tv_after);
  out->set_v_bound_before(c.v_before);
  out->set_v_bound_after(c.v_after);
  out->set_pageins(c.pageins);
  out->set_certified(c.certified);
  out->set_tier(c.tier == 'B' ? v1::CERTIFICATE_TIER_B : v1::CERTIFICATE_TIER_A);
}

// `policy`: the one the request ran under (the server's, tightened by the request's override).
void FillFinish(const RequestEvent& e, const EngineConfig& config, const GatePolicy& policy, v1::Finish* out) {
  out->set_finish_reason(FinishReasonName(e.finish_reason));
  out->mutable_usage()->set_prompt_tokens(e.usage.prompt_tokens);
  out->mutable_usage()->set_completion_tokens(e.usage.completion_tokens);
  out->set_time_to_first_token_s(e.time_to_first_token_s);
  out->set_total_time_s(e.total_time_s);
  const RiskSummary& r = e.risk;
  v1::RiskReport* risk = out->mutable_risk();
  risk->set_k_scheme(config.kv.k_scheme);
  risk->set_v_scheme(config.kv.v_scheme);
  risk->set_gate_mode(GateModeName(policy.mode));
  risk->set_delta_spent(r.delta_spent);
  risk->set_tier_b_form(meter::TierBFormName(policy.tier_b_form));
  risk->set_cells(r.cells);
  risk->set_coverage(r.coverage);
  risk->set_max_tv_before(r.max_tv_before);
  risk->set_mean_tv_before(r.mean_tv_before);
  risk->set_max_tv_after(r.max_tv_after);
  risk->set_mean_tv_after(r.mean_tv_after);
  risk->set_pageins(r.pageins);
  risk->set_uncertified_cells(r.uncertified_cells);
  for (const auto& [layer, head] : r.uncertified_heads) {
    v1::LayerHead* lh = risk->add_uncertified();
    lh->set_layer(layer);
    lh->set_head(head);
  }
}

}  // namespace

class InferenceService final : public v1::Inference::Service {
 public:
  InferenceService(LoadedEngine& engine, const EngineConfig& config)
      : engine_(engine), config_(config) {}

  ::grpc::Status Generate(::grpc::ServerContext* context, const v1::GenerateRequest* in,
                          ::grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    Request request;
    request.id = in->request_id().empty() ? NewId() : in->request_id();
    switch (in->input_case()) {
      case v1::GenerateRequest::kPrompt:
        request.prompt = engine_.tokenizer->Encode(in->prompt(), false, true);
        break;
      case v1::GenerateRequest::kChat: {
        std::vector<ChatMessage> messages;
        if (absl::Status s = ChatMessagesOf(in->chat().messages(), &messages); !s.ok()) return ToGrpcStatus(s);
        request.prompt = engine_.tokenizer->Encode(
            engine_.chat_template.Apply(messages, true), true);
        break;
      }
      case v1::GenerateRequest::kTokens:
        request.prompt.assign(in->tokens().ids().begin(), in->tokens().ids().end());
        break;
      default:
        return {::grpc::StatusCode::INVALID_ARGUMENT, "one of prompt, chat or tokens is required"};
    }
    FillSampling(in->sampling(), engine_.sampling_defaults, &request);
    if (absl::Status s = FillGate(in->gate(), &request); !s.ok()) return ToGrpcStatus(s);
    const GatePolicy policy = RequestPolicy(engine_.engine->policy(), request);  // as Submit takes it
    request.emit_cells = in->emit_certificates();
    const std::string id = request.id;
    auto stream = engine_.engine->Submit(std::move(request));
    if (!stream.ok()) return ToGrpcStatus(stream.status());

    bool client_gone = false;
    while (true) {
      std::optional<RequestEvent> event = (*stream)->Next(/*timeout_ms=*/100);
      if (!event) {
        if (context->IsCancelled()) (*stream)->Cancel();
        continue;
      }
      v1::GenerateResponse out;
      out.set_request_id(id);
      if (event->kind == RequestEvent::Kind::kToken) {
        v1::TokenEvent* token = out.mutable_token();
        token->set_token_id(event->token.token);
        token->set_text(event->text);
        token->set_logprob(event->token.logprob);
      } else if (event->kind == RequestEvent::Kind::kCells) {
        for (const CellRecord& c : event->cells) FillCell(c, out.mutable_certificates()->add_cells());
      } else {
        if (!event->status.ok()) return ToGrpcStatus(event->status);
        if (event->finish_reason == FinishReason::kCancelled)
          return {::grpc::StatusCode::CANCELLED, "the request was cancelled"};
        FillFinish(*event, config_, policy, out.mutable_finish());
        writer->Write(out);
        return ::grpc::Status::OK;
      }
      if (!client_gone && !writer->Write(out)) {
        client_gone = true;  // keep draining until the engine confirms the cancel
        (*stream)->Cancel();
      }
    }
  }

  ::grpc::Status Chat(::grpc::ServerContext* context, const v1::ChatRequest* in,
                      v1::ChatResponse* out) override {
    Request request;
    request.id = NewId();
    std::vector<ChatMessage> messages;
    if (absl::Status s = ChatMessagesOf(in->messages(), &messages); !s.ok()) return ToGrpcStatus(s);
    if (messages.empty()) return {::grpc::StatusCode::INVALID_ARGUMENT, "messages is empty"};
    request.prompt = engine_.tokenizer->Encode(engine_.chat_template.Apply(messages, true), true);
    FillSampling(in->sampling(), engine_.sampling_defaults, &request);
    if (absl::Status s = FillGate(in->gate(), &request); !s.ok()) return ToGrpcStatus(s);
    const GatePolicy policy = RequestPolicy(engine_.engine->policy(), request);  // as Submit takes it
    out->set_request_id(request.id);
    auto stream = engine_.engine->Submit(std::move(request));
    if (!stream.ok()) return ToGrpcStatus(stream.status());
    std::string text;
    while (true) {
      std::optional<RequestEvent> event = (*stream)->Next(100);
      if (!event) {
        if (context->IsCancelled()) (*stream)->Cancel();
        continue;
      }
      if (event->kind == RequestEvent::Kind::kToken) text += event->text;
      if (event->kind != RequestEvent::Kind::kFinish) continue;
      if (!event->status.ok()) return ToGrpcStatus(event->status);
      if (event->finish_reason == FinishReason::kCancelled)
        return {::grpc::StatusCode::CANCELLED, "the request was cancelled"};
      out->set_text(text);
      FillFinish(*event, config_, policy, out->mutable_finish());
      return ::grpc::Status::OK;
    }
  }

 private:
  std::string NewId() { return absl::StrFormat("grpc-%d", next_id_.fetch_add(1)); }

  LoadedEngine& engine_;
  const EngineConfig& config_;
  std::atomic<int64_t> next_id_{1};
};

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(LoadedEngine& engine,
                                                              const EngineConfig& config,
                                                              const std::string& address) {
  ::grpc::EnableDefaultHealthCheckService(true);
  ::grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<GrpcServer> server(new GrpcServer());
  server->service_ = std::make_unique<InferenceService>(engine, config);
  ::grpc::ServerBuilder builder;
  builder.AddListeningPort(address, ::grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || server->port_ == 0) {
    return absl::UnavailableError(absl::StrFormat("cannot listen for gRPC on %s", address));
  }
  server->server_->GetHealthCheckService()->SetServingStatus(true);
  spdlog::info("gRPC: witcert.v1.Inference at {} (port {})", address, server->port_);
  return server;
}

void GrpcServer::Shutdown() {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_.reset();
  }
}

GrpcServer::~GrpcServer() { Shutdown(); }

}  // namespace witcert::grpc_api
