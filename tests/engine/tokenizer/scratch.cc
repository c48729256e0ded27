#include <cstdio>
#include "engine/model/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/bpe_merger.h"
#include "engine/tokenizer/byte_level.h"
using namespace witcert;
int main(int argc, char** argv) {
  auto g = GgufFile::Open("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  auto t = Tokenizer::FromGguf(**g);
  auto toks = *(*g)->GetStringArray("tokenizer.ggml.tokens");
  auto merges = *(*g)->GetStringArray("tokenizer.ggml.merges");
  absl::flat_hash_map<std::string, int32_t> vocab;
  for (size_t i = 0; i < toks.size(); ++i) vocab.try_emplace(std::string(toks[i]), i);
  BpeMerger m(vocab, merges, 0);
  printf("skipped merges %zu\n", m.skipped_merges());
  int bad = 0;
  for (int i = 0; i < (*t)->vocab_size(); ++i) {
    if ((*t)->IsSpecial(i)) continue;
    std::vector<int32_t> ids; m.Merge((*t)->TokenBytes(i), ids);
    if (ids.size() != 1 || ids[0] != i) { if (bad < 10) printf("token %d '%s' ->%zu ids\n", i, std::string(toks[i]).c_str(), ids.size()); ++bad; }
  }
  printf("tokens not reproduced by BPE: %d\n", bad);
}
