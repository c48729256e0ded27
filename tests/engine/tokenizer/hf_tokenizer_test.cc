// Tokenizer from tokenizer.json: a hand-made vocabulary whose merge results are worked out
// by hand below, merge-order sensitivity, both merge spellings, added tokens, special ids
// from the side files, the pre-tokenizer mapping, errors; and (when the default model is
// present) equivalence with the GGUF tokenizer on SmolLM2's real 49k vocabulary, rebuilt as
// tokenizer.json in memory.
#include "engine/tokenizer/hf_tokenizer.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/model/gguf.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/chat_template.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/model_path.h"

namespace witcert {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<TokenId>;

// Vocabulary over "a b c" and space (byte-level 'Ġ'); ids chosen by hand.
Json HandMadeTokenizer(const Json& merges) {
  Json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"Ġ", 3}, {"ab", 4},
                {"bc", 5}, {"abc", 6}, {"Ġab", 7}, {"Ġa", 12}};
  return {
      {"version", "1.0"},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false},
                         {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", Json::array({{{"id", 8}, {"content", "<|end|>"}, {"special", true}},
                                    {{"id", 9}, {"content", "<user>"}, {"special", false}}})},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
  };
}

std::unique_ptr<Tokenizer> Build(const Json& tokenizer, const std::string& tok_config = "",
                                 const std::string& gen_config = "") {
  HfTokenizerFiles files;
  files.where = "test";
  files.tokenizer_json = tokenizer.dump();
  files.tokenizer_config_json = tok_config;
  files.generation_config_json = gen_config;
  auto t = HfTokenizerFromFiles(files);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(HfTokenizerTest, MergesApplyInRankOrder) {
  // "a b" (rank 0) before "b c": abc → ab c → abc (rank 2).
  auto t = Build(HandMadeTokenizer({"a b", "b c", "ab c", "Ġ ab"}));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Encode("abc", false), (Ids{6}));
  EXPECT_EQ(t->Encode(" ab", false), (Ids{7}));   // Ġ a b → Ġ ab → Ġab
  EXPECT_EQ(t->Encode("cab", false), (Ids{2, 4}));
  EXPECT_EQ(t->Encode("abc ab", false), (Ids{6, 7}));
  // "b c" first: abc → a bc, and no merge joins "a bc".
  auto r = Build(HandMadeTokenizer({"b c", "a b", "ab c"}));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->Encode("abc", false), (Ids{0, 5}));
  EXPECT_EQ(r->Encode(" ab", false), (Ids{3, 4}));  // no "Ġ ab" merge here
}

TEST(HfTokenizerTest, PairFormMergesEqualStringForm) {
  auto s = Build(HandMadeTokenizer({"a b", "b c", "ab c", "Ġ ab"}));
  auto p = Build(HandMadeTokenizer(Json::array({Json::array({"a", "b"}), Json::array({"b", "c"}),
                                                Json::array({"ab", "c"}),
                                                Json::array({"Ġ", "ab"})})));
  ASSERT_NE(s, nullptr);
  ASSERT_NE(p, nullptr);
  for (const char* text : {"abc", " ab", "cba abc", "a b c"}) {
    EXPECT_EQ(s->Encode(text, false), p->Encode(text, false)) << text;
  }
}

TEST(HfTokenizerTest, RoundTripAndAddedTokens) {
  auto t = Build(HandMadeTokenizer({"a b", "b c", "ab c", "Ġ ab"}),
                 R"({"eos_token": {"content": "<|end|>"}, "bos_token": null})",
                 R"({"eos_token_id": [8, 9]})");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 13);  // ids 0..12 with a gap (10, 11) it must tolerate
  EXPECT_EQ(t->Decode({10, 11}, true), "");
  for (const char* text : {"abc ab", "cab  ba", " a b c"}) {
    EXPECT_EQ(t->Decode(t->Encode(text, false)), text);
  }
  // Special tokens: matched only with parse_special, hidden unless rendered.
  EXPECT_EQ(t->Encode("ab<|end|>", true), (Ids{4, 8}));
  const Ids plain = t->Encode("ab<|end|>", false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 8), 0);
  EXPECT_EQ(t->Decode({4, 8}), "ab");
  EXPECT_EQ(t->Decode({4, 8}, true), "ab<|end|>");
  // Non-special added tokens are always matched and always rendered.
  EXPECT_EQ(t->Encode("a<user>", false), (Ids{0, 9}));
  EXPECT_EQ(t->Decode({9}), "<user>");
  EXPECT_TRUE(t->IsSpecial(8));
  EXPECT_TRUE(t->IsSpecial(9));
  EXPECT_FALSE(t->IsSpecial(4));
  EXPECT_EQ(t->eos_id(), 8);
  EXPECT_EQ(t->bos_id(), -1);
  EXPECT_TRUE(t->IsEndOfGeneration(8));
  EXPECT_TRUE(t->IsEndOfGeneration(9));  // listed by generation_config.json
  EXPECT_FALSE(t->IsEndOfGeneration(4));
  EXPECT_EQ(t->Find("<|end|>"), 8);
  EXPECT_EQ(t->Find("Ġab"), 7);
  EXPECT_EQ(t->pre_tokenizer(), "gpt2");
}

