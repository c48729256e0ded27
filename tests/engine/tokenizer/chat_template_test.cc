// Chat templates: family detection, default system prompt extraction, rendering. Expected
// prompts are written out by hand from each family's format.
#include "engine/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <ctime>
#include <string>

#include "engine/model/gguf.h"
#include "tests/engine/model/gguf_writer.h"

namespace witcert {
namespace {

// SmolLM2-135M-Instruct's template as shipped (newlines inside the literals are real).
constexpr char kSmolLmTemplate[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

// The relevant part of Qwen2.5's template (escaped \n inside the literals).
constexpr char kQwen2Template[] = R"({%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
{%- else %}
    {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}{%- endfor %})";

constexpr char kPlainChatMl[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";

constexpr char kLlama3Template[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

absl::StatusOr<ChatTemplate> FromTemplate(const char* source, std::string_view override_name = "") {
  testing::GgufWriter w;
  if (source != nullptr) w.AddString("tokenizer.chat_template", source);
  auto gguf = GgufFile::FromBytes(w.Build());
  if (!gguf.ok()) return gguf.status();
  return ChatTemplate::FromGguf(**gguf, override_name);
}

// The roles every front end accepts; "developer" is OpenAI's newer name for "system".
TEST(ChatTemplateTest, ChatRoleAcceptsTheThreeRolesAndDeveloper) {
  for (const char* role : {"system", "user", "assistant"}) EXPECT_EQ(*ChatRole(role), role);
  EXPECT_EQ(*ChatRole("developer"), "system");
  for (const char* role : {"tool", "", "User", "system<|im_end|>"}) {
    const absl::StatusOr<std::string> r = ChatRole(role);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << role;
    EXPECT_NE(r.status().message().find("unsupported role"), std::string_view::npos);
  }
}

TEST(ChatTemplateTest, SmolLmInsertsItsDefaultSystemPrompt) {
  auto t = FromTemplate(kSmolLmTemplate);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->kind(), ChatTemplateKind::kChatMl);
  EXPECT_EQ(t->name(), "chatml");
  EXPECT_EQ(t->default_system_prompt(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(t->Apply({{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // An explicit system message replaces the default.
  EXPECT_EQ(t->Apply({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}}, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello<|im_end|>\n");
}

TEST(ChatTemplateTest, Qwen2DefaultWithEscapedNewline) {
  auto t = FromTemplate(kQwen2Template);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->default_system_prompt(),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
}

TEST(ChatTemplateTest, PlainChatMlHasNoDefault) {
  auto t = FromTemplate(kPlainChatMl);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->default_system_prompt(), "");
  EXPECT_EQ(t->Apply({{"user", "a\nb"}, {"tool", "x"}}, true),
            "<|im_start|>user\na\nb<|im_end|>\n<|im_start|>tool\nx<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Llama3) {
  auto t = FromTemplate(kLlama3Template);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->kind(), ChatTemplateKind::kLlama3);
  EXPECT_EQ(t->name(), "llama3");
  EXPECT_EQ(t->Apply({{"system", "S"}, {"user", "U"}}, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(t->Apply({{"user", "U"}}, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>");
  // `message['content'] | trim`: surrounding whitespace goes, inner whitespace stays.
  EXPECT_EQ(t->Apply({{"user", "\n  two  words \n"}}, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\ntwo  words<|eot_id|>");
  EXPECT_EQ(t->knowledge_cutoff(), "");
}

// Llama 3.1 / 3.3 (the relevant lines of their template): a system block always opens the
// prompt, with the cutoff and the template's fixed date_string, then the (trimmed) system
// message; Llama 3.2's template asks strftime_now for today's date instead.
TEST(ChatTemplateTest, Llama31SystemBlock) {
  const char* llama31 =
      "{{- bos_token }}\n{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul 2024\" %}\n"
      "{%- endif %}\n{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = "
      "messages[0]['content']|trim %}\n{%- endif %}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
      "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
      "{{- system_message }}\n{{- \"<|eot_id|>\" }}\n{%- for message in messages %}{{- '<|start_header_id|>' + "
      "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}{%- endfor %}";
  auto t = FromTemplate(llama31);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name(), "llama3");
  EXPECT_EQ(t->knowledge_cutoff(), "December 2023");
  EXPECT_EQ(t->Apply({{"user", "Hi"}}, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(t->Apply({{"system", " Be brief. "}, {"user", "Hi"}}, false),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");

  std::string llama32 = llama31;
  llama32.insert(0, "{%- if strftime_now is defined %}{%- set date_string = strftime_now(\"%d %b %Y\") %}{%- endif %}");
  auto today = FromTemplate(llama32.c_str());
  ASSERT_TRUE(today.ok());
  const auto utc_date = [] {
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    char date[32];
    return std::string(date, std::strftime(date, sizeof(date), "%d %b %Y", &utc));
  };
  const std::string before = utc_date();
  const std::string rendered = today->Apply({{"user", "Hi"}}, true);
  const std::string after = utc_date();  // the two differ only across midnight UTC
  EXPECT_TRUE(rendered.find("Today Date: " + before + "\n\n") != std::string::npos ||
              rendered.find("Today Date: " + after + "\n\n") != std::string::npos)
      << rendered;
  EXPECT_EQ(rendered.find("26 Jul 2024"), std::string::npos);
}

// The [INST] families, detected from their published templates' literals and rendered as those
// templates render (the expected strings are what each Jinja template gives for these
// messages, worked by hand from its text).
TEST(ChatTemplateTest, InstFamiliesDetectedAndRendered) {
  // Mistral 7B Instruct v0.1 / v0.2: ' [/INST]' closes a user turn; replies end with </s>.
  auto v1 = FromTemplate(
      "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
      "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
      "{{ message['content'] + eos_token}}{% endif %}{% endfor %}");
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ(v1->name(), "mistral");
  EXPECT_EQ(v1->Apply({{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}}, true),
            "<s>[INST] Hi [/INST]Hello!</s>[INST] Bye [/INST]");
  EXPECT_EQ(v1->Apply({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Yo"}, {"user", "Bye"}}, true),
            "<s>[INST] Be brief.\n\nHi [/INST]Yo</s>[INST] Bye [/INST]");
  // v0.3: "[/INST]" right after the content, a space before the reply, the system text on the
  // last user message.
  auto v3 = FromTemplate(
      "{{- bos_token }}{%- for message in loop_messages %}{%- if message[\"role\"] == \"user\" %}"
      "{%- if loop.last and system_message is defined %}"
      "{{- \"[INST] \" + system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}"
      "{%- else %}{{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}{%- endif %}"
      "{%- elif message[\"role\"] == \"assistant\" %}{{- \" \" + message[\"content\"] + eos_token}}"
      "{%- endif %}{%- endfor %}");
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_EQ(v3->name(), "mistral-v3");
  EXPECT_EQ(v3->Apply({{"system", "S"}, {"user", "A"}, {"assistant", "B"}, {"user", "C"}}, true),
            "<s>[INST] A[/INST] B</s>[INST] S\n\nC[/INST]");
  // Llama 2 chat: <<SYS>> inside the first turn, contents stripped, every turn opens with <s>.
  auto l2 = FromTemplate(
      "{% if messages[0]['role'] == 'system' %}{% set system_message = messages[0]['content'] %}"
      "{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message %}"
      "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
      "{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
      "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}");
  ASSERT_TRUE(l2.ok()) << l2.status();
  EXPECT_EQ(l2->name(), "llama2");
  EXPECT_EQ(l2->Apply({{"system", "S"}, {"user", " A "}, {"assistant", "B"}, {"user", "C"}}, true),
            "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\n A [/INST] B </s><s>[INST] C [/INST]");
  // tekken (Mistral Nemo): no spaces inside [INST]…[/INST]; the reply follows directly, or after
  // a space with its content trimmed where the template says so (Ministral).
  const std::string nemo_source =
      "{{- bos_token }}{%- for message in loop_messages %}{%- if message[\"role\"] == \"user\" %}"
      "{%- if loop.last and system_message is defined %}"
      "{{- \"[INST]\" + system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}"
      "{%- else %}{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}{%- endif %}"
      "{%- elif message[\"role\"] == \"assistant\" %}{{- message[\"content\"] + eos_token}}{%- endif %}{%- endfor %}";
  auto nemo = FromTemplate(nemo_source.c_str());
  ASSERT_TRUE(nemo.ok()) << nemo.status();
  EXPECT_EQ(nemo->name(), "mistral-tekken");
  EXPECT_EQ(nemo->Apply({{"system", "S"}, {"user", "A"}, {"assistant", " B "}, {"user", "C"}}, true),
            "<s>[INST]A[/INST] B </s>[INST]S\n\nC[/INST]");
  std::string ministral_source = nemo_source;
  const std::string plain_reply = "{{- message[\"content\"] + eos_token}}";
  ministral_source.replace(ministral_source.find(plain_reply), plain_reply.size(),
                           "{{- \" \" + message[\"content\"]|trim + eos_token}}");
  auto ministral = FromTemplate(ministral_source.c_str());
  ASSERT_TRUE(ministral.ok()) << ministral.status();
  EXPECT_EQ(ministral->name(), "mistral-tekken");
  EXPECT_EQ(ministral->Apply({{"user", "A"}, {"assistant", " B "}, {"user", "C"}}, true),
            "<s>[INST]A[/INST] B</s>[INST]C[/INST]");
  for (const char* name : {"llama2", "mistral", "mistral-v3", "mistral-tekken"}) {
    auto named = FromTemplate("{{ messages }}", name);
    ASSERT_TRUE(named.ok()) << name;
    EXPECT_EQ(named->name(), name);
  }
}

// Continuing the final assistant message: the rendering without a generation prompt, cut right
// after the message's (possibly trimmed) text.
TEST(ChatTemplateTest, ApplyContinuingLeavesTheLastReplyOpen) {
  auto chatml = FromTemplate(kPlainChatMl);
  ASSERT_TRUE(chatml.ok());
  auto c = chatml->ApplyContinuing({{"user", "Hi"}, {"assistant", "The answer is"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nThe answer is");
  auto llama3 = FromTemplate(kLlama3Template);
  ASSERT_TRUE(llama3.ok());
  auto l = llama3->ApplyContinuing({{"user", "Hi"}, {"assistant", " Sure: "}});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(*l, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\nSure:");
  auto mistral = FromTemplate("{{ messages }}", "mistral");
  ASSERT_TRUE(mistral.ok());
  auto m = mistral->ApplyContinuing({{"user", "Hi"}, {"assistant", "Well"}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, "<s>[INST] Hi [/INST]Well");
  EXPECT_FALSE(chatml->ApplyContinuing({{"user", "Hi"}}).ok());
  EXPECT_FALSE(chatml->ApplyContinuing({{"user", "Hi"}, {"assistant", " "}}).ok());
}

TEST(ChatTemplateTest, UnknownTemplateNeedsOverride) {
  for (const char* source : {"{{ messages }}", static_cast<const char*>(nullptr)}) {
    auto t = FromTemplate(source);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(t.status().message(),
              "unknown chat template; set chat_template to chatml, llama3, llama2, mistral, mistral-v3 or "
              "mistral-tekken");
  }
  auto t = FromTemplate("{{ messages }}", "llama3");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->kind(), ChatTemplateKind::kLlama3);
}

TEST(ChatTemplateTest, OverrideWinsOverDetection) {
  auto t = FromTemplate(kSmolLmTemplate, "llama3");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->kind(), ChatTemplateKind::kLlama3);
  EXPECT_EQ(t->default_system_prompt(), "");
  auto bad = FromTemplate(kSmolLmTemplate, "vicuna");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, FromName) {
  auto chatml = ChatTemplate::FromName("chatml");
  ASSERT_TRUE(chatml.ok());
  EXPECT_EQ(chatml->Apply({{"user", "Hi"}}, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(ChatTemplate::FromName("").ok());
}

}  // namespace
}  // namespace witcert
