#include "engine/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/tokenizer/absl_bridge.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/bpe_tokenizer.h"
#include "nlohmann/json.hpp"

namespace witcert {
namespace {

using Json = nlohmann::json;

// Ids above this are not a vocabulary (guards the per-id tables against a corrupt file).
constexpr int64_t kMaxTokenId = 1 << 24;

// Split regexes as published in the tokenizer.json of each family, compared verbatim.
constexpr std::string_view kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kTekkenSplit =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

absl::StatusOr<std::string> ReadOptional(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::PermissionDeniedError(absl::StrCat(path.string(), ": cannot read"));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Parses optional JSON text ("" → null).
absl::StatusOr<Json> ParseOptional(const std::string& text, std::string_view where,
                                   std::string_view file) {
  if (text.empty()) return Json();
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Av(where), "/", Av(file), ": not a JSON object"));
  }
  return j;
}

// A special-token field of tokenizer_config.json: "text" or {"content": "text"}.
std::string TokenText(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return "";
}

// An *_token_id field: an int or a list of ints (appended to `out`).
void TokenIds(const Json& j, const char* key, std::vector<int64_t>* out) {
  if (!j.is_object() || !j.contains(key)) return;
  const Json& v = j[key];
  if (v.is_number_integer()) out->push_back(v.get<int64_t>());
  if (v.is_array()) {
    for (const Json& e : v) {
      if (e.is_number_integer()) out->push_back(e.get<int64_t>());
    }
  }
}

// What TokenBytes(id, /*render_special=*/true) will return: the last added token's content,
// else the decoded vocabulary text.
std::string RenderedText(const BpeVocab& vocab, TokenId id) {
  for (auto it = vocab.added.rbegin(); it != vocab.added.rend(); ++it) {
    if (it->id == id) return it->content;
  }
  if (vocab.kinds[id] != TokenKind::kNormal) return "";
  if (vocab.symbols == BpeSymbols::kSentencePiece) return vocab.texts[id];  // never a BOS text
  return ByteLevelAlphabet::Get().Decode(vocab.texts[id]);
}

// The stages of a tokenizer.json component: the `list` entries of a {"type": "Sequence"} one,
// else the component itself (none for null).
std::vector<const Json*> Stages(const Json& v, const char* list) {
  std::vector<const Json*> out;
  if (v.is_object() && v.value("type", "") == "Sequence" && v.contains(list) && v[list].is_array()) {
    for (const Json& e : v[list]) out.push_back(&e);
  } else if (!v.is_null()) {
    out.push_back(&v);
  }
  return out;
}

// A component's JSON for an error message, cut at 300 characters.
std::string Abbreviated(const Json& v) {
  std::string dump = v.dump();
  if (dump.size() > 300) dump = dump.substr(0, 300) + "...";
  return dump;
}

absl::StatusOr<std::string> PreTokenizerName(const Json& pre, std::string_view where) {
  auto unsupported = [&](std::string_view why) {
    const std::string dump = Abbreviated(pre);
    return absl::UnimplementedError(absl::StrCat(
        Av(where), ": pre_tokenizer ", dump, ": ", Av(why),
        " (supported: GPT-2 ByteLevel, SmolLM Digits+ByteLevel, Llama 3, Qwen2 and tekken Split+ByteLevel)"));
  };
  if (!pre.is_object()) return unsupported("not a byte-level pre-tokenizer");
  const std::vector<const Json*> stages = Stages(pre, "pretokenizers");
  bool byte_level = false, use_regex = false, digits = false;
  std::vector<std::string> splits;
  for (const Json* e : stages) {
    if (!e->is_object()) return unsupported("a stage is not an object");
    const std::string type = e->value("type", "");
    if (type == "ByteLevel") {
      byte_level = true;
      use_regex = e->value("use_regex", true);
      if (e->value("add_prefix_space", false)) return unsupported("add_prefix_space is set");
    } else if (type == "Digits") {
      if (!e->value("individual_digits", false)) return unsupported("Digits groups digits");
      digits = true;
    } else if (type == "Split") {
      if (!e->contains("pattern") || !(*e)["pattern"].is_object() ||
          !(*e)["pattern"].contains("Regex") || !(*e)["pattern"]["Regex"].is_string() ||
          e->value("behavior", "") != "Isolated" || e->value("invert", false)) {
        return unsupported("Split is not an isolated regex split");
      }
      splits.push_back((*e)["pattern"]["Regex"].get<std::string>());
    } else {
      return unsupported(absl::StrCat("stage type '", type, "'"));
    }
  }
  if (!byte_level) return unsupported("no ByteLevel stage");
  if (splits.empty() && use_regex) return std::string(digits ? "smollm" : "gpt2");
  if (splits.size() == 1 && !use_regex && !digits) {
    if (splits[0] == kLlama3Split) return std::string("llama-bpe");
    if (splits[0] == kQwen2Split) return std::string("qwen2");
    if (splits[0] == kTekkenSplit) return std::string("tekken");
  }
  return unsupported("no built-in pre-tokenizer has these stages and regexes");
}

