// A deterministic stand-in for libFuzzer, so the request parser's robustness runs in every
// CI build: feeds each corpus file, then `--iterations` seeded mutations of each seed to
// LLVMFuzzerTestOneInput. Mutations mix byte edits (flips, truncation, invalid UTF-8) with
// JSON-aware ones (swapping a value for another type, extreme numbers, deep nesting).
//
// Usage: request_fuzz_driver [--iterations N] [--seed S] [corpus_dir_or_file ...]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void Feed(const std::string& bytes) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

const char* const kValues[] = {
    "null", "true", "false", "0", "-1", "1", "2", "1e308", "-1e308", "1.5", "4096", "4097",
    "9223372036854775807", "18446744073709551615", "-9223372036854775808", "\"\"", "\"x\"",
    "\"\\ud800\"", "[]", "[1]", "[\"a\",\"b\"]", "[[1],[2]]", "{}", "{\"type\":\"text\"}",
    "\"repair\"", "[1,2,3,4,5]", "\"\xff\""};

std::string Mutate(const std::string& in, std::mt19937_64& rng) {
  std::string s = in;
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int e = 0; e < edits; ++e) {
    if (s.empty()) s = "{}";
    const size_t at = rng() % s.size();
    switch (rng() % 8) {
      case 0: s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8))); break;
      case 1: s[at] = static_cast<char>(rng()); break;
      case 2: s.resize(at); break;  // truncate
      case 3: s.insert(at, s.substr(rng() % s.size(), 1 + rng() % 16)); break;
      case 4: {  // replace the value after a ':' with another JSON value
        const size_t colon = s.find(':', at);
        if (colon == std::string::npos) break;
        size_t end = colon + 1;
        int depth = 0;
        while (end < s.size()) {
          const char c = s[end];
          if (c == '[' || c == '{') ++depth;
          if ((c == ']' || c == '}') && depth-- == 0) break;
          if (c == ',' && depth == 0) break;
          ++end;
        }
        s.replace(colon + 1, end - colon - 1, kValues[rng() % std::size(kValues)]);
        break;
      }
      case 5: s.insert(at, std::string(1 + rng() % 64, rng() % 2 ? '[' : '{')); break;
      case 6: s.insert(at, "\xc3\x28\xed\xa0\x80"); break;  // invalid UTF-8 sequences
      case 7: s.insert(at, "//c\n"); break;                  // comments are not JSON here
    }
  }
  return s;
}

std::vector<std::string> BuiltinSeeds() {
  return {
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8})",
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"}]}],"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":2,"stop":["x","y"],"seed":3,"witcert":{"gate":"repair","tv_threshold":0.01}})",
      R"({"prompt":"Once upon","max_tokens":4,"temperature":0.5,"top_p":0.9,"top_k":5,"min_p":0.1,"logprobs":1})",
      R"({"prompt":[1,2,3],"n":1,"presence_penalty":1,"frequency_penalty":-1})",
  };
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 3000;
  uint64_t seed = 0x5eed;
  std::vector<std::string> seeds = BuiltinSeeds();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iterations" && i + 1 < argc) {
      iterations = std::strtol(argv[++i], nullptr, 10);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      namespace fs = std::filesystem;
      std::vector<fs::path> files;
      if (fs::is_directory(a)) {
        for (const auto& entry : fs::directory_iterator(a)) files.push_back(entry.path());
      } else {
        files.push_back(a);
      }
      for (const fs::path& f : files) {
        std::ifstream in(f, std::ios::binary);
        seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }
    }
  }
  std::mt19937_64 rng(seed);
  long fed = 0;
  for (const std::string& s : seeds) {
    Feed(s);
    ++fed;
    for (long i = 0; i < iterations; ++i, ++fed) Feed(Mutate(s, rng));
  }
  std::printf("request_fuzz_driver: %ld inputs from %zu seeds, no crash\n", fed, seeds.size());
  return 0;
}
