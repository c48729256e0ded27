// A deterministic stand-in for libFuzzer, so the GGUF parser's robustness runs in every CI
// build: feeds each corpus file, then `--iterations` seeded random mutations of each seed
// (corpus files plus images built in memory) to LLVMFuzzerTestOneInput. Passing means no
// crash; build with -fsanitize=address to also catch silent out-of-bounds reads.
//
// Usage: gguf_fuzz_driver [--iterations N] [--seed S] [corpus_dir_or_file ...]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "tests/engine/model/gguf_writer.h"
#include "tests/engine/model/tiny_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using witcert::testing::GgufWriter;

int Feed(const std::string& bytes) {
  return LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// Seeds built in memory: a tiny llama and qwen2 model and a metadata-heavy image.
std::vector<std::string> BuiltinSeeds() {
  std::vector<std::string> seeds;
  witcert::testing::TinySpec spec;
  spec.layers = 1;
  spec.vocab = 8;
  seeds.push_back(witcert::testing::TinyWriter(spec).Build());
  spec.arch = "qwen2";
  spec.norm_type = 1;  // F16 norms take the conversion path
  seeds.push_back(witcert::testing::TinyWriter(spec).Build());
  GgufWriter w(2);
  w.SetAlignment(16);
  w.AddStringArray("s", {"a", "bc", ""});
  w.AddArray<int16_t>("i", witcert::testing::kGgufI16, {1, -2, 3});
  w.AddScalar<double>("d", witcert::testing::kGgufF64, 0.5);
  std::string nested;
  witcert::testing::AppendPod<uint32_t>(&nested, witcert::testing::kGgufArray);
  witcert::testing::AppendPod<uint64_t>(&nested, 1);
  witcert::testing::AppendPod<uint32_t>(&nested, witcert::testing::kGgufU8);
  witcert::testing::AppendPod<uint64_t>(&nested, 2);
  nested += "xy";
  w.AddRaw("n", witcert::testing::kGgufArray, nested);
  w.AddTensor("t", 2, {32, 2});
  w.AddTensor("u", 30, {5});
  seeds.push_back(w.Build());
  return seeds;
}

// Applies 1-4 random edits of the kinds that break length-prefixed formats.
std::string Mutate(const std::string& in, std::mt19937_64& rng) {
  static const uint64_t kInteresting[] = {0,
                                          1,
                                          2,
                                          31,
                                          32,
                                          33,
                                          255,
                                          0x7FFFFFFF,
                                          0x80000000,
                                          0xFFFFFFFF,
                                          uint64_t{1} << 32,
                                          uint64_t{1} << 62,
                                          uint64_t{1} << 63,
                                          ~uint64_t{0},
                                          ~uint64_t{0} - 7};
  std::string s = in;
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !s.empty(); ++e) {
    const size_t at = rng() % s.size();
    switch (rng() % 6) {
      case 0:  // flip a bit
        s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8)));
        break;
      case 1:  // random byte
        s[at] = static_cast<char>(rng());
        break;
      case 2: {  // interesting u32 or u64 over a field
        const uint64_t v = kInteresting[rng() % std::size(kInteresting)];
        const size_t width = rng() % 2 ? 8 : 4;
        for (size_t k = 0; k < width && at + k < s.size(); ++k) {
          s[at + k] = static_cast<char>(v >> (8 * k));
        }
        break;
      }
      case 3:  // truncate
        s.resize(at);
        break;
      case 4: {  // delete a chunk
        const size_t n = std::min<size_t>(1 + rng() % 16, s.size() - at);
        s.erase(at, n);
        break;
      }
      default: {  // duplicate a chunk
        const size_t n = std::min<size_t>(1 + rng() % 16, s.size() - at);
        s = s.substr(0, at + n) + s.substr(at);  // [at, at + n) twice
        break;
      }
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 2000;
  uint64_t seed = 12345;
  std::vector<std::string> seeds = BuiltinSeeds();
  size_t corpus_files = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--iterations" && i + 1 < argc) {
      iterations = std::strtol(argv[++i], nullptr, 10);
      continue;
    }
    if (arg == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
      continue;
    }
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    } else {
      files.push_back(arg);
    }
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "cannot read %s\n", f.c_str());
        return 1;
      }
      seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      ++corpus_files;
    }
  }
  std::mt19937_64 rng(seed);
  long runs = 0;
  for (const std::string& s : seeds) {
    Feed(s);
    ++runs;
    for (long i = 0; i < iterations; ++i, ++runs) Feed(Mutate(s, rng));
  }
  std::printf("gguf_fuzz_driver: %zu seeds (%zu from corpus), %ld inputs, no crash\n", seeds.size(),
              corpus_files, runs);
  return 0;
}
