// JSON mode's recognizer (engine/runtime/json_prefix.h): every byte of valid objects is
// accepted and the object completes exactly at its end; invalid documents fail at the byte
// that makes them so; a refused byte or token leaves the state as it was; the token mask allows
// exactly the tokens whose bytes continue the prefix. Random objects are generated here and
// serialized by nlohmann::json, an independent writer.
#include "engine/runtime/json_prefix.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/runtime/listed_tokenizer.h"

namespace witcert {
namespace {

// The number of leading bytes of `text` the recognizer accepts (text.size() when all).
size_t AcceptedPrefix(std::string_view text, JsonPrefix* state = nullptr) {
  JsonPrefix local;
  JsonPrefix& s = state != nullptr ? *state : local;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!s.Feed(text[i])) return i;
  }
  return text.size();
}

TEST(JsonPrefixTest, ValidObjectsAreAcceptedAndCompleteAtTheirEnd) {
  for (const char* doc : {
           R"({})", R"( { } )", R"({"a":1})", R"({"a": -0.5e+10, "b": [true, false, null]})",
           R"({"s": "q\"\\\/\b\f\n\r\t\u00e9x", "n": [[], [{}], 0, 10, 1.25, 2E-3, -7]})",
           "{\"utf8\": \"caf\xC3\xA9 \xF0\x9F\x99\x82\"}", "{\n  \"k\" :\t{\"deep\": [1,2,{\"x\":[]}]}\n}\n"}) {
    SCOPED_TRACE(doc);
    ASSERT_TRUE(nlohmann::json::accept(doc));  // the documents are valid
    JsonPrefix s;
    const std::string text = doc;
    size_t close = text.find_last_of('}');
    for (size_t i = 0; i < text.size(); ++i) {
      ASSERT_TRUE(s.Feed(text[i])) << "byte " << i;
      EXPECT_EQ(s.Complete(), i >= close) << "byte " << i;
    }
  }
}

TEST(JsonPrefixTest, InvalidDocumentsFailAtTheByteThatBreaksThem) {
  struct Case {
    std::string text;
    size_t fails_at;
  };
  const std::vector<Case> cases = {
      {"[1]", 0},              // json_object: the document is an object
      {"\"s\"", 0},
      {"{a:1}", 1},            // keys are strings
      {"{\"a\" 1}", 5},        // a colon after the key
      {"{\"a\":01}", 6},       // no leading zeros
      {"{\"a\":1.}", 7},       // a digit after the point
      {"{\"a\":-}", 6},
      {"{\"a\":1e}", 7},
      {"{\"a\":tru}", 8},
      {"{\"a\":nul1}", 8},
      {"{\"a\":[1,]}", 8},     // no trailing comma
      {"{\"a\":1,}", 7},
      {"{\"a\":[1}", 7},       // brackets must match
      {"{\"a\":\"\\x\"}", 7},  // unknown escape
      {"{\"a\":\"\\u12g4\"}", 10},
      {"{\"a\":\"x\ny\"}", 7}, // raw control characters are not allowed in strings
      {"{}x", 2},              // nothing but space after the object
      {"{},{}", 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_FALSE(nlohmann::json::accept(c.text) && c.text[0] == '{');
    EXPECT_EQ(AcceptedPrefix(c.text), c.fails_at);
  }
}

TEST(JsonPrefixTest, RefusedBytesLeaveTheStateUnchanged) {
  JsonPrefix s;
  ASSERT_TRUE(s.Feed(std::string_view("{\"a\":")));
  EXPECT_FALSE(s.Feed(std::string_view("12x")));  // all or nothing
  EXPECT_FALSE(s.Feed('}'));
  EXPECT_TRUE(s.Feed(std::string_view("12}")));
  EXPECT_TRUE(s.Complete());
  std::string deep(JsonPrefix::kMaxDepth, '[');
  deep[0] = '{';
  JsonPrefix d;
  EXPECT_EQ(AcceptedPrefix("{\"k\":" + deep.substr(1), &d), 5u + JsonPrefix::kMaxDepth - 1);
  EXPECT_FALSE(d.Feed('['));  // one container more than kMaxDepth
}

// Random objects (nested objects, arrays, strings with escapes and UTF-8, numbers, literals)
// as nlohmann::json writes them, compact and indented: every byte accepted, complete at the end.
nlohmann::json RandomValue(std::mt19937& rng, int depth) {
  const int kind = static_cast<int>(rng() % (depth < 4 ? 7 : 5));
  switch (kind) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<int64_t>(rng() % 2000000) - 1000000;
    case 3: return std::ldexp(static_cast<double>(rng() % 100000) - 50000.0, static_cast<int>(rng() % 40) - 20);
    case 4: {
      std::string s;
      const char* pieces[] = {"a", "Z", " ", "\"", "\\", "/", "\n", "\t", "\x01", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x99\x82"};
      for (int i = static_cast<int>(rng() % 8); i > 0; --i) s += pieces[rng() % 12];
      return s;
    }
    case 5: {
      nlohmann::json a = nlohmann::json::array();
      for (int i = static_cast<int>(rng() % 4); i > 0; --i) a.push_back(RandomValue(rng, depth + 1));
      return a;
    }
    default: {
      nlohmann::json o = nlohmann::json::object();
      for (int i = static_cast<int>(rng() % 4); i > 0; --i) o["k" + std::to_string(rng() % 100)] = RandomValue(rng, depth + 1);
      return o;
    }
  }
}

TEST(JsonPrefixTest, RandomObjectsFromAnIndependentWriter) {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 500; ++trial) {
    nlohmann::json o = nlohmann::json::object();
    for (int i = static_cast<int>(rng() % 5); i > 0; --i) o["f" + std::to_string(i)] = RandomValue(rng, 1);
    for (int indent : {-1, 2}) {
      const std::string text = o.dump(indent);
      JsonPrefix s;
      ASSERT_EQ(AcceptedPrefix(text, &s), text.size()) << text;
      EXPECT_TRUE(s.Complete()) << text;
    }
  }
}

