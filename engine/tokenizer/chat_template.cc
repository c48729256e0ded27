// Chat template families, detected from the Jinja source rather than interpreted.
//
// The families among the models we serve are each a fixed concatenation, so a Jinja engine
// would add a large dependency for no behaviour. The one model-specific detail
// that the source carries is a default system prompt (SmolLM2, Qwen2): it is extracted from
// the template literal that the "no system message" branch emits.
#include "engine/tokenizer/chat_template.h"

#include <algorithm>
#include <ctime>
#include <optional>

#include "absl/status/status.h"
#include "engine/tokenizer/absl_bridge.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace witcert {

absl::StatusOr<std::string> ChatRole(std::string_view role) {
  if (role == "developer") return std::string("system");
  if (role == "system" || role == "user" || role == "assistant") return std::string(role);
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported role '", std::string(role), "' (system, developer, user, assistant)"));
}
namespace {

constexpr std::string_view kUnknownTemplate =
    "unknown chat template; set chat_template to chatml, llama3, llama2, mistral, mistral-v3 or "
    "mistral-tekken";

// Undoes the escapes a Jinja string literal may use.
std::string UnescapeJinjaLiteral(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out.push_back(s[i]);
      continue;
    }
    const char c = s[++i];
    switch (c) {
      case 'n': out.push_back('\n'); break;
      case 't': out.push_back('\t'); break;
      case 'r': out.push_back('\r'); break;
      default: out.push_back(c); break;  // \' \" \\ and anything else: the character
    }
  }
  return out;
}

// The default system prompt a ChatML template inserts when the conversation has no system
// message: a string literal '<|im_start|>system\n<TEXT><|im_end|>' (newline written either
// literally or as \n) whose TEXT is constant (no quote, so not an expression), in a template
// that tests the role of messages[0].
std::string ExtractDefaultSystem(std::string_view source) {
  if (!absl::StrContains(Av(source), "messages[0]['role']") &&
      !absl::StrContains(Av(source), "messages[0].role")) {
    return "";
  }
  for (std::string_view head : {"<|im_start|>system\n", "<|im_start|>system\\n"}) {
    size_t pos = 0;
    while ((pos = source.find(head, pos)) != std::string_view::npos) {
      pos += head.size();
      const size_t end = source.find("<|im_end|>", pos);
      if (end == std::string_view::npos) break;
      const std::string_view text = source.substr(pos, end - pos);
      if (!text.empty() && text.find_first_of("'\"") == std::string_view::npos) {
        return UnescapeJinjaLiteral(text);
      }
    }
  }
  return "";
}

