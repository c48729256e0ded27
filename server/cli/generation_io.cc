#include "server/cli/generation_io.h"

#include "absl/strings/str_format.h"
#include "engine/common/status.h"

namespace witcert::cli {

absl::StatusOr<std::unique_ptr<LoadedEngine>> LoadWithProgress(const EngineConfig& config) {
  return LoadEngine(config, [](const std::string& line) {
    std::fprintf(stderr, "witcert: %s\n", line.c_str());
  });
}

absl::StatusOr<StreamedResult> StreamRequest(Engine& engine, Request request, std::FILE* out) {
  ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream, engine.Submit(std::move(request)));
  StreamedResult result;
  while (true) {
    RequestEvent event = *stream->Next();
    if (event.kind == RequestEvent::Kind::kToken) {
      result.text += event.text;
      if (out != nullptr && !event.text.empty()) {
        std::fwrite(event.text.data(), 1, event.text.size(), out);
        std::fflush(out);
      }
    } else if (event.kind == RequestEvent::Kind::kFinish) {
      result.finish = std::move(event);
      break;
    }
  }
  if (!result.finish.status.ok()) return result.finish.status;
  return result;
}

std::string SummaryLine(const StreamedResult& result) {
  const RequestEvent& f = result.finish;
  const double decode_s = f.total_time_s - f.time_to_first_token_s;
  const double tps =
      f.usage.completion_tokens > 1 && decode_s > 0 ? (f.usage.completion_tokens - 1) / decode_s
                                                    : 0.0;
  const RiskSummary& r = f.risk;
  return absl::StrFormat(
      "[%d prompt + %d generated tokens, %s; first token %.0f ms, %.1f tok/s; "
      "certificate: %d cells, coverage %.1f%%, max TV bound %.3g (after gate %.3g), "
      "%d page-ins, %d uncertified]",
      f.usage.prompt_tokens, f.usage.completion_tokens, FinishReasonName(f.finish_reason),
      f.time_to_first_token_s * 1e3, tps, r.cells, 100.0 * r.coverage, r.max_tv_before,
      r.max_tv_after, r.pageins, r.uncertified_cells);
}

}  // namespace witcert::cli
