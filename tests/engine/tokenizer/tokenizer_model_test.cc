// Tokenizer on the real SmolLM2 vocabulary: round trips, structure that follows from the
// "smollm" pre-tokenizer, the golden ids from llama-cpp-python (an independent
// implementation), and an Encode throughput figure.
//
// Model path: $WITCERT_MODEL or models/SmolLM2-135M-Instruct.Q4_1.gguf. Tests skip when the
// file (or the golden file) is absent unless WITCERT_REQUIRE_MODEL=1.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace witcert {
namespace {

std::string ModelPath() {
  const char* env = std::getenv("WITCERT_MODEL");
  return env != nullptr && *env != '\0' ? env : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

bool RequireModel() {
  const char* env = std::getenv("WITCERT_REQUIRE_MODEL");
  return env != nullptr && std::string(env) == "1";
}

class TokenizerModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(ModelPath())) return;
    auto gguf = GgufFile::Open(ModelPath());
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    gguf_ = std::move(gguf).value().release();
    auto tok = Tokenizer::FromGguf(*gguf_);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(tok).value().release();
  }
  void SetUp() override {
    if (tok_ != nullptr) return;
    if (RequireModel()) FAIL() << "model " << ModelPath() << " not loaded";
    GTEST_SKIP() << "model " << ModelPath() << " absent";
  }
  static const Tokenizer& tok() { return *tok_; }

  static inline GgufFile* gguf_ = nullptr;   // leaked on purpose: lives for the process
  static inline Tokenizer* tok_ = nullptr;
};

std::vector<std::string> RoundTripStrings() {
  return {"",
          "Hello world",
          "  leading and trailing  ",
          "I'm sure you'll see we've done it, haven't we? I'M SURE.",
          "Numbers: 0 7 42 1234567890 3.14159 -2e10 1,000,000",
          "tabs\tand\nnewlines\r\n\n\n  indented\n\tcode",
          "def f(x):\n    return x**2  # square\n",
          "{\"json\": [1, 2, {\"k\": null}]}",
          "日本語のテキストと中文文本，还有한국어.",
          "Emoji 😀👍🏽 🇫🇷 ❤️ and ZWJ 👩‍👩‍👧",
          "Ünïcödé àccents — dashes – “quotes” ‘single’ … ²³ ½",
          "Arabic مرحبا Hebrew שלום Hindi नमस्ते Thai สวัสดี",
          "<|im_start|> looks special but parse_special is off <|im_end|>",
          std::string("\x00\x01\x7F\xA0", 4) + "invalid \xC3 utf8 \xE4\xB8 end \xF0\x9F",
          std::string(5000, ' ') + "x" + std::string(3000, '\n')};
}

TEST_F(TokenizerModelTest, MetadataMatchesTheFile) {
  EXPECT_EQ(tok().vocab_size(), 49152);
  EXPECT_EQ(tok().pre_tokenizer(), "smollm");
  EXPECT_EQ(tok().Find("<|im_start|>"), 1);  // token list read independently with gguf-py
  EXPECT_EQ(tok().Find("<|im_end|>"), 2);
  EXPECT_EQ(tok().eos_id(), 2);
  EXPECT_TRUE(tok().IsEndOfGeneration(2));
  EXPECT_TRUE(tok().IsEndOfGeneration(0));  // <|endoftext|>
  EXPECT_FALSE(tok().IsEndOfGeneration(1));
}

// The 21 bytes whose byte-level spelling is not in SmolLM2's vocabulary (listed with gguf-py
// from the file): they cannot round-trip and encode as the unknown id.
bool IsUnrepresentable(char c) {
  static const std::string kMissing("\x04\x06\x13\x14\x16\x1D\xC0\xC1\xF1\xF2\xF5\xF6"
                                    "\xF7\xF8\xF9\xFA\xFB\xFC\xFD\xFE\xFF");
  return kMissing.find(c) != std::string::npos;
}

TEST_F(TokenizerModelTest, UnrepresentableBytesAreDropped) {
  // 0xFF and 0x04 have no token in SmolLM2's vocabulary. The unknown id (0) is
  // <|endoftext|>, an end-of-generation token, so they are dropped as llama.cpp drops them.
  EXPECT_EQ(tok().Encode("\xFF", false), std::vector<TokenId>{});
  EXPECT_EQ(tok().Encode("a\x04", false), (std::vector<TokenId>{tok().Find("a")}));
}

TEST_F(TokenizerModelTest, RoundTripIsIdentity) {
  for (const std::string& s : RoundTripStrings()) {
    EXPECT_EQ(tok().Decode(tok().Encode(s, false)), s) << s.substr(0, 80);
  }
  std::mt19937 rng(99);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) {
      do c = static_cast<char>(rng() % 256); while (IsUnrepresentable(c));
    }
    ASSERT_EQ(tok().Decode(tok().Encode(s, false)), s);
  }
}

