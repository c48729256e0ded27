// Reads a request's stream to its end: the tokens it produced and its finish status.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/runtime/request.h"

namespace witcert::testing {

struct DrainedStream {
  std::vector<int32_t> tokens;  // the kToken events' tokens, in order
  absl::Status status;          // the kFinish event's
};

// Blocks until the stream's kFinish event.
inline DrainedStream Drain(RequestStream& stream) {
  DrainedStream d;
  while (true) {
    const RequestEvent e = *stream.Next();
    if (e.kind == RequestEvent::Kind::kToken) d.tokens.push_back(e.token.token);
    if (e.kind == RequestEvent::Kind::kFinish) {
      d.status = e.status;
      return d;
    }
  }
}

}  // namespace witcert::testing