TEST(JsonTokenMaskTest, AllowsExactlyTheTokensThatContinueThePrefix) {
  // A few hand-picked tokens, then the end (id 9).
  const testing::ListedTokenizer tok({"{", "}", "\"a\"", ":", "1", "12}", " ", "x", "{}"});
  const TokenByteTable table(tok);
  JsonTokenMask mask(table);
  std::vector<uint8_t> allowed;
  JsonPrefix s;
  mask.Allowed(s, &allowed);
  EXPECT_EQ(allowed, (std::vector<uint8_t>{1, 0, 0, 0, 0, 0, 1, 0, 1, 0}));  // {, space, {}
  mask.Advance(0, &s);  // {
  mask.Allowed(s, &allowed);
  EXPECT_EQ(allowed, (std::vector<uint8_t>{0, 1, 1, 0, 0, 0, 1, 0, 0, 0}));  // }, "a", space
  mask.Advance(2, &s);  // "a"
  mask.Advance(3, &s);  // :
  mask.Allowed(s, &allowed);
  EXPECT_EQ(allowed, (std::vector<uint8_t>{1, 0, 1, 0, 1, 1, 1, 0, 1, 0}));  // {, "a", 1, 12}, space, {}
  mask.Advance(5, &s);  // 12}
  EXPECT_TRUE(s.Complete());
  mask.Allowed(s, &allowed);
  EXPECT_EQ(allowed, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 1}));  // only the end
}

// The mask cache: at every state along random documents, over a vocabulary of every single
// byte plus multi-byte pieces, the cached mask equals one computed afresh, and most states hit.
std::vector<std::string> ByteVocabulary() {
  std::vector<std::string> texts;
  for (int b = 1; b < 128; ++b) texts.emplace_back(1, static_cast<char>(b));
  for (const char* piece : {"\"name\"", "\": ", "\", \"", "},", "]}", "true", "null", "1.5", "e-3", "\\u00", "  "}) {
    texts.emplace_back(piece);
  }
  return texts;
}

TEST(JsonTokenMaskTest, CachedMasksEqualFreshOnes) {
  const testing::ListedTokenizer tok(ByteVocabulary());
  const TokenByteTable table(tok);
  const JsonTokenMask cached(table);
  std::mt19937 rng(77);
  int64_t states = 0;
  for (int trial = 0; trial < 20; ++trial) {
    nlohmann::json o = nlohmann::json::object();
    for (int i = static_cast<int>(rng() % 4) + 1; i > 0; --i) o["f" + std::to_string(i)] = RandomValue(rng, 1);
    const std::string text = o.dump(trial % 2 == 0 ? -1 : 1);
    JsonPrefix s;
    for (size_t i = 0; i <= text.size(); ++i) {
      std::vector<uint8_t> got, want;
      cached.Allowed(s, &got);
      JsonTokenMask(table).Allowed(s, &want);
      ASSERT_EQ(got, want) << text.substr(0, i);
      ++states;
      if (i < text.size()) {
        ASSERT_TRUE(s.Feed(text[i]));
      }
    }
  }
  EXPECT_GT(cached.cache_hits(), states / 2);
}

}  // namespace
}  // namespace witcert
