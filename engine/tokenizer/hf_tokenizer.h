// BPE tokenizer built from a Hugging Face tokenizer.json: byte-level (Llama 3, Qwen2, SmolLM,
// GPT-2 style) or SentencePiece-style with byte fallback (Llama 2, Mistral 7B: see
// SentencePieceLayoutOf in the .cc for the accepted layouts), plus the special ids and chat
// template that sit beside it.
//
// Why no general interpreter of tokenizer.json's pipeline: the models we serve use a handful
// of fixed pre-tokenizer sequences, each identical to a pre-tokenizer the GGUF path already
// implements (engine/tokenizer/pre_tokenizer.h). The HF sequence is mapped to that name
// exactly (regex text compared verbatim); anything else is Unimplemented naming what was
// found, because a near-miss regex would tokenize differently without any visible error.
// Normalizers: none, or NFC (ignored, as the GGUF path does for Qwen2: text arriving
// through the API is overwhelmingly NFC already). The files are only parsed here into a
// BpeVocab: the tokenizer itself is the one GGUF uses (bpe_tokenizer.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace witcert {

// The JSON texts of a checkpoint folder; an empty string means "file absent" (only
// tokenizer_json is required). `where` names the folder in messages.
struct HfTokenizerFiles {
  std::string where;
  std::string tokenizer_json;
  std::string tokenizer_config_json;
  std::string generation_config_json;
  std::string config_json;
};

// Reads tokenizer.json, tokenizer_config.json, generation_config.json and config.json from
// `folder` (the last three optional).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& folder);

// Builds the tokenizer. Vocabulary: model.vocab plus added_tokens (special → control:
// matched only with parse_special and hidden when decoding; non-special → user-defined:
// always matched, rendered). Merges: "a b" strings or ["a", "b"] pairs, rank = index.
// BOS/EOS: tokenizer_config.json's bos_token/eos_token, else generation_config.json's, else
// config.json's *_token_id; every eos id listed anywhere ends generation. add_bos from
// tokenizer_config.json's add_bos_token, else from a post_processor that prepends BOS.
absl::StatusOr<std::unique_ptr<Tokenizer>> HfTokenizerFromFiles(const HfTokenizerFiles& files);

// Maps tokenizer.json's "pre_tokenizer" object (JSON text) to a PreTokenizer name
// ("gpt2", "smollm", "llama-bpe", "qwen2").
absl::StatusOr<std::string> HfPreTokenizerName(std::string_view pre_tokenizer_json);

// The Jinja chat template of `folder`: tokenizer_config.json's "chat_template" (a string,
// or a list of {name, template} from which "default" is taken), else chat_template.jinja,
// else chat_template.json's "chat_template"; "" when the folder has none.
absl::StatusOr<std::string> ReadHfChatTemplate(const std::string& folder);

// `folder`/generation_config.json's text, "" when the folder has none.
absl::StatusOr<std::string> ReadHfGenerationConfig(const std::string& folder);

}  // namespace witcert
