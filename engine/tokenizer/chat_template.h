// Chat templates: renders OpenAI-style messages into the prompt text a model was trained on.
//
// Jinja is not interpreted; the known template families are implemented directly and picked
// by inspecting tokenizer.chat_template (or by name from config as an explicit override).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/gguf.h"

namespace witcert {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant" (others passed through)
  std::string content;
};

// A request's message role as the templates take it: "system", "user" or "assistant", with
// OpenAI's "developer" read as "system". Every front end accepts these only; InvalidArgument
// ("unsupported role '…' (system, developer, user, assistant)") otherwise.
absl::StatusOr<std::string> ChatRole(std::string_view role);

enum class ChatTemplateKind {
  kChatMl,     // <|im_start|>role\n...<|im_end|>\n  (SmolLM2, Qwen2)
  kLlama3,     // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  kLlama2,     // <s>[INST] <<SYS>>\n...\n<</SYS>>\n\nuser [/INST] assistant </s>
  kMistral,    // <s>[INST] user [/INST]assistant</s>  (Mistral 7B v0.1 / v0.2, Mixtral)
  kMistralV3,  // <s>[INST] user[/INST] assistant</s>  (Mistral 7B v0.3)
  kMistralTekken,  // <s>[INST]user[/INST]assistant</s>  (Mistral Nemo, Ministral: tekken)
};

class ChatTemplate {
 public:
  // Picks the family from the GGUF's tokenizer.chat_template; `override_name` ("chatml",
  // "llama3", "llama2", "mistral", "mistral-v3", "mistral-tekken"), when non-empty, wins. Unknown template
  // without override → InvalidArgument.
  static absl::StatusOr<ChatTemplate> FromGguf(const GgufFile& gguf,
                                               std::string_view override_name = "");
  // The same detection over Jinja source from anywhere (a Hugging Face folder's
  // tokenizer_config.json "chat_template"); "" means the model ships no template.
  static absl::StatusOr<ChatTemplate> FromTemplateText(std::string_view source,
                                                       std::string_view override_name = "");
  static absl::StatusOr<ChatTemplate> FromName(std::string_view name);

  // Renders `messages`; with `add_generation_prompt` it ends with the assistant header.
  // Model-specific defaults are honoured (SmolLM2 inserts its default system prompt when
  // the first message is not a system message; Qwen2 likewise with its own; Llama 3.1+ always
  // opens with its system block of cutoff and date, and Llama 3 trims every message). The [INST]
  // families take system messages the way their published templates do: Llama 2 inside
  // <<SYS>> in the first user turn; Mistral v3 and tekken before the last user message (then
  // "\n\n");
  // Mistral v1, whose template refuses them, before the first user message likewise.
  // Messages of other roles are rendered as user turns there.
  std::string Apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  // The conversation rendered so that the model continues its last message, which must be the
  // assistant's (vLLM's continue_final_message: a reply prefilled by the caller): the rendering
  // without a generation prompt, cut right after that message's text, before its end marker.
  // InvalidArgument when the last message is not a non-empty assistant message.
  absl::StatusOr<std::string> ApplyContinuing(const std::vector<ChatMessage>& messages) const;

  ChatTemplateKind kind() const { return kind_; }
  std::string_view name() const;
  // Default system prompt inserted when the conversation has none ("" for none).
  const std::string& default_system_prompt() const { return default_system_; }
  // Llama 3.1+: the system block every prompt starts with ("Cutting Knowledge Date: …\nToday
  // Date: …\n\n", then the system message); "" for templates without one (Llama 3.0).
  const std::string& knowledge_cutoff() const { return knowledge_cutoff_; }

 private:
  ChatTemplateKind kind_ = ChatTemplateKind::kChatMl;
  std::string default_system_;
  bool bos_prefix_ = false;  // Llama 3 starts with <|begin_of_text|>
  // Llama 3.1+'s system preamble: the cutoff date text, and "Today Date" as the template's fixed
  // date_string (3.1, 3.3) or, when it calls strftime_now (3.2), the date at rendering.
  std::string knowledge_cutoff_;
  bool reply_space_ = false;  // tekken templates that put " " before the assistant's reply
  std::string fixed_date_;
  bool date_is_today_ = false;
};

}  // namespace witcert
