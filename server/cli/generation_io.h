// Shared by generate and chat: loading the engine with a progress line on stderr, and
// streaming one request's text to a FILE while collecting its result.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/runtime/loaded_engine.h"
#include "engine/runtime/request.h"

namespace witcert::cli {

absl::StatusOr<std::unique_ptr<LoadedEngine>> LoadWithProgress(const EngineConfig& config);

struct StreamedResult {
  std::string text;
  RequestEvent finish;  // the kFinish event
};

// Submits `request`, writes text to `out` as it arrives, returns the full text and the
// finish event (whose status carries any engine error).
absl::StatusOr<StreamedResult> StreamRequest(Engine& engine, Request request, std::FILE* out);

// One line for stderr: tokens, speed, finish reason and the risk summary.
std::string SummaryLine(const StreamedResult& result);

}  // namespace witcert::cli
