// Chat template families, detected from the Jinja source rather than interpreted.
//
// Only two families exist among the models we serve, and both are a fixed concatenation, so
// a Jinja engine would add a large dependency for no behaviour. The one model-specific detail
// that the source carries is a default system prompt (SmolLM2, Qwen2): it is extracted from
// the template literal that the "no system message" branch emits.
#include "engine/tokenizer/chat_template.h"

#include <optional>

#include "absl/status/status.h"
#include "engine/tokenizer/absl_bridge.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace witcert {
namespace {

constexpr std::string_view kUnknownTemplate =
    "unknown chat template; set chat_template to chatml or llama3";

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

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::FromName(std::string_view name) {
  ChatTemplate t;
  if (name == "chatml") {
    t.kind_ = ChatTemplateKind::kChatMl;
  } else if (name == "llama3") {
    t.kind_ = ChatTemplateKind::kLlama3;
    t.bos_prefix_ = true;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown chat template \"", Av(name), "\"; supported: chatml, llama3"));
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
    } else {
      return absl::InvalidArgumentError(Av(kUnknownTemplate));
    }
  }
  auto t = FromName(name);
  if (!t.ok()) return t.status();
  if (t->kind_ == ChatTemplateKind::kChatMl) t->default_system_ = ExtractDefaultSystem(source);
  return t;
}

std::string_view ChatTemplate::name() const {
  return kind_ == ChatTemplateKind::kChatMl ? "chatml" : "llama3";
}

std::string ChatTemplate::Apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const {
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
  for (const ChatMessage& m : messages) {
    absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n", m.content,
                    "<|eot_id|>");
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

}  // namespace witcert
