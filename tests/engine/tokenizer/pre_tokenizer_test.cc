// Pre-tokenizer splits. Every expectation was derived by hand from the regex (alternatives
// tried left to right at each position, greedy quantifiers backtracking only as needed),
// not from running this implementation; the derivation is noted where it is not obvious.
#include "engine/tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace witcert {
namespace {

using Pieces = std::vector<std::string>;

Pieces Split(std::string_view pre, std::string_view text) {
  auto p = PreTokenizer::Create(pre);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return {};
  Pieces out;
  for (std::string_view s : (*p)->Split(text)) out.emplace_back(s);
  return out;
}

TEST(PreTokenizerTest, UnknownNameListsSupported) {
  auto p = PreTokenizer::Create("bogus-pre");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("bogus-pre"), std::string::npos);
  for (const char* name : {"smollm", "gpt2", "default", "llama-bpe", "qwen2", "tekken"}) {
    EXPECT_NE(p.status().message().find(name), std::string::npos) << name;
  }
}

TEST(PreTokenizerTest, Gpt2WordsContractionsPunctuation) {
  EXPECT_EQ(Split("gpt2", "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(Split("gpt2", "I'm can't we're"), (Pieces{"I", "'m", " can", "'t", " we", "'re"}));
  // Contractions are case-sensitive in GPT-2: "'M" is punctuation then a word.
  EXPECT_EQ(Split("gpt2", "I'M"), (Pieces{"I", "'", "M"}));
  EXPECT_EQ(Split("gpt2", "foo!!! bar"), (Pieces{"foo", "!!!", " bar"}));
  EXPECT_EQ(Split("gpt2", "abc 12345"), (Pieces{"abc", " 12345"}));
  EXPECT_EQ(Split("default", "abc 12345"), (Pieces{"abc", " 12345"}));
}

TEST(PreTokenizerTest, Gpt2Whitespace) {
  // "  b": \s+(?!\S) backs off to one space so the next space can lead " b".
  EXPECT_EQ(Split("gpt2", "a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(Split("gpt2", "hi  "), (Pieces{"hi", "  "}));  // trailing run: end is not \S
  // "\n\ny": first "\n" (followed by \n); the second is followed by 'y' so only \s+ takes it.
  EXPECT_EQ(Split("gpt2", "x\n\ny"), (Pieces{"x", "\n", "\n", "y"}));
  // ` ?\p{L}+` takes a literal space only, never a tab.
  EXPECT_EQ(Split("gpt2", "\t\tfoo"), (Pieces{"\t", "\t", "foo"}));
}

TEST(PreTokenizerTest, Gpt2CjkAndEmoji) {
  EXPECT_EQ(Split("gpt2", "你好世界 ok"), (Pieces{"你好世界", " ok"}));  // Lo is \p{L}
  // Emoji (So) and '!' are both [^\s\p{L}\p{N}]: one run with the leading space.
  EXPECT_EQ(Split("gpt2", "hi 😀😀!"), (Pieces{"hi", " 😀😀!"}));
}

TEST(PreTokenizerTest, SmolLmSplitsEveryDigitFirst) {
  // Stage 1 isolates digits: "abc ", "1".."5"; stage 2 on "abc " sees the space at the end.
  EXPECT_EQ(Split("smollm", "abc 12345"), (Pieces{"abc", " ", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(Split("smollm", "x2y"), (Pieces{"x", "2", "y"}));
  EXPECT_EQ(Split("smollm", "version 3.14"),
            (Pieces{"version", " ", "3", ".", "1", "4"}));
  // \p{N} covers No and non-ASCII Nd: superscript two and ARABIC-INDIC DIGIT THREE.
  EXPECT_EQ(Split("smollm", "x²٣"), (Pieces{"x", "²", "٣"}));
  EXPECT_EQ(Split("smollm", "we're 😀\n\nok"),
            (Pieces{"we", "'re", " 😀", "\n", "\n", "ok"}));
  EXPECT_EQ(Split("starcoder", "a1"), (Pieces{"a", "1"}));
}

TEST(PreTokenizerTest, Llama3) {
  // Case-insensitive contractions; digits in groups of up to three; a lone space before a
  // number is its own piece (\s+(?!\S) fails before '1', plain \s+ takes it).
  EXPECT_EQ(Split("llama-bpe", "I'M 12345 ok"), (Pieces{"I", "'M", " ", "123", "45", " ok"}));
  // \s*[\r\n]+ takes the whole newline run.
  EXPECT_EQ(Split("llama-bpe", "hello\n\nworld"), (Pieces{"hello", "\n\n", "world"}));
  // One leading non-letter joins the word; trailing newlines join punctuation.
  EXPECT_EQ(Split("llama-bpe", "(foo)\n"), (Pieces{"(foo", ")\n"}));
  EXPECT_EQ(Split("llama-bpe", "  hi"), (Pieces{" ", " hi"}));
  EXPECT_EQ(Split("llama-bpe", "you'll"), (Pieces{"you", "'ll"}));
  EXPECT_EQ(Split("llama-bpe", "hi 😀😀!"), (Pieces{"hi", " 😀😀!"}));
  // U+FF0C FULLWIDTH COMMA is Po, so it may lead the following word.
  EXPECT_EQ(Split("llama-bpe", "你好，世界"), (Pieces{"你好", "，世界"}));
}

TEST(PreTokenizerTest, Qwen2) {
  EXPECT_EQ(Split("qwen2", "WE'LL 2024"), (Pieces{"WE", "'LL", " ", "2", "0", "2", "4"}));
  EXPECT_EQ(Split("qwen2", "a\r\n\r\nb"), (Pieces{"a", "\r\n\r\n", "b"}));
  EXPECT_EQ(Split("qwen2", "x = 10;"), (Pieces{"x", " =", " ", "1", "0", ";"}));
}

// tekken: these expectations are HF tokenizers' own splits (Split(Regex(pattern), "isolated")
// from PyPI's tokenizers 0.23, whose regex engine is Oniguruma), not derived by hand.
TEST(PreTokenizerTest, TekkenMatchesHfTokenizers) {
  EXPECT_EQ(Split("tekken", "Hello World"), (Pieces{"Hello", " World"}));
  EXPECT_EQ(Split("tekken", "HTTPServer isOK"), (Pieces{"HTTPServer", " is", "OK"}));
  EXPECT_EQ(Split("tekken", "WE'LL 2024!"), (Pieces{"WE", "'LL", " ", "2", "0", "2", "4", "!"}));
  EXPECT_EQ(Split("tekken", "don't"), (Pieces{"don", "'t"}));
  EXPECT_EQ(Split("tekken", "a\r\n\r\nb"), (Pieces{"a", "\r\n\r\n", "b"}));
  EXPECT_EQ(Split("tekken", "x = 10; // c\n/path/to"),
            (Pieces{"x", " =", " ", "1", "0", ";", " //", " c", "\n", "/path", "/to"}));
  EXPECT_EQ(Split("tekken", "  two   spaces"), (Pieces{" ", " two", "  ", " spaces"}));
  EXPECT_EQ(Split("tekken", "Straße ÉCOLE naïve"), (Pieces{"Straße", " ÉCOLE", " naïve"}));
  EXPECT_EQ(Split("tekken", "日本語テキスト"), (Pieces{"日本語テキスト"}));
  EXPECT_EQ(Split("tekken", "emoji 🙂🙂 end"), (Pieces{"emoji", " 🙂🙂", " end"}));
  EXPECT_EQ(Split("tekken", "camelCaseWord"), (Pieces{"camel", "Case", "Word"}));
  EXPECT_EQ(Split("tekken", "tab\tsep"), (Pieces{"tab", "\tsep"}));
}

TEST(PreTokenizerTest, InvalidUtf8KeepsEveryByte) {
  EXPECT_EQ(Split("gpt2", "ab\xFF" "cd"), (Pieces{"ab", "\xFF", "cd"}));
  EXPECT_EQ(Split("smollm", "\xE4\xB8"), (Pieces{"\xE4", "\xB8"}));  // truncated 中
  EXPECT_TRUE(Split("gpt2", "").empty());
}

TEST(PreTokenizerTest, PiecesAlwaysConcatenateToInput) {
  std::mt19937 rng(1234);
  const std::vector<std::string> atoms = {"a", "Z", " ", "  ", "\n", "\r\n", "\t", "7", "42",
                                          "'s", "'LL", "!", "...", "é", "中", "😀", "\xFF",
                                          "\xF0\x9F", "\x80", "²"};
  for (const char* pre : {"smollm", "gpt2", "llama-bpe", "qwen2", "tekken"}) {
    auto p = PreTokenizer::Create(pre);
    ASSERT_TRUE(p.ok());
    for (int trial = 0; trial < 300; ++trial) {
      std::string text;
      const int n = static_cast<int>(rng() % 20);
      for (int i = 0; i < n; ++i) text += atoms[rng() % atoms.size()];
      std::string joined;
      for (std::string_view s : (*p)->Split(text)) {
        EXPECT_FALSE(s.empty());
        joined += s;
      }
      ASSERT_EQ(joined, text) << pre;
    }
  }
}

}  // namespace
}  // namespace witcert