TEST_F(TokenizerModelTest, DigitsAreAlwaysSingleTokens) {
  // smollm isolates every \p{N}: " 2024" is " ", "2", "0", "2", "4".
  const std::vector<TokenId> ids = tok().Encode(" 2024", false);
  ASSERT_EQ(ids.size(), 5u);
  const char* expected[] = {" ", "2", "0", "2", "4"};
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(tok().TokenBytes(ids[i]), expected[i]);
}

TEST_F(TokenizerModelTest, ChatPromptKeepsSpecialTokens) {
  auto tmpl = ChatTemplate::FromGguf(*gguf_);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ(tmpl->default_system_prompt(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const std::string prompt = tmpl->Apply({{"user", "Hi"}}, true);
  const std::vector<TokenId> ids = tok().Encode(prompt, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 1);
  int im_start = 0, im_end = 0;
  for (TokenId id : ids) {
    im_start += id == 1;
    im_end += id == 2;
  }
  EXPECT_EQ(im_start, 3);  // system, user, assistant
  EXPECT_EQ(im_end, 2);
  EXPECT_EQ(tok().Decode(ids, /*render_special=*/true), prompt);
}

TEST_F(TokenizerModelTest, GoldenIdsFromLlamaCpp) {
  const std::string path = "tests/golden/tokenize.json";
  std::ifstream in(path);
  if (!in) {
    if (RequireModel()) FAIL() << path << " missing";
    GTEST_SKIP() << path << " absent";
  }
  const nlohmann::json golden = nlohmann::json::parse(in);
  ASSERT_TRUE(golden.contains("cases"));
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const bool parse_special = c.value("parse_special", false);
    const std::vector<TokenId> want = c["ids"].get<std::vector<TokenId>>();
    const std::vector<TokenId> got = tok().Encode(text, parse_special, /*add_bos=*/false);
    if (got != want) {
      size_t i = 0;
      while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
      ADD_FAILURE() << "text " << nlohmann::json(text).dump() << " parse_special="
                    << parse_special << ": first difference at position " << i << " of "
                    << want.size() << " (want " << (i < want.size() ? want[i] : -1) << ", got "
                    << (i < got.size() ? got[i] : -1) << ", got " << got.size() << " ids)";
    }
    ++checked;
  }
  std::printf("golden: %d cases checked\n", checked);
  EXPECT_GT(checked, 0);
}

// Deterministic mixed text: English-like words, numbers, code, punctuation and some CJK.
std::string ThroughputCorpus(size_t bytes) {
  const std::vector<std::string> words = {
      "the", "model", "attention", "cache", "quantized", "error", "bound", "certificate",
      "token", "server", "request", "latency", "throughput", "Layer", "HEAD", "step",
      "kernel", "memory", "budget", "engineers", "wouldn't", "it's", "value", "key",
      "inference", "batch", "schedule", "gate", "meter", "SmolLM", "函数", "缓存", "🙂"};
  const std::vector<std::string> seps = {" ", " ", " ", " ", ", ", ". ", "\n", ": ", " (",
                                         ") ", " = ", "\n\n    ", "; ", " -- "};
  std::mt19937 rng(2024);
  std::string out;
  while (out.size() < bytes) {
    if (rng() % 9 == 0) {
      out += std::to_string(rng() % 100000);
    } else {
      out += words[rng() % words.size()];
    }
    out += seps[rng() % seps.size()];
  }
  return out;
}

TEST_F(TokenizerModelTest, EncodeThroughput) {
  // $WITCERT_TOKENIZER_CORPUS (a text file) replaces the synthetic corpus when set.
  std::string text = ThroughputCorpus(400 * 1024);
  if (const char* corpus = std::getenv("WITCERT_TOKENIZER_CORPUS"); corpus != nullptr) {
    std::ifstream f(corpus, std::ios::binary);
    ASSERT_TRUE(f) << corpus;
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  auto fresh = Tokenizer::FromGguf(*gguf_);  // its piece cache starts empty
  ASSERT_TRUE(fresh.ok());
  for (const char* pass : {"cold cache", "warm cache"}) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<TokenId> ids = (*fresh)->Encode(text, false);
    const auto t1 = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(t1 - t0).count();
    std::printf("Encode (%s): %zu bytes -> %zu tokens in %.3f s: %.0f tokens/s, %.1f MB/s\n",
                pass, text.size(), ids.size(), seconds, ids.size() / seconds,
                text.size() / seconds / 1e6);
    EXPECT_EQ(tok().Decode(ids), text);
  }
}

}  // namespace
}  // namespace witcert
