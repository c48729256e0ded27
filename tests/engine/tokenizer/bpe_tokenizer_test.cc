// Tokenizer over a tiny hand-built vocabulary: merge order, fallbacks, special tokens,
// decoding, streaming and load-time validation. Expected ids follow from the merge ranks
// listed in MakeVocab (worked out by hand), not from running the tokenizer.
#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "tests/engine/tokenizer/tokenizer_test_vocab.h"

namespace witcert {
namespace {

using testing::GgufWriter;
using testing::TestVocab;

struct Ids {
  int endoftext, im_start, im_end, tool, unk, byte01;
  int he, ll, hell, hello, bc, ab, abc, aa, space_w;
};

TestVocab MakeVocab(Ids* ids) {
  TestVocab v;
  ids->endoftext = v.Add("<|endoftext|>", 3);
  ids->im_start = v.Add("<|im_start|>", 3);
  ids->im_end = v.Add("<|im_end|>", 3);
  ids->tool = v.Add("<tool>", 4);
  ids->unk = v.Add("<unk>", 2);
  for (int b = 0; b < 256; ++b) {
    if (b == 0x01 || b == 0x02) continue;  // 0x01: only a <0x01> token; 0x02: nothing
    v.AddBytes(std::string(1, static_cast<char>(b)));
  }
  ids->byte01 = v.Add("<0x01>", 6);
  ids->he = v.AddBytes("he");
  ids->ll = v.AddBytes("ll");
  ids->hell = v.AddBytes("hell");
  ids->hello = v.AddBytes("hello");
  ids->bc = v.AddBytes("bc");
  ids->ab = v.AddBytes("ab");
  ids->abc = v.AddBytes("abc");
  ids->aa = v.AddBytes("aa");
  ids->space_w = v.AddBytes(" w");
  v.AddMerge("h", "e");     // rank 0
  v.AddMerge("l", "l");     // rank 1
  v.AddMerge("he", "ll");   // rank 2
  v.AddMerge("hell", "o");  // rank 3
  v.AddMerge("b", "c");     // rank 4: beats "a b" inside "abc"
  v.AddMerge("a", "b");     // rank 5
  v.AddMerge("ab", "c");    // rank 6: unreachable from "abc" by BPE
  v.AddMerge("a", "a");     // rank 7
  v.AddMerge(" ", "w");     // rank 8
  return v;
}

std::unique_ptr<Tokenizer> Load(const GgufWriter& w) {
  auto gguf = GgufFile::FromBytes(w.Build());
  EXPECT_TRUE(gguf.ok()) << gguf.status();
  if (!gguf.ok()) return nullptr;
  auto tok = Tokenizer::FromGguf(**gguf);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

absl::Status LoadStatus(const GgufWriter& w) {
  auto gguf = GgufFile::FromBytes(w.Build());
  if (!gguf.ok()) return gguf.status();
  return Tokenizer::FromGguf(**gguf).status();
}

class BpeTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    vocab_ = MakeVocab(&ids_);
    GgufWriter w = vocab_.Writer();
    w.AddU32("tokenizer.ggml.eos_token_id", ids_.im_end);
    w.AddU32("tokenizer.ggml.bos_token_id", ids_.im_start);
    w.AddU32("tokenizer.ggml.unknown_token_id", ids_.unk);
    tok_ = Load(w);
    ASSERT_NE(tok_, nullptr);
  }
  int Byte(char c) const { return tok_->Find(ByteLevelAlphabet::Get().Spelling(c)); }

