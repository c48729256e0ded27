// Special-token matching: leftmost match, longest at a position, no empty plain segments.
#include "engine/tokenizer/special_tokens.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace witcert {
namespace {

using Segs = std::vector<std::pair<std::string, int>>;

Segs SplitToPairs(const SpecialTokenMatcher& m, std::string_view text) {
  Segs out;
  for (const TextSegment& s : m.Split(text)) out.emplace_back(std::string(s.text), s.token);
  return out;
}

SpecialTokenMatcher ChatMatcher() {
  SpecialTokenMatcher m;
  m.Add("<|im", 5);  // a prefix of the others: must lose to them where they match
  m.Add("<|im_start|>", 1);
  m.Add("<|im_end|>", 2);
  m.Add("", 9);      // ignored
  return m;
}

TEST(SpecialTokenMatcherTest, LongestMatchAtEachPosition) {
  const SpecialTokenMatcher m = ChatMatcher();
  EXPECT_EQ(SplitToPairs(m, "a<|im_start|>b<|im"),
            (Segs{{"a", -1}, {"<|im_start|>", 1}, {"b", -1}, {"<|im", 5}}));
  EXPECT_EQ(SplitToPairs(m, "<|im_sta"), (Segs{{"<|im", 5}, {"_sta", -1}}));
}

TEST(SpecialTokenMatcherTest, AdjacentAndAbsentTokens) {
  const SpecialTokenMatcher m = ChatMatcher();
  EXPECT_EQ(SplitToPairs(m, "<|im_end|><|im_end|>"), (Segs{{"<|im_end|>", 2}, {"<|im_end|>", 2}}));
  EXPECT_EQ(SplitToPairs(m, "plain <| text"), (Segs{{"plain <| text", -1}}));
  EXPECT_TRUE(SplitToPairs(m, "").empty());
  SpecialTokenMatcher empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(SplitToPairs(empty, "<|im_end|>"), (Segs{{"<|im_end|>", -1}}));
}

}  // namespace
}  // namespace witcert