constexpr std::string_view kSpaceMark = kSentencePieceSpace;

// How a SentencePiece-style tokenizer.json (Llama 2, Mistral 7B) writes spaces; nullopt for a
// byte-level one. Two published forms: the legacy normalizer Sequence[Prepend("▁"),
// Replace(" " → "▁")] with no pre-tokenizer (a "▁" before every segment), or a Metaspace
// pre-tokenizer (replacement "▁"; prepend_scheme first / always / never, or the older
// add_prefix_space; split, default true). Their decoders (Metaspace, or Replace / ByteFallback
// / Fuse / Strip) all turn "▁" back into spaces and <0xNN> into bytes, which is what decoding
// does; Strip's removal of the text's first space is not applied (generated text follows a
// prompt, so its leading space is real). Anything else is Unimplemented naming it.
struct SentencePieceLayout {
  SpacePrefix prefix = SpacePrefix::kNone;
  bool prefix_unless_leading_space = false;  // Metaspace's rule; Prepend always prepends
  bool split = false;
};

absl::StatusOr<std::optional<SentencePieceLayout>> SentencePieceLayoutOf(const Json& j,
                                                                          std::string_view where) {
  const auto unsupported = [&](const char* what, const Json& v) {
    return absl::UnimplementedError(absl::StrCat(Av(where), ": ", what, " ", Abbreviated(v), " is not supported"));
  };
  std::optional<SentencePieceLayout> layout;
  const Json normalizer = j.contains("normalizer") ? j["normalizer"] : Json();
  bool prepend = false, replace = false, other = false;
  for (const Json* e : Stages(normalizer, "normalizers")) {
    const std::string type = e->is_object() ? e->value("type", "") : "";
    if (type == "Prepend" && e->value("prepend", "") == kSpaceMark) {
      prepend = true;
    } else if (type == "Replace" && (*e).contains("pattern") && (*e)["pattern"].is_object() &&
               (*e)["pattern"].value("String", "") == " " && e->value("content", "") == kSpaceMark) {
      replace = true;
    } else if (type != "NFC") {
      other = true;
    }
  }
  if (replace) {
    if (other) return unsupported("normalizer", normalizer);
    layout = SentencePieceLayout{prepend ? SpacePrefix::kEverySegment : SpacePrefix::kNone, false};
  } else if (prepend) {
    return unsupported("normalizer", normalizer);
  }
  const Json pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : Json();
  if (pre.is_object() && pre.value("type", "") == "Metaspace") {
    if (layout.has_value() || pre.value("replacement", "") != kSpaceMark) {
      return unsupported("pre_tokenizer", pre);
    }
    SentencePieceLayout m;
    m.prefix_unless_leading_space = true;
    const std::string scheme =
        pre.value("prepend_scheme", pre.value("add_prefix_space", true) ? "always" : "never");
    if (scheme == "always") m.prefix = SpacePrefix::kEverySegment;
    else if (scheme == "first") m.prefix = SpacePrefix::kFirstSegment;
    else if (scheme == "never") m.prefix = SpacePrefix::kNone;
    else return unsupported("pre_tokenizer", pre);
    m.split = pre.value("split", true);
    layout = m;
  } else if (layout.has_value() && !pre.is_null()) {
    return unsupported("pre_tokenizer", pre);
  }
  if (!layout.has_value()) return layout;
  const Json decoder = j.contains("decoder") ? j["decoder"] : Json();
  for (const Json* e : Stages(decoder, "decoders")) {
    const std::string type = e->is_object() ? e->value("type", "") : "";
    const bool space_back = type == "Replace" && (*e).contains("pattern") && (*e)["pattern"].is_object() &&
                            (*e)["pattern"].value("String", "") == kSpaceMark && e->value("content", "") == " ";
    if (!space_back && type != "ByteFallback" && type != "Fuse" && type != "Strip" && type != "Metaspace") {
      return unsupported("decoder", decoder);
    }
  }
  return layout;
}

}  // namespace