TEST(HfTokenizerTest, AddBosFromPostProcessorOrFlag) {
  Json j = HandMadeTokenizer({"a b"});
  j["added_tokens"].push_back({{"id", 11}, {"content", "<s>"}, {"special", true}});
  j["post_processor"] = {{"type", "Sequence"},
                         {"processors", Json::array({
                              {{"type", "ByteLevel"}},
                              {{"type", "TemplateProcessing"},
                               {"single", Json::array({{{"SpecialToken", {{"id", "<s>"}}}},
                                                       {{"Sequence", {{"id", "A"}}}}})}},
                          })}};
  auto t = Build(j, R"({"bos_token": "<s>"})");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bos_id(), 11);
  EXPECT_EQ(t->Encode("ab", false, /*add_bos=*/true), (Ids{11, 4}));
  EXPECT_EQ(t->Encode("ab", false, /*add_bos=*/false), (Ids{4}));
  auto off = Build(j, R"({"bos_token": "<s>", "add_bos_token": false})");
  ASSERT_NE(off, nullptr);
  EXPECT_EQ(off->Encode("ab", false, true), (Ids{4}));
}

TEST(HfTokenizerTest, PreTokenizerMapping) {
  const Json llama3 = {
      {"type", "Sequence"},
      {"pretokenizers",
       Json::array({{{"type", "Split"},
                     {"pattern", {{"Regex", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                     {"use_regex", false}}})}};
  auto l = HfPreTokenizerName(llama3.dump());
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(*l, "llama-bpe");

  Json qwen = llama3;
  qwen["pretokenizers"][0]["pattern"]["Regex"] =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  auto q = HfPreTokenizerName(qwen.dump());
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(*q, "qwen2");

  Json tekken = llama3;  // Mistral Nemo's tokenizer.json
  tekken["pretokenizers"][0]["pattern"]["Regex"] =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  auto t = HfPreTokenizerName(tekken.dump());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "tekken");

  const Json smollm = {
      {"type", "Sequence"},
      {"pretokenizers", Json::array({{{"type", "Digits"}, {"individual_digits", true}},
                                     {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                      {"use_regex", true}}})}};
  auto s = HfPreTokenizerName(smollm.dump());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, "smollm");

  Json other = llama3;
  other["pretokenizers"][0]["pattern"]["Regex"] = R"(\p{L}+|\p{N}{1,2})";
  auto o = HfPreTokenizerName(other.dump());
  EXPECT_TRUE(absl::IsUnimplemented(o.status())) << o.status();
  auto m = HfPreTokenizerName(R"({"type":"Metaspace","replacement":"▁"})");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::StrContains(m.status().message(), "Metaspace")) << m.status();
}

TEST(HfTokenizerTest, ClearErrors) {
  HfTokenizerFiles files;
  files.where = "folder";
  EXPECT_TRUE(absl::IsNotFound(HfTokenizerFromFiles(files).status()));

  Json unigram = HandMadeTokenizer({"a b"});
  unigram["model"]["type"] = "Unigram";
  files.tokenizer_json = unigram.dump();
  EXPECT_TRUE(absl::IsUnimplemented(HfTokenizerFromFiles(files).status()));

  Json bad_merge = HandMadeTokenizer(Json::array({Json::array({"a"})}));
  files.tokenizer_json = bad_merge.dump();
  auto b = HfTokenizerFromFiles(files);
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(absl::StrContains(b.status().message(), "merge")) << b.status();

  files.tokenizer_json = HandMadeTokenizer({"a b"}).dump();
  files.tokenizer_config_json = R"({"eos_token": "<nope>"})";
  auto e = HfTokenizerFromFiles(files);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(absl::StrContains(e.status().message(), "<nope>")) << e.status();

  files.tokenizer_config_json = "";
  files.generation_config_json = R"({"eos_token_id": 4000})";
  EXPECT_FALSE(HfTokenizerFromFiles(files).ok());

  Json nfkc = HandMadeTokenizer({"a b"});
  nfkc["normalizer"] = {{"type", "NFKC"}};
  files.generation_config_json = "";
  files.tokenizer_json = nfkc.dump();
  EXPECT_TRUE(absl::IsUnimplemented(HfTokenizerFromFiles(files).status()));

  // Fields of an unexpected JSON type are errors, not exceptions (nlohmann's value(key, default)
  // throws on them; tests/fuzz/hf_tokenizer_fuzz found model.type as an array).
  for (const char* path : {"/model/type", "/pre_tokenizer/type", "/decoder/type", "/model/ignore_merges",
                           "/added_tokens/0/special"}) {
    Json odd = HandMadeTokenizer({"a b"});
    odd[Json::json_pointer(path)] = Json::array({1, 2});
    files.tokenizer_json = odd.dump();
    absl::StatusOr<std::unique_ptr<Tokenizer>> t;
    ASSERT_NO_THROW(t = HfTokenizerFromFiles(files)) << path;
    EXPECT_FALSE(t.ok()) << path;
  }
}

