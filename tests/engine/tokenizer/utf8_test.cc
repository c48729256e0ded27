// UTF-8 helpers: validity per Unicode Table 3-7 and maximal-subpart replacement.
#include "engine/tokenizer/utf8.h"

#include <gtest/gtest.h>

#include <string>

#include "engine/tokenizer/tokenizer.h"

namespace witcert {
namespace {

TEST(Utf8Test, ValidSequencesOfEachLength) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("abc"));
  EXPECT_TRUE(IsValidUtf8("\xC3\xA9"));          // é U+00E9
  EXPECT_TRUE(IsValidUtf8("\xE4\xB8\xAD"));      // 中 U+4E2D
  EXPECT_TRUE(IsValidUtf8("\xF0\x9F\x98\x80"));  // 😀 U+1F600
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF, the last scalar value
  EXPECT_TRUE(IsValidUtf8("\xED\x9F\xBF"));      // U+D7FF, just below the surrogates
  EXPECT_TRUE(IsValidUtf8("\xEE\x80\x80"));      // U+E000, just above them
}

TEST(Utf8Test, DecodesCodePoints) {
  const Utf8Decoded d = DecodeUtf8At("x\xF0\x9F\x98\x80", 1);
  EXPECT_EQ(d.status, Utf8Status::kValid);
  EXPECT_EQ(d.length, 4u);
  EXPECT_EQ(d.code_point, 0x1F600u);
  EXPECT_EQ(DecodeUtf8At("\xE4\xB8\xAD", 0).code_point, 0x4E2Du);
}

TEST(Utf8Test, RejectsOverlongsSurrogatesAndOutOfRange) {
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xC1\xBF"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xE0\x9F\xBF"));      // overlong 3-byte (U+07FF)
  EXPECT_FALSE(IsValidUtf8("\xF0\x8F\xBF\xBF"));  // overlong 4-byte (U+FFFF)
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // U+D800 surrogate
  EXPECT_FALSE(IsValidUtf8("\xED\xBF\xBF"));      // U+DFFF surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // U+110000
  EXPECT_FALSE(IsValidUtf8("\xF5\x80\x80\x80"));
  EXPECT_FALSE(IsValidUtf8("\xFF"));
  EXPECT_FALSE(IsValidUtf8("\x80"));              // lone continuation
  EXPECT_FALSE(IsValidUtf8("\xC3"));              // truncated
}

TEST(Utf8Test, CompletePrefixStopsBeforeIncompleteOrInvalid) {
  EXPECT_EQ(CompleteUtf8Prefix("ab\xF0\x9F\x98"), 2u);      // emoji missing its last byte
  EXPECT_EQ(CompleteUtf8Prefix("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(CompleteUtf8Prefix("\xC3\xA9\x80z"), 2u);       // stray continuation
  EXPECT_EQ(CompleteUtf8Prefix("\xE0\x80"), 0u);            // can never complete
}

TEST(Utf8Test, IncompleteVersusInvalid) {
  EXPECT_EQ(DecodeUtf8At("\xF0\x9F", 0).status, Utf8Status::kIncomplete);
  EXPECT_EQ(DecodeUtf8At("\xE0\x80", 0).status, Utf8Status::kInvalid);  // E0 needs A0..BF
  const Utf8Decoded d = DecodeUtf8At("\xE4\xB8z", 0);  // broken by an ASCII byte
  EXPECT_EQ(d.status, Utf8Status::kInvalid);
  EXPECT_EQ(d.length, 2u);  // maximal subpart: E4 B8
}

TEST(Utf8Test, SanitizeReplacesEachMaximalSubpart) {
  std::string out;
  // "a" E4 B8 (subpart) "z" 80 (lone) F0 9F (incomplete tail).
  const std::string in = "a\xE4\xB8z\x80\xF0\x9F";
  EXPECT_EQ(AppendSanitizedUtf8(in, /*hold_incomplete_tail=*/true, out), in.size() - 2);
  EXPECT_EQ(out, "a\xEF\xBF\xBDz\xEF\xBF\xBD");
  out.clear();
  EXPECT_EQ(AppendSanitizedUtf8(in, /*hold_incomplete_tail=*/false, out), in.size());
  EXPECT_EQ(out, "a\xEF\xBF\xBDz\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Utf8Test, AppendUtf8EncodesEachLength) {
  std::string s;
  for (char32_t cp : {0x41u, 0xE9u, 0x4E2Du, 0x1F600u}) AppendUtf8(cp, s);
  EXPECT_EQ(s, "A\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80");
}

}  // namespace
}  // namespace witcert
