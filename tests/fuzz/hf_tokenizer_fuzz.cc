// libFuzzer entry point for the Hugging Face tokenizer.json reader: any bytes as tokenizer.json
// must end in a status (HfTokenizerFromFiles); a tokenizer that loads must encode and decode a
// fixed text, special-token syntax included, and give only ids inside its vocabulary. Never a
// crash, an exception or an error ASan or UBSan detects.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/tokenizer/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  witcert::HfTokenizerFiles files;
  files.where = "fuzz";
  files.tokenizer_json.assign(reinterpret_cast<const char*>(data), size);
  auto tok = witcert::HfTokenizerFromFiles(files);
  if (!tok.ok()) {
    if (tok.status().message().empty()) std::abort();  // an error always says what is wrong
    return 0;
  }
  const witcert::Tokenizer& t = **tok;
  for (bool special : {false, true}) {
    const std::vector<witcert::TokenId> ids = t.Encode("Hello <s> wörld 123 \xf0\x9f\x98\x80 \n\t", special, true);
    for (witcert::TokenId id : ids) {
      if (id < 0 || id >= t.vocab_size()) std::abort();
    }
    (void)t.Decode(ids, special);
  }
  return 0;
}