TEST(ChatTemplateTextTest, DetectsFamiliesLikeGguf) {
  const std::string qwen =
      "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- else %}"
      "{{- '<|im_start|>system\\nYou are Qwen.<|im_end|>\\n' }}{%- endif %}"
      "{{- '<|im_start|>' + message.role }}";
  auto t = ChatTemplate::FromTemplateText(qwen);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->kind(), ChatTemplateKind::kChatMl);
  EXPECT_EQ(t->default_system_prompt(), "You are Qwen.");
  auto l = ChatTemplate::FromTemplateText("{{ '<|start_header_id|>' + role }}");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->kind(), ChatTemplateKind::kLlama3);
  EXPECT_FALSE(ChatTemplate::FromTemplateText("{% for m in messages %}{{ m.content }}{% endfor %}").ok());
  EXPECT_FALSE(ChatTemplate::FromTemplateText("").ok());
  auto o = ChatTemplate::FromTemplateText("", "chatml");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->kind(), ChatTemplateKind::kChatMl);
}

// SmolLM2's GGUF vocabulary rebuilt as tokenizer.json: both tokenizers must agree.
TEST(HfTokenizerTest, MatchesGgufTokenizerOnSmolLm2Vocabulary) {
  WITCERT_REQUIRE_MODEL_OR_SKIP();
  auto gguf = GgufFile::Open(testing::DefaultModelPath());
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto reference = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_EQ((*reference)->pre_tokenizer(), "smollm");
  auto tokens = (*gguf)->GetStringArray("tokenizer.ggml.tokens");
  auto types = (*gguf)->GetNumberArray("tokenizer.ggml.token_type");
  auto merges = (*gguf)->GetStringArray("tokenizer.ggml.merges");
  ASSERT_TRUE(tokens.ok() && types.ok() && merges.ok());
  Json vocab = Json::object();
  Json added = Json::array();
  for (size_t i = 0; i < tokens->size(); ++i) {
    const std::string text((*tokens)[i]);
    vocab[text] = i;
    if ((*types)[i] == 3 || (*types)[i] == 4) {
      added.push_back({{"id", i}, {"content", text}, {"special", (*types)[i] == 3}});
    }
  }
  Json merge_list = Json::array();
  for (std::string_view m : *merges) merge_list.push_back(std::string(m));
  const Json j = {
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", Json::array({{{"type", "Digits"}, {"individual_digits", true}},
                                       {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                        {"use_regex", true}}})}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}},
  };
  const std::string bos((*tokens)[*(*gguf)->GetInt("tokenizer.ggml.bos_token_id")]);
  const std::string eos((*tokens)[*(*gguf)->GetInt("tokenizer.ggml.eos_token_id")]);
  auto hf = Build(j, Json({{"bos_token", bos}, {"eos_token", eos}}).dump());
  ASSERT_NE(hf, nullptr);
  EXPECT_EQ(hf->vocab_size(), (*reference)->vocab_size());
  EXPECT_EQ(hf->bos_id(), (*reference)->bos_id());
  EXPECT_EQ(hf->eos_id(), (*reference)->eos_id());
  const std::vector<std::string> texts = {
      "Hello, world! The year 2024 had 366 days.",
      "  leading spaces\n\nand\ttabs  ",
      "naïve café — 東京 🙂 don't I'll WE'RE",
      "def f(x):\n    return x**2  # comment\n",
      "<|im_start|>user\nWhat is 12+30?<|im_end|>\n<|im_start|>assistant\n",
      std::string("\xff\xfe broken utf8 \xc3", 17),
  };
  for (const std::string& text : texts) {
    for (bool special : {false, true}) {
      EXPECT_EQ(hf->Encode(text, special), (*reference)->Encode(text, special))
          << text << " special=" << special;
    }
    const Ids ids = (*reference)->Encode(text, false);
    EXPECT_EQ(hf->Decode(ids), (*reference)->Decode(ids)) << text;
  }
  for (TokenId id = 0; id < hf->vocab_size(); ++id) {
    ASSERT_EQ(hf->IsSpecial(id), (*reference)->IsSpecial(id)) << id;
    ASSERT_EQ(hf->TokenBytes(id, true), (*reference)->TokenBytes(id, true)) << id;
  }
}

}  // namespace
}  // namespace witcert