// The text of a Jinja string literal starting at `pos`, up to the first newline written either
// literally or as \n, or the literal's closing quote.
std::string LiteralLineAt(std::string_view source, size_t pos) {
  std::string_view rest = source.substr(pos);
  size_t end = rest.size();
  for (std::string_view stop : {"\\n", "\n", "\"", "'"}) end = std::min(end, rest.find(stop));
  return UnescapeJinjaLiteral(rest.substr(0, end));
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::FromName(std::string_view name) {
  ChatTemplate t;
  if (name == "chatml") {
    t.kind_ = ChatTemplateKind::kChatMl;
  } else if (name == "llama3") {
    t.kind_ = ChatTemplateKind::kLlama3;
    t.bos_prefix_ = true;
  } else if (name == "llama2") {
    t.kind_ = ChatTemplateKind::kLlama2;
  } else if (name == "mistral") {
    t.kind_ = ChatTemplateKind::kMistral;
  } else if (name == "mistral-v3") {
    t.kind_ = ChatTemplateKind::kMistralV3;
  } else if (name == "mistral-tekken") {
    t.kind_ = ChatTemplateKind::kMistralTekken;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown chat template \"", Av(name),
                                                   "\"; supported: chatml, llama3, llama2, mistral, "
                                                   "mistral-v3, mistral-tekken"));
  }
  return t;
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromGguf(const GgufFile& gguf,
                                                    std::string_view override_name) {
  std::string_view source;
  if (gguf.Find("tokenizer.chat_template") != nullptr) {
    auto s = gguf.GetString("tokenizer.chat_template");
    if (!s.ok()) return s.status();
    source = *s;
  }
  return FromTemplateText(source, override_name);
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromTemplateText(std::string_view source,
                                                            std::string_view override_name) {
  std::string_view name = override_name;
  if (name.empty()) {
    if (absl::StrContains(Av(source), "<|im_start|>")) {
      name = "chatml";
    } else if (absl::StrContains(Av(source), "<|start_header_id|>")) {
      name = "llama3";
    } else if (absl::StrContains(Av(source), "[INST]") && absl::StrContains(Av(source), "<<SYS>>")) {
      name = "llama2";
    } else if (absl::StrContains(Av(source), "[INST]")) {
      // tekken opens the turn without a space ("[INST]" + content); v1 closes it with one
      // ('... + ' [/INST]'); v3 has neither ("[INST] " + content + "[/INST]").
      const auto has = [&](std::string_view s) { return absl::StrContains(Av(source), Av(s)); };
      if (has("\"[INST]\" +") || has("'[INST]' +")) {
        name = "mistral-tekken";
      } else {
        name = has("' [/INST]'") || has("\" [/INST]\"") ? "mistral" : "mistral-v3";
      }
    } else {
      return absl::InvalidArgumentError(Av(kUnknownTemplate));
    }
  }
  auto t = FromName(name);
  if (!t.ok()) return t.status();
  t->reply_space_ = absl::StrContains(Av(source), "\" \" + message[\"content\"]") ||
                    absl::StrContains(Av(source), "' ' + message['content']");
  if (t->kind_ == ChatTemplateKind::kChatMl) t->default_system_ = ExtractDefaultSystem(source);
  constexpr std::string_view kCutoff = "Cutting Knowledge Date: ";
  if (const size_t at = source.find(kCutoff); t->kind_ == ChatTemplateKind::kLlama3 && at != std::string_view::npos) {
    t->knowledge_cutoff_ = LiteralLineAt(source, at + kCutoff.size());
    t->date_is_today_ = absl::StrContains(Av(source), "strftime_now");
    t->fixed_date_ = "26 Jul 2024";  // the templates' own fallback
    for (std::string_view set : {"set date_string = \"", "set date_string = '"}) {
      if (const size_t d = source.find(set); d != std::string_view::npos) {
        t->fixed_date_ = LiteralLineAt(source, d + set.size());
      }
    }
  }
  return t;
}

std::string_view ChatTemplate::name() const {
  switch (kind_) {
    case ChatTemplateKind::kChatMl: return "chatml";
    case ChatTemplateKind::kLlama3: return "llama3";
    case ChatTemplateKind::kLlama2: return "llama2";
    case ChatTemplateKind::kMistral: return "mistral";
    case ChatTemplateKind::kMistralV3: return "mistral-v3";
    case ChatTemplateKind::kMistralTekken: return "mistral-tekken";
  }
  return "chatml";
}

namespace {

// Jinja's trim (Python's strip() on the ASCII spaces).
absl::string_view Trimmed(std::string_view s) { return absl::StripAsciiWhitespace(Av(s)); }

// The [INST] families: system messages folded into a user turn, then user / assistant turns.
std::string ApplyInstFamily(ChatTemplateKind kind, bool reply_space, const std::vector<ChatMessage>& messages) {
  std::string system;
  std::vector<const ChatMessage*> turns;  // non-system messages, in order
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      absl::StrAppend(&system, system.empty() ? "" : "\n\n", m.content);
    } else {
      turns.push_back(&m);
    }
  }
  size_t system_turn = turns.size();  // the user turn that carries the system text
  for (size_t i = 0; i < turns.size(); ++i) {
    if (turns[i]->role == "assistant") continue;
    if (kind == ChatTemplateKind::kMistralV3 || kind == ChatTemplateKind::kMistralTekken ||
        system_turn == turns.size()) {
      system_turn = i;
    }
  }
  std::string out;
  if (kind != ChatTemplateKind::kLlama2) out = "<s>";
  for (size_t i = 0; i < turns.size(); ++i) {
    const ChatMessage& m = *turns[i];
    if (m.role == "assistant") {
      if (kind == ChatTemplateKind::kLlama2) absl::StrAppend(&out, " ", Trimmed(m.content), " </s>");
      else if (kind == ChatTemplateKind::kMistral) absl::StrAppend(&out, m.content, "</s>");
      else if (kind == ChatTemplateKind::kMistralTekken && reply_space)
        absl::StrAppend(&out, " ", Trimmed(m.content), "</s>");
      else if (kind == ChatTemplateKind::kMistralTekken) absl::StrAppend(&out, m.content, "</s>");
      else absl::StrAppend(&out, " ", m.content, "</s>");
      continue;
    }
    std::string content = m.content;
    if (i == system_turn && !system.empty()) {
      content = kind == ChatTemplateKind::kLlama2  // stripped as a whole, as the template does
                    ? std::string(Trimmed(absl::StrCat("<<SYS>>\n", system, "\n<</SYS>>\n\n", m.content)))
                    : absl::StrCat(system, "\n\n", m.content);
    } else if (kind == ChatTemplateKind::kLlama2) {
      content = std::string(Trimmed(m.content));
    }
    switch (kind) {
      case ChatTemplateKind::kLlama2: absl::StrAppend(&out, "<s>[INST] ", content, " [/INST]"); break;
      case ChatTemplateKind::kMistral: absl::StrAppend(&out, "[INST] ", content, " [/INST]"); break;
      case ChatTemplateKind::kMistralTekken: absl::StrAppend(&out, "[INST]", content, "[/INST]"); break;
      default: absl::StrAppend(&out, "[INST] ", content, "[/INST]"); break;
    }
  }
  return out;
}

}  // namespace

