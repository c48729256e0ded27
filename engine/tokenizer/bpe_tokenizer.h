// The one BPE tokenizer behind both model formats, in its two symbol alphabets.
//
// Why a plain description struct: a GGUF vocabulary (tokenizer.ggml.*) and a Hugging Face
// tokenizer.json describe the same machine (initial symbols, ranked merges, a pre-tokenizer,
// special tokens matched before BPE). Each loader only parses its format into BpeVocab;
// MakeBpeTokenizer builds every table the hot path needs, so encoding, decoding and
// end-of-generation detection cannot drift between the formats.
//
// The two alphabets:
//  * byte-level (GPT-2, Llama 3, Qwen2, SmolLM): text is split by a pre-tokenizer regex and
//    each byte starts as its GPT-2 byte-level spelling;
//  * SentencePiece-style (Llama 2, Mistral 7B, GGUF tokenizer.ggml.model "llama"): spaces are
//    written as U+2581 "▁", a "▁" is put before text segments (every segment, as llama.cpp and
//    HF's legacy Prepend normalizer do, or only a segment at the start of the input, as HF's
//    Metaspace prepend_scheme "first" does), there is no regex (Metaspace's split: each "▁"
//    starts a piece), each character starts as its token (else its <0xNN> byte tokens, else
//    the unknown id), and decoding writes "▁" back as a space. Merges come from the
//    tokenizer.json's list or, for GGUF, from the scores: a pair whose concatenation is a
//    token merges with that token's score as its priority (higher first, ties leftmost), as
//    llama.cpp's and SentencePiece's BPE do.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace witcert {

// What a vocabulary entry is (kNormal..kByte carry GGUF's tokenizer.ggml.token_type codes).
enum class TokenKind : uint8_t {
  kAbsent = 0,       // no vocabulary entry has this id (tokenizer.json gaps, added-only ids)
  kNormal = 1,       // byte-level symbols or SentencePiece text, decoded to bytes
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

enum class BpeSymbols : uint8_t { kByteLevel, kSentencePiece };

// SentencePiece's space, U+2581 "▁".
inline constexpr std::string_view kSentencePieceSpace = "\xE2\x96\x81";

// A byte-fallback token's byte: "<0xNN>" → NN (hex, either case), else -1.
int ByteTokenValue(std::string_view text);

// Where a SentencePiece vocabulary puts a "▁" before text (segments are the text between
// special tokens matched whole).
enum class SpacePrefix : uint8_t {
  kNone,
  kEverySegment,  // llama.cpp's add_space_prefix; HF's Prepend("▁") normalizer
  kFirstSegment,  // only a segment that starts the input (HF Metaspace prepend_scheme "first")
};

struct BpeVocab {
  // [vocab] Each token's text as the format stores it (kNormal: byte-level symbols; kByte:
  // "<0xNN>"; others: literal text; kAbsent: ignored). Every present token is part of the
  // BPE vocabulary and of Find, the lowest id winning for a repeated text.
  std::vector<std::string> texts;
  std::vector<TokenKind> kinds;  // [vocab]
  // Applied after the vocabulary in order; Find consults them after the vocabulary, the
  // last one winning for a repeated content. Merging never produces them.
  std::vector<AddedToken> added;
  std::vector<std::string> merges;  // [num_merges] "left right", rank = index
  // [vocab] SentencePiece scores; when there are no merges, they give them (see above).
  std::vector<float> scores;
  BpeSymbols symbols = BpeSymbols::kByteLevel;
  SpacePrefix space_prefix = SpacePrefix::kNone;  // kSentencePiece only
  bool prefix_unless_leading_space = false;       // Metaspace: no "▁" before a segment that
                                                  // already starts with a space
  bool split_at_spaces = false;  // kSentencePiece: each "▁" starts a piece (Metaspace split)
  std::string pre_tokenizer;        // kByteLevel: a PreTokenizer::Create name
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

// InvalidArgument when texts and kinds (and scores, when given) differ in size, the
// vocabulary is empty, or an id
// (bos, eos, unknown, end-of-generation, added) is outside it; the pre-tokenizer's error
// for an unknown pre_tokenizer name. The result is safe to use from several threads.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeBpeTokenizer(BpeVocab vocab);

}  // namespace witcert