absl::StatusOr<std::string> HfPreTokenizerName(std::string_view pre_tokenizer_json) {
  const Json j = Json::parse(pre_tokenizer_json.begin(), pre_tokenizer_json.end(), nullptr,
                             /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("pre_tokenizer is not JSON");
  try {
    return PreTokenizerName(j, "tokenizer.json");
  } catch (const Json::exception& e) {  // a field of an unexpected JSON type (see below)
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: pre_tokenizer: ", e.what()));
  }
}

namespace {

absl::StatusOr<std::unique_ptr<Tokenizer>> BuildHfTokenizer(const HfTokenizerFiles& files) {
  const std::string where = absl::StrCat(files.where, "/tokenizer.json");
  if (files.tokenizer_json.empty()) {
    return absl::NotFoundError(absl::StrCat(where, " is missing"));
  }
  const Json j = Json::parse(files.tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": not a JSON object"));
  }
  ASSIGN_OR_RETURN(const Json tok_config,
                   ParseOptional(files.tokenizer_config_json, files.where, "tokenizer_config.json"));
  ASSIGN_OR_RETURN(const Json gen_config, ParseOptional(files.generation_config_json, files.where,
                                                        "generation_config.json"));
  ASSIGN_OR_RETURN(const Json model_config,
                   ParseOptional(files.config_json, files.where, "config.json"));

  if (!j.contains("model") || !j["model"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": no \"model\" object"));
  }
  const Json& m = j["model"];
  if (m.value("type", "BPE") != "BPE") {
    return absl::UnimplementedError(absl::StrCat(where, ": model.type '", m.value("type", ""),
                                                 "' (only byte-level BPE)"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty()) {
      return absl::UnimplementedError(absl::StrCat(where, ": model.", key, " is not supported"));
    }
  }
  ASSIGN_OR_RETURN(const std::optional<SentencePieceLayout> sentencepiece,
                   SentencePieceLayoutOf(j, where));
  if (!sentencepiece.has_value() && j.contains("normalizer") && !j["normalizer"].is_null()) {
    const Json& n = j["normalizer"];
    const std::string type = n.is_object() ? n.value("type", "") : "";
    const bool empty_sequence = type == "Sequence" && n.contains("normalizers") &&
                                n["normalizers"].is_array() && n["normalizers"].empty();
    if (type != "NFC" && !empty_sequence) {
      return absl::UnimplementedError(
          absl::StrCat(where, ": normalizer ", n.dump(), " is not supported (none or NFC)"));
    }
  }
  if (!sentencepiece.has_value() && j.contains("decoder") && !j["decoder"].is_null() &&
      j["decoder"].value("type", "") != "ByteLevel") {
    return absl::UnimplementedError(
        absl::StrCat(where, ": decoder ", j["decoder"].dump(), " is not byte-level"));
  }

  BpeVocab vocab;
  if (sentencepiece.has_value()) {
    vocab.symbols = BpeSymbols::kSentencePiece;
    vocab.space_prefix = sentencepiece->prefix;
    vocab.prefix_unless_leading_space = sentencepiece->prefix_unless_leading_space;
    vocab.split_at_spaces = sentencepiece->split;
  } else {
    ASSIGN_OR_RETURN(vocab.pre_tokenizer,
                     PreTokenizerName(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : Json(),
                                      where));
  }
  vocab.ignore_merges = m.value("ignore_merges", false);
  vocab.named_end_of_generation_special_only = true;

  // Vocabulary: model.vocab entries, then added_tokens on top.
  if (!m.contains("vocab") || !m["vocab"].is_object() || m["vocab"].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": model.vocab is missing or empty"));
  }
  int64_t max_id = -1;
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() >= kMaxTokenId) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": model.vocab[\"", it.key(),
                                                     "\"] = ", it.value().dump(),
                                                     " is not a token id"));
    }
    max_id = std::max(max_id, it.value().get<int64_t>());
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const Json& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
          !a.contains("content") || !a["content"].is_string() || a["id"].get<int64_t>() < 0 ||
          a["id"].get<int64_t>() >= kMaxTokenId) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": added_tokens entry ", a.dump(), " needs id and content"));
      }
      vocab.added.push_back({a["content"].get<std::string>(),
                             static_cast<TokenId>(a["id"].get<int64_t>()),
                             a.value("special", false)});
      max_id = std::max<int64_t>(max_id, vocab.added.back().id);
    }
  }
  const int32_t n = static_cast<int32_t>(max_id + 1);
  vocab.texts.assign(n, "");
  vocab.kinds.assign(n, TokenKind::kAbsent);
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    if (vocab.kinds[id] != TokenKind::kAbsent) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": token id ", id, " appears twice in model.vocab"));
    }
    // SentencePiece vocabularies hold their byte-fallback pieces "<0xNN>" in model.vocab.
    const bool byte_piece = sentencepiece.has_value() && ByteTokenValue(it.key()) >= 0;
    vocab.kinds[id] = byte_piece ? TokenKind::kByte : TokenKind::kNormal;
    vocab.texts[id] = it.key();
  }
  std::vector<bool> overridden(n, false);  // [vocab] an earlier added token took the id
  for (const AddedToken& a : vocab.added) {
    if (vocab.kinds[a.id] == TokenKind::kNormal && !overridden[a.id] &&
        vocab.texts[a.id] != a.content) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": added token '", a.content,
                                                     "' reuses id ", a.id, " of another token"));
    }
    overridden[a.id] = true;
  }
  // Tokenizer::Find before the tokenizer exists (model.vocab first, then the last added
  // token with that content); a handful of lookups at load, so a scan.
  auto find = [&](std::string_view text) -> TokenId {
    for (int32_t id = 0; id < n; ++id) {
      if (vocab.kinds[id] == TokenKind::kNormal && vocab.texts[id] == text) return id;
    }
    for (auto it = vocab.added.rbegin(); it != vocab.added.rend(); ++it) {
      if (it->content == text) return it->id;
    }
    return -1;
  };

  // Merges: "a b" strings or ["a", "b"] pairs.
  if (m.contains("merges") && m["merges"].is_array()) {
    vocab.merges.reserve(m["merges"].size());
    for (const Json& e : m["merges"]) {
      if (e.is_string()) {
        vocab.merges.push_back(e.get<std::string>());
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        vocab.merges.push_back(absl::StrCat(e[0].get<std::string>(), " ",
                                            e[1].get<std::string>()));
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": merge ", e.dump(), " is neither \"a b\" nor [\"a\", \"b\"]"));
      }
    }
  }
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    vocab.unknown = find(m["unk_token"].get<std::string>());
  }

  // Special ids.
  auto resolve = [&](const std::string& text, const char* key) -> absl::StatusOr<TokenId> {
    const TokenId id = find(text);
    if (id < 0) {
      return absl::InvalidArgumentError(absl::StrCat(files.where, "/tokenizer_config.json: ",
                                                     key, " '", text, "' is not a token"));
    }
    return id;
  };
  auto check_id = [&](int64_t id, const char* what) -> absl::StatusOr<TokenId> {
    if (id < 0 || id >= n) {
      return absl::InvalidArgumentError(absl::StrCat(files.where, ": ", what, " ", id,
                                                     " is outside the vocabulary [0, ", n, ")"));
    }
    return static_cast<TokenId>(id);
  };
  std::vector<int64_t> bos_ids, eos_ids;
  TokenIds(gen_config, "bos_token_id", &bos_ids);
  TokenIds(model_config, "bos_token_id", &bos_ids);
  TokenIds(gen_config, "eos_token_id", &eos_ids);
  TokenIds(model_config, "eos_token_id", &eos_ids);
  const std::string bos_text = tok_config.is_object() && tok_config.contains("bos_token")
                                   ? TokenText(tok_config["bos_token"]) : "";
  const std::string eos_text = tok_config.is_object() && tok_config.contains("eos_token")
                                   ? TokenText(tok_config["eos_token"]) : "";
  if (!bos_text.empty()) {
    ASSIGN_OR_RETURN(vocab.bos, resolve(bos_text, "bos_token"));
  } else if (!bos_ids.empty()) {
    ASSIGN_OR_RETURN(vocab.bos, check_id(bos_ids[0], "bos_token_id"));
  }
  if (!eos_text.empty()) {
    ASSIGN_OR_RETURN(vocab.eos, resolve(eos_text, "eos_token"));
  } else if (!eos_ids.empty()) {
    ASSIGN_OR_RETURN(vocab.eos, check_id(eos_ids[0], "eos_token_id"));
  }
  for (int64_t id : eos_ids) {
    ASSIGN_OR_RETURN(TokenId checked, check_id(id, "eos_token_id"));
    vocab.extra_end_of_generation.push_back(checked);
  }

  // add_bos: explicit flag, else a post_processor whose single-sequence template starts
  // with the BOS token.
  if (tok_config.is_object() && tok_config.contains("add_bos_token") &&
      tok_config["add_bos_token"].is_boolean()) {
    vocab.add_bos = tok_config["add_bos_token"].get<bool>();
  } else if (vocab.bos >= 0 && j.contains("post_processor") && j["post_processor"].is_object()) {
    const std::string bos_rendered = RenderedText(vocab, vocab.bos);
    for (const Json* p : Stages(j["post_processor"], "processors")) {
      if (p->is_object() && p->value("type", "") == "TemplateProcessing" &&
          p->contains("single") && (*p)["single"].is_array() && !(*p)["single"].empty()) {
        const Json& first = (*p)["single"][0];
        if (first.is_object() && first.contains("SpecialToken") &&
            first["SpecialToken"].is_object() &&
            first["SpecialToken"].value("id", "") == bos_rendered) {
          vocab.add_bos = true;
        }
      }
    }
  }
  return MakeBpeTokenizer(std::move(vocab));
}

}  // namespace