std::string ChatTemplate::Apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const {
  if (kind_ == ChatTemplateKind::kLlama2 || kind_ == ChatTemplateKind::kMistral ||
      kind_ == ChatTemplateKind::kMistralV3 || kind_ == ChatTemplateKind::kMistralTekken) {
    return ApplyInstFamily(kind_, reply_space_, messages);  // a user turn already ends where the reply begins
  }
  std::string out;
  if (kind_ == ChatTemplateKind::kChatMl) {
    const auto append = [&out](std::string_view role, std::string_view content) {
      absl::StrAppend(&out, "<|im_start|>", Av(role), "\n", Av(content), "<|im_end|>\n");
    };
    if (!messages.empty() && messages[0].role != "system" && !default_system_.empty()) {
      append("system", default_system_);
    }
    for (const ChatMessage& m : messages) append(m.role, m.content);
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
  }
  if (bos_prefix_) out += "<|begin_of_text|>";
  size_t first = 0;
  if (!knowledge_cutoff_.empty()) {  // Llama 3.1+: the system block is always there
    std::string date = fixed_date_;
    if (date_is_today_) {
      const std::time_t now = std::time(nullptr);
      std::tm utc{};
      gmtime_r(&now, &utc);
      char buf[32];
      date = std::strftime(buf, sizeof(buf), "%d %b %Y", &utc) > 0 ? buf : fixed_date_;
    }
    const bool has_system = !messages.empty() && messages[0].role == "system";
    absl::StrAppend(&out, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: ",
                    knowledge_cutoff_, "\nToday Date: ", date, "\n\n",
                    has_system ? Trimmed(messages[0].content) : absl::string_view(), "<|eot_id|>");
    first = has_system ? 1 : 0;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n", Trimmed(m.content),
                    "<|eot_id|>");
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

absl::StatusOr<std::string> ChatTemplate::ApplyContinuing(const std::vector<ChatMessage>& messages) const {
  const absl::string_view trimmed = messages.empty() ? absl::string_view() : Trimmed(messages.back().content);
  if (messages.empty() || messages.back().role != "assistant" || trimmed.empty()) {
    return absl::InvalidArgumentError(
        "continuing the final message needs the conversation to end with a non-empty assistant message");
  }
  const std::string rendered = Apply(messages, /*add_generation_prompt=*/false);
  // The families render the reply as given or trimmed; either way it is the last occurrence.
  for (absl::string_view text : {Av(messages.back().content), trimmed}) {
    const size_t at = absl::string_view(rendered).rfind(text);
    if (at != std::string::npos) return rendered.substr(0, at + text.size());
  }
  return absl::InternalError("the final message is missing from its rendering");
}

}  // namespace witcert
