// Guided choice (engine/runtime/choice_constraint.h): the tokens allowed are those continuing
// some choice from the output so far, and the end exactly when the output is a choice.
#include "engine/runtime/choice_constraint.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/runtime/listed_tokenizer.h"

namespace witcert {
namespace {

TEST(ChoiceConstraintTest, AllowsWhatContinuesAChoiceAndEndsOnlyOnOne) {
  // Tokens: "yes", "y", "es", "no", "n", "o", "nope", " ", and the end (id 8).
  const testing::ListedTokenizer tok({"yes", "y", "es", "no", "n", "o", "nope", " "});
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
