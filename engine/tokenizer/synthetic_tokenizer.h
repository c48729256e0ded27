// The tokenizer of synthetic models: no merges, no training, just a total bijection-ish map
// so the engine, the server and the benchmarks can run a model with random weights.
//
// Layout of a vocabulary of V ids (V >= 260): ids 0..255 are the raw bytes (so any text
// encodes, one token per byte, and decodes back exactly); the last three ids are the
// special tokens "<|endoftext|>" (BOS, V-3), "<|im_start|>" (V-2) and "<|im_end|>" (EOS,
// V-1), which makes the default ChatML template work; every other id n renders as "<tn>".
// "<tn>" text is not parsed back into id n: the round trip guaranteed is text → ids → text.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace witcert {

// InvalidArgument when `vocab_size` < 260 (bytes plus the three specials plus one "<tn>").
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeSyntheticTokenizer(int32_t vocab_size);

}  // namespace witcert
