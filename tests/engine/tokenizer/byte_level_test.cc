// GPT-2 byte-level alphabet, checked against values derived by hand from the definition:
// the printable Latin-1 bytes keep their value; the others, in increasing order, take
// U+0100 + (their rank among the non-printable bytes).
#include "engine/tokenizer/byte_level.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace witcert {
namespace {

TEST(ByteLevelTest, KnownMappings) {
  const ByteLevelAlphabet& a = ByteLevelAlphabet::Get();
  EXPECT_EQ(a.ToCodePoint('A'), U'A');
  EXPECT_EQ(a.ToCodePoint('!'), U'!');     // 0x21, first printable
  EXPECT_EQ(a.ToCodePoint('~'), U'~');     // 0x7E
  EXPECT_EQ(a.ToCodePoint(0xA1), 0xA1u);
  EXPECT_EQ(a.ToCodePoint(0xFF), 0xFFu);
  EXPECT_EQ(a.ToCodePoint(0x00), 0x100u);  // rank 0 among the shifted bytes
  EXPECT_EQ(a.ToCodePoint('\n'), 0x10Au);  // rank 10: 'Ċ'
  EXPECT_EQ(a.ToCodePoint(' '), 0x120u);   // rank 32: 'Ġ'
  EXPECT_EQ(a.ToCodePoint(0x7F), 0x121u);  // rank 33 (0x00..0x20 are 33 bytes)
  EXPECT_EQ(a.ToCodePoint(0xA0), 0x142u);  // 0x7F..0xA0 are ranks 33..66
  EXPECT_EQ(a.ToCodePoint(0xAD), 0x143u);  // rank 67, the last: 'Ń'
  EXPECT_EQ(a.Spelling(' '), "\xC4\xA0");  // Ġ in UTF-8
}

TEST(ByteLevelTest, IsABijection) {
  const ByteLevelAlphabet& a = ByteLevelAlphabet::Get();
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = a.ToCodePoint(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second) << "byte " << b;
    EXPECT_EQ(a.ToByte(cp), b);
    EXPECT_NE(cp, U' ') << "no byte may be spelled as a space (merges are space-separated)";
  }
  EXPECT_EQ(a.ToByte(0x144), -1);
  EXPECT_EQ(a.ToByte(U'中'), -1);
}

TEST(ByteLevelTest, EncodeDecodeRoundTripsAllBytes) {
  const ByteLevelAlphabet& a = ByteLevelAlphabet::Get();
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(a.Decode(a.Encode(all)), all);
  EXPECT_EQ(a.Encode(" hi\n"), "\xC4\xA0hi\xC4\x8A");  // Ġhi Ċ
}

TEST(ByteLevelTest, DecodeCopiesForeignCharactersThrough) {
  const ByteLevelAlphabet& a = ByteLevelAlphabet::Get();
  EXPECT_EQ(a.Decode("\xC4\xA0\xE4\xB8\xAD"), " \xE4\xB8\xAD");  // Ġ中 → " 中"
  EXPECT_EQ(a.Decode("x\xFFy"), "x\xFFy");  // invalid UTF-8 byte copied as is
}

}  // namespace
}  // namespace witcert