  Ids ids_;
  TestVocab vocab_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(BpeTokenizerTest, MergesByLowestRank) {
  EXPECT_EQ(tok_->Encode("hello", false), (std::vector<TokenId>{ids_.hello}));
  EXPECT_EQ(tok_->Encode("hell", false), (std::vector<TokenId>{ids_.hell}));
  // "b c" (rank 4) wins over "a b" (rank 5), and "a bc" is no merge.
  EXPECT_EQ(tok_->Encode("abc", false), (std::vector<TokenId>{Byte('a'), ids_.bc}));
  // Equal ranks: the leftmost pair first.
  EXPECT_EQ(tok_->Encode("aaa", false), (std::vector<TokenId>{ids_.aa, Byte('a')}));
  EXPECT_EQ(tok_->Encode("aaaa", false), (std::vector<TokenId>{ids_.aa, ids_.aa}));
  EXPECT_EQ(tok_->Encode(" world", false),
            (std::vector<TokenId>{ids_.space_w, Byte('o'), Byte('r'), Byte('l'), Byte('d')}));
  // Pieces never merge across the pre-tokenizer's boundaries: "he" + " " + "llo".
  EXPECT_EQ(tok_->Encode("he llo", false),
            (std::vector<TokenId>{ids_.he, Byte(' '), ids_.ll, Byte('o')}));
}

TEST_F(BpeTokenizerTest, LongPieceIsHandled) {
  const std::string run(20000, 'a');  // one piece; 10000 "aa" merges
  const std::vector<TokenId> ids = tok_->Encode(run, false);
  ASSERT_EQ(ids.size(), 10000u);
  for (TokenId id : ids) ASSERT_EQ(id, ids_.aa);
}

TEST_F(BpeTokenizerTest, Llama3PiecesThatAreTokensSkipMerges) {
  TestVocab v = vocab_;
  auto tok = Load(v.Writer("llama-bpe"));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("abc", false), (std::vector<TokenId>{ids_.abc}));
}

TEST_F(BpeTokenizerTest, ByteFallbacks) {
  EXPECT_EQ(tok_->Encode("\x01", false), (std::vector<TokenId>{ids_.byte01}));
  // No symbol and no <0x02> token: the byte is dropped (as llama.cpp does), never mapped to
  // an id that could be an end-of-generation token.
  EXPECT_EQ(tok_->Encode("a\x02", false), tok_->Encode("a", false));
  EXPECT_EQ(tok_->TokenBytes(ids_.byte01), "\x01");
}

TEST_F(BpeTokenizerTest, SpecialTokens) {
  const std::string text = "<|im_start|>hello<|im_end|>";
  EXPECT_EQ(tok_->Encode(text, true),
            (std::vector<TokenId>{ids_.im_start, ids_.hello, ids_.im_end}));
  const std::vector<TokenId> plain = tok_->Encode(text, false);
  for (TokenId id : plain) EXPECT_FALSE(tok_->IsSpecial(id)) << id;
  EXPECT_EQ(tok_->Decode(plain), text);
  // User-defined tokens are matched whether or not special parsing is on.
  EXPECT_EQ(tok_->Encode("aa<tool>aa", false),
            (std::vector<TokenId>{ids_.aa, ids_.tool, ids_.aa}));
}

TEST_F(BpeTokenizerTest, DecodeRendersSpecialOnlyOnRequest) {
  const std::vector<TokenId> ids = {ids_.im_start, ids_.hello, ids_.tool, ids_.im_end};
  EXPECT_EQ(tok_->Decode(ids), "hello<tool>");
  EXPECT_EQ(tok_->Decode(ids, true), "<|im_start|>hello<tool><|im_end|>");
  EXPECT_EQ(tok_->TokenBytes(ids_.im_end), "");
  EXPECT_EQ(tok_->TokenBytes(ids_.im_end, true), "<|im_end|>");
  EXPECT_EQ(tok_->TokenBytes(ids_.space_w), " w");
  EXPECT_EQ(tok_->TokenBytes(-1), "");
  EXPECT_EQ(tok_->TokenBytes(tok_->vocab_size()), "");
}

TEST_F(BpeTokenizerTest, RandomBytesRoundTrip) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) {
      do c = static_cast<char>(rng() % 256); while (c == '\x02');  // 0x02 has no token: dropped
    }
    ASSERT_EQ(tok_->Decode(tok_->Encode(s, false)), s);
  }
}

