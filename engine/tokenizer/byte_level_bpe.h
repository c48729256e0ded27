// The one byte-level BPE tokenizer behind both model formats.
//
// Why a plain description struct: a GGUF vocabulary (tokenizer.ggml.*) and a Hugging Face
// tokenizer.json describe the same machine (GPT-2 byte-level symbols, ranked merges, a
// pre-tokenizer regex, special tokens matched before BPE). Each loader only parses its format
// into ByteLevelBpeVocab; MakeByteLevelBpeTokenizer builds every table the hot path needs,
// so encoding, decoding and end-of-generation detection cannot drift between the formats.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace witcert {

// What a vocabulary entry is (kNormal..kByte carry GGUF's tokenizer.ggml.token_type codes).
enum class ByteLevelTokenKind : uint8_t {
  kAbsent = 0,       // no vocabulary entry has this id (tokenizer.json gaps, added-only ids)
  kNormal = 1,       // GPT-2 byte-level symbols, decoded to bytes
  kUnknown = 2,      // rendered (its text) only with render_special
  kControl = 3,      // special: matched only with parse_special, hidden when decoding
  kUserDefined = 4,  // special: matched always, rendered as its text
  kUnused = 5,       // rendered (its text) only with render_special
  kByte = 6,         // "<0xNN>": decodes to byte NN (hidden text when malformed)
};

// A Hugging Face added token: matched as a whole string before BPE. It overrides its id's
// kind (special → kControl, else kUserDefined) and renders as `content`.
struct AddedToken {
  std::string content;
  TokenId id = -1;
  bool special = false;
};

struct ByteLevelBpeVocab {
  // [vocab] Each token's text as the format stores it (kNormal: byte-level symbols; kByte:
  // "<0xNN>"; others: literal text; kAbsent: ignored). Every present token is part of the
  // BPE vocabulary and of Find, the lowest id winning for a repeated text.
  std::vector<std::string> texts;
  std::vector<ByteLevelTokenKind> kinds;  // [vocab]
  // Applied after the vocabulary in order; Find consults them after the vocabulary, the
  // last one winning for a repeated content. Merging never produces them.
  std::vector<AddedToken> added;
  std::vector<std::string> merges;  // [num_merges] "left right", rank = index
  std::string pre_tokenizer;        // a PreTokenizer::Create name
  TokenId bos = -1;                 // -1: none
  TokenId eos = -1;                 // -1: none; ends generation
  TokenId unknown = -1;             // merger fallback for a byte with no token; -1: drop it
  std::vector<TokenId> extra_end_of_generation;  // EOT, EOM, listed eos ids; -1 ignored
  // Tokens spelled <|im_end|>, <|eot_id|>, <|end_of_text|>, <|endoftext|> or <|eom_id|> also
  // end generation; with this set only when they are special (a tokenizer.json may carry
  // such a text as an ordinary vocabulary entry).
  bool named_end_of_generation_special_only = false;
  bool add_bos = false;        // Encode(..., add_bos=true) prepends bos
  bool ignore_merges = false;  // a piece that is a whole token is that token (Llama 3)
};

// InvalidArgument when texts and kinds differ in size, the vocabulary is empty, or an id
// (bos, eos, unknown, end-of-generation, added) is outside it; the pre-tokenizer's error
// for an unknown pre_tokenizer name. The result is safe to use from several threads.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeByteLevelBpeTokenizer(ByteLevelBpeVocab vocab);

}  // namespace witcert
