#include "engine/runtime/stop_matcher.h"

#include "gtest/gtest.h"

namespace witcert {
namespace {

std::string Feed(StopMatcher& m, const std::vector<std::string>& pieces, bool* stopped) {
  std::string out;
  *stopped = false;
  for (const std::string& p : pieces) {
    out += m.Push(p, stopped);
    if (*stopped) return out;
  }
  return out + m.Flush();
}

TEST(StopMatcherTest, NoStopsPassesThrough) {
  StopMatcher m({});
  bool stopped;
  EXPECT_EQ(Feed(m, {"a", "b", "c"}, &stopped), "abc");
  EXPECT_FALSE(stopped);
}

TEST(StopMatcherTest, StopSplitAcrossPiecesIsNeverEmitted) {
  StopMatcher m({"END"});
  bool stopped = false;
  EXPECT_EQ(m.Push("hello E", &stopped), "hello ");  // "E" might start "END"
  EXPECT_FALSE(stopped);
  EXPECT_EQ(m.Push("N", &stopped), "");
  EXPECT_EQ(m.Push("D and more", &stopped), "");
  EXPECT_TRUE(stopped);
}

TEST(StopMatcherTest, FalseStartIsReleased) {
  StopMatcher m({"END"});
  bool stopped;
  EXPECT_EQ(Feed(m, {"EN", "x", "y"}, &stopped), "ENxy");
  EXPECT_FALSE(stopped);
}

TEST(StopMatcherTest, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo w"});
  bool stopped;
  EXPECT_EQ(Feed(m, {"hello world"}, &stopped), "hel");
  EXPECT_TRUE(stopped);
}

TEST(StopMatcherTest, HeldTailReleasedOnFlush) {
  StopMatcher m({"\n\n"});
  bool stopped;
  EXPECT_EQ(m.Push("line\n", &stopped), "line");
  EXPECT_EQ(m.Flush(), "\n");
}

}  // namespace
}  // namespace witcert