TEST_F(BpeTokenizerTest, ConcurrentEncodeAgreesWithSerial) {
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back("hello aa" + std::to_string(i) + " world abc");
  std::vector<std::vector<TokenId>> serial;
  for (const std::string& t : texts) serial.push_back(tok_->Encode(t, false));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int rep = 0; rep < 20; ++rep) {
        for (size_t i = 0; i < texts.size(); ++i) {
          mismatches[w] += tok_->Encode(texts[i], false) != serial[i];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST_F(BpeTokenizerTest, MetadataAccessors) {
  EXPECT_EQ(tok_->bos_id(), ids_.im_start);
  EXPECT_EQ(tok_->eos_id(), ids_.im_end);
  EXPECT_TRUE(tok_->IsEndOfGeneration(ids_.im_end));     // eos
  EXPECT_TRUE(tok_->IsEndOfGeneration(ids_.endoftext));  // by name
  EXPECT_FALSE(tok_->IsEndOfGeneration(ids_.im_start));
  EXPECT_FALSE(tok_->IsEndOfGeneration(-1));
  EXPECT_TRUE(tok_->IsSpecial(ids_.im_start));
  EXPECT_TRUE(tok_->IsSpecial(ids_.tool));
  EXPECT_FALSE(tok_->IsSpecial(ids_.hello));
  EXPECT_EQ(tok_->Find("<|im_end|>"), ids_.im_end);
  EXPECT_EQ(tok_->Find("nope"), -1);
  EXPECT_EQ(tok_->pre_tokenizer(), "gpt2");
  EXPECT_EQ(tok_->vocab_size(), static_cast<int32_t>(vocab_.tokens.size()));
}

TEST_F(BpeTokenizerTest, BosOnlyWhenModelAsks) {
  EXPECT_EQ(tok_->Encode("aa", false, /*add_bos=*/true), (std::vector<TokenId>{ids_.aa}));
  GgufWriter w = vocab_.Writer();
  w.AddU32("tokenizer.ggml.bos_token_id", ids_.im_start);
  w.AddScalar<uint8_t>("tokenizer.ggml.add_bos_token", testing::kGgufBool, 1);
  w.AddU32("tokenizer.ggml.eot_token_id", ids_.tool);
  auto tok = Load(w);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("aa", false, true), (std::vector<TokenId>{ids_.im_start, ids_.aa}));
  EXPECT_EQ(tok->Encode("aa", false, false), (std::vector<TokenId>{ids_.aa}));
  EXPECT_TRUE(tok->IsEndOfGeneration(ids_.tool));  // eot
  EXPECT_EQ(tok->eos_id(), -1);
}

TEST_F(BpeTokenizerTest, StreamingNeverSplitsACharacter) {
  // 😀 = F0 9F 98 80, fed one byte token at a time.
  StreamingDetokenizer s(*tok_);
  EXPECT_EQ(s.Push(Byte('\xF0')), "");
  EXPECT_EQ(s.Push(Byte('\x9F')), "");
  EXPECT_EQ(s.Push(ids_.im_end), "");  // special tokens are not rendered
  EXPECT_EQ(s.Push(Byte('\x98')), "");
  EXPECT_EQ(s.Push(Byte('\x80')), "\xF0\x9F\x98\x80");
  EXPECT_EQ(s.Push(ids_.hello), "hello");
  EXPECT_EQ(s.Flush(), "");
}

TEST_F(BpeTokenizerTest, StreamingReplacesInvalidBytes) {
  StreamingDetokenizer s(*tok_);
  EXPECT_EQ(s.Push(Byte('\xFF')), "\xEF\xBF\xBD");
  EXPECT_EQ(s.Push(Byte('\xF0')), "");
  EXPECT_EQ(s.Push(Byte('a')), "\xEF\xBF\xBD" "a");  // F0 can no longer complete
  EXPECT_EQ(s.Push(Byte('\xE4')), "");
  EXPECT_EQ(s.Push(Byte('\xB8')), "");
  EXPECT_EQ(s.Flush(), "\xEF\xBF\xBD");  // truncated 中 at the end
  EXPECT_EQ(s.Flush(), "");
}

TEST_F(BpeTokenizerTest, StreamedTextEqualsDecodedText) {
  const std::string text = "h\xC3\xA9llo \xE4\xB8\xAD\xF0\x9F\x98\x80 aaa";
  StreamingDetokenizer s(*tok_);
  std::string streamed;
  for (TokenId id : tok_->Encode(text, false)) {
    const std::string chunk = s.Push(id);
    EXPECT_TRUE(IsValidUtf8(chunk));
    streamed += chunk;
  }
  streamed += s.Flush();
  EXPECT_EQ(streamed, text);
}

TEST_F(BpeTokenizerTest, RejectsUnsupportedModelAndPre) {
  GgufWriter w;
  w.AddString("tokenizer.ggml.model", "bert");
  absl::Status st = LoadStatus(w);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("bert"), std::string::npos) << st;

  st = LoadStatus(vocab_.Writer("bogus-pre"));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("bogus-pre"), std::string::npos) << st;
  EXPECT_NE(st.message().find("smollm"), std::string::npos) << st;
}

TEST_F(BpeTokenizerTest, RejectsOutOfRangeIdsAndBadArrays) {
  GgufWriter w = vocab_.Writer();
  w.AddU32("tokenizer.ggml.eos_token_id", 1000000);
  absl::Status st = LoadStatus(w);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("eos_token_id"), std::string::npos) << st;

  TestVocab v = vocab_;
  v.types.pop_back();
  EXPECT_EQ(LoadStatus(v.Writer()).code(), absl::StatusCode::kInvalidArgument);

  GgufWriter no_tokens;
  no_tokens.AddString("tokenizer.ggml.model", "gpt2");
  EXPECT_EQ(LoadStatus(no_tokens).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace witcert
