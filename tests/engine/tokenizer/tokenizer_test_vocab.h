// A tiny GPT-2-style vocabulary as a GGUF image, for tokenizer unit tests.
#pragma once

#include <string>
#include <vector>

#include "engine/tokenizer/byte_level.h"
#include "tests/engine/model/gguf_writer.h"

namespace witcert::testing {

struct TestVocab {
  std::vector<std::string> tokens;  // byte-level spellings
  std::vector<int32_t> types;
  std::vector<std::string> merges;

  int Add(std::string text, int32_t type = 1) {
    tokens.push_back(std::move(text));
    types.push_back(type);
    return static_cast<int>(tokens.size()) - 1;
  }
  // A normal token for raw `bytes`, spelled in the byte-level alphabet.
  int AddBytes(std::string_view bytes) { return Add(ByteLevelAlphabet::Get().Encode(bytes)); }
  // "left right" over raw bytes.
  void AddMerge(std::string_view left, std::string_view right) {
    const ByteLevelAlphabet& a = ByteLevelAlphabet::Get();
    merges.push_back(a.Encode(left) + " " + a.Encode(right));
  }

  GgufWriter Writer(std::string_view pre = "gpt2") const {
    GgufWriter w;
    w.AddString("tokenizer.ggml.model", "gpt2");
    w.AddString("tokenizer.ggml.pre", pre);
    w.AddStringArray("tokenizer.ggml.tokens", tokens);
    w.AddArray<int32_t>("tokenizer.ggml.token_type", kGgufI32, types);
    w.AddStringArray("tokenizer.ggml.merges", merges);
    return w;
  }
};

}  // namespace witcert::testing
