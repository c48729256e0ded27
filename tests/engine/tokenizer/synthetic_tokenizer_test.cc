// The synthetic tokenizer: any byte string round trips; the three specials are parsed only
// with parse_special and end generation; other ids render as "<tN>".
#include "engine/tokenizer/synthetic_tokenizer.h"

#include <string>

#include "gtest/gtest.h"

namespace witcert {
namespace {

TEST(SyntheticTokenizerTest, BytesRoundTrip) {
  auto t = MakeSyntheticTokenizer(512);
  ASSERT_TRUE(t.ok());
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string texts[] = {"", "hello", "naïve 東京 🙂", all};
  for (const std::string& text : texts) {
    const auto ids = (*t)->Encode(text, false);
    EXPECT_EQ(ids.size(), text.size());
    EXPECT_EQ((*t)->Decode(ids), text);
  }
}

TEST(SyntheticTokenizerTest, SpecialsAndNamedIds) {
  auto t = MakeSyntheticTokenizer(512);
  ASSERT_TRUE(t.ok());
  const Tokenizer& tok = **t;
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.Find("<|im_start|>"), 510);
  EXPECT_EQ(tok.Find("<|im_end|>"), 511);
  EXPECT_EQ(tok.eos_id(), 511);
  EXPECT_EQ(tok.bos_id(), 509);
  EXPECT_TRUE(tok.IsEndOfGeneration(511));
  EXPECT_TRUE(tok.IsEndOfGeneration(509));
  EXPECT_FALSE(tok.IsEndOfGeneration(510));
  EXPECT_TRUE(tok.IsSpecial(510));
  EXPECT_FALSE(tok.IsSpecial(300));
  EXPECT_EQ(tok.Encode("<|im_start|>a", true), (std::vector<TokenId>{510, 'a'}));
  EXPECT_EQ(tok.Encode("<|im_start|>a", false).size(), 13u);
  EXPECT_EQ(tok.Decode({300, 'x', 510}), "<t300>x");
  EXPECT_EQ(tok.Decode({510}, true), "<|im_start|>");
  EXPECT_EQ(tok.TokenBytes(512), "");
  EXPECT_EQ(tok.Encode("ab", false, /*add_bos=*/true).size(), 2u);  // no BOS asked for
}

TEST(SyntheticTokenizerTest, TooSmallVocabulary) {
  EXPECT_FALSE(MakeSyntheticTokenizer(259).ok());
  EXPECT_TRUE(MakeSyntheticTokenizer(260).ok());
}

}  // namespace
}  // namespace witcert
