// Chat templates: family detection, default system prompt extraction, rendering. Expected
// prompts are written out by hand from each family's format.
#include "engine/tokenizer/chat_template.h"

#include <gtest/gtest.h>

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
}

TEST(ChatTemplateTest, UnknownTemplateNeedsOverride) {
  for (const char* source : {"{{ messages }}", static_cast<const char*>(nullptr)}) {
    auto t = FromTemplate(source);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(t.status().message(), "unknown chat template; set chat_template to chatml or llama3");
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
