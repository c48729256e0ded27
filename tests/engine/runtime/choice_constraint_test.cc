// Guided choice (engine/runtime/choice_constraint.h): the tokens allowed are those continuing
// some choice from the output so far, and the end exactly when the output is a choice.
#include "engine/runtime/choice_constraint.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace witcert {
namespace {

// Tokens: "yes", "y", "es", "no", "n", "o", "nope", " ", and an end-of-generation special token.
class TinyTokenizer : public Tokenizer {
 public:
  std::vector<std::string> texts = {"yes", "y", "es", "no", "n", "o", "nope", " ", "<eos>"};
  std::vector<TokenId> Encode(std::string_view, bool, bool) const override { return {}; }
  std::string TokenBytes(TokenId id, bool render_special) const override {
    return id == 8 && !render_special ? "" : texts[id];
  }
  std::string Decode(const std::vector<TokenId>&, bool) const override { return ""; }
  int32_t vocab_size() const override { return static_cast<int32_t>(texts.size()); }
  TokenId bos_id() const override { return -1; }
  TokenId eos_id() const override { return 8; }
  bool IsEndOfGeneration(TokenId id) const override { return id == 8; }
  bool IsSpecial(TokenId id) const override { return id == 8; }
  TokenId Find(std::string_view) const override { return -1; }
  std::string_view pre_tokenizer() const override { return "tiny"; }
};

TEST(ChoiceConstraintTest, AllowsWhatContinuesAChoiceAndEndsOnlyOnOne) {
  TinyTokenizer tok;
  const TokenByteTable table(tok);
  const std::vector<std::string> choices = {"yes", "no", "nope"};
  std::vector<uint8_t> allowed;
  ChoiceAllowed(choices, "", table, &allowed);
  EXPECT_EQ(allowed, (std::vector<uint8_t>{1, 1, 0, 1, 1, 0, 1, 0, 0}));  // yes y no n nope
  ChoiceAllowed(choices, "y", table, &allowed);
  EXPECT_EQ(allowed, (std::vector<uint8_t>{0, 0, 1, 0, 0, 0, 0, 0, 0}));  // es
  ChoiceAllowed(choices, "no", table, &allowed);  // a choice, and a prefix of "nope"
  EXPECT_EQ(allowed[8], 1);
  EXPECT_EQ(allowed[0] + allowed[3] + allowed[6], 0);
  EXPECT_TRUE(ChoiceComplete(choices, "no"));
  ChoiceAllowed(choices, "yes", table, &allowed);
  EXPECT_EQ(allowed, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 1}));  // only the end
  ChoiceAllowed(choices, "x", table, &allowed);  // off every choice: nothing
  EXPECT_EQ(allowed, std::vector<uint8_t>(9, 0));
  EXPECT_FALSE(ChoiceComplete(choices, "n"));
}

}  // namespace
}  // namespace witcert