// The readers test the shapes they rely on, but nlohmann's value(key, default) throws when the
// key holds another JSON type than the default's (found by tests/fuzz/hf_tokenizer_fuzz:
// "model": {"type": [...]}), as get<T>() does: any such field of a corrupt file ends here as an
// error naming the file, never an exception out of the loader.
absl::StatusOr<std::unique_ptr<Tokenizer>> HfTokenizerFromFiles(const HfTokenizerFiles& files) {
  try {
    return BuildHfTokenizer(files);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(files.where, ": tokenizer files: ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& folder) {
  const std::filesystem::path dir(folder);
  HfTokenizerFiles files;
  files.where = folder;
  ASSIGN_OR_RETURN(files.tokenizer_json, ReadOptional(dir / "tokenizer.json"));
  ASSIGN_OR_RETURN(files.tokenizer_config_json, ReadOptional(dir / "tokenizer_config.json"));
  ASSIGN_OR_RETURN(files.generation_config_json, ReadOptional(dir / "generation_config.json"));
  ASSIGN_OR_RETURN(files.config_json, ReadOptional(dir / "config.json"));
  return HfTokenizerFromFiles(files);
}

absl::StatusOr<std::string> ReadHfGenerationConfig(const std::string& folder) {
  return ReadOptional(std::filesystem::path(folder) / "generation_config.json");
}

absl::StatusOr<std::string> ReadHfChatTemplate(const std::string& folder) {
  const std::filesystem::path dir(folder);
  ASSIGN_OR_RETURN(std::string config_text, ReadOptional(dir / "tokenizer_config.json"));
  ASSIGN_OR_RETURN(Json config, ParseOptional(config_text, folder, "tokenizer_config.json"));
  if (config.is_object() && config.contains("chat_template")) {
    const Json& t = config["chat_template"];
    if (t.is_string()) return t.get<std::string>();
    if (t.is_array()) {
      std::string first;
      for (const Json& e : t) {
        if (!e.is_object() || !e.contains("template") || !e["template"].is_string()) continue;
        if (e.contains("name") && e["name"] == "default") return e["template"].get<std::string>();
        if (first.empty()) first = e["template"].get<std::string>();
      }
      return first;
    }
  }
  ASSIGN_OR_RETURN(std::string jinja, ReadOptional(dir / "chat_template.jinja"));
  if (!jinja.empty()) return jinja;
  ASSIGN_OR_RETURN(std::string json_text, ReadOptional(dir / "chat_template.json"));
  ASSIGN_OR_RETURN(Json j, ParseOptional(json_text, folder, "chat_template.json"));
  if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string()) {
    return j["chat_template"].get<std::string>();
  }
  return std::string();
}

}  // namespace witcert
