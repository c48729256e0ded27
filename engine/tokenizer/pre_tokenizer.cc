#include "engine/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

#include "absl/status/status.h"
#include "engine/tokenizer/absl_bridge.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace witcert {
namespace {

// Patterns as published with each tokenizer (HF tokenizer.json / llama.cpp's tables).
constexpr std::string_view kDigitPattern = R"(\p{N})";
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Mistral's tekken (Mistral Nemo, Mistral Small 3): case runs split apart ("camelCase" →
// "camel", "Case"), one digit per piece, "/" kept with trailing newlines. PCRE2 takes the
// Unicode categories as published, so the pattern is used verbatim.
constexpr std::string_view kTekkenPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreTokenizerSpec {
  std::string_view name;
  std::vector<std::string_view> stages;
};

const std::vector<PreTokenizerSpec>& Specs() {
  static const auto* const specs = new std::vector<PreTokenizerSpec>{
      {"smollm", {kDigitPattern, kGpt2Pattern}},
      {"starcoder", {kDigitPattern, kGpt2Pattern}},
      {"gpt2", {kGpt2Pattern}},
      {"default", {kGpt2Pattern}},
      {"llama-bpe", {kLlama3Pattern}},
      {"qwen2", {kQwen2Pattern}},
      {"tekken", {kTekkenPattern}},
  };
  return *specs;
}

}  // namespace

// Owns one compiled pattern. Match data is created per call, so sharing is thread-safe.
class Pcre2Regex {
 public:
  static absl::StatusOr<std::unique_ptr<Pcre2Regex>> Compile(std::string_view pattern) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()),
                                     pattern.size(), PCRE2_UTF | PCRE2_UCP, &error,
                                     &error_offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return absl::InternalError(absl::StrCat("pcre2_compile failed at offset ", error_offset,
                                              ": ", reinterpret_cast<char*>(message)));
    }
    // JIT is an optimisation only: when unavailable pcre2_match interprets.
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    return std::unique_ptr<Pcre2Regex>(new Pcre2Regex(code));
  }
  ~Pcre2Regex() { pcre2_code_free(code_); }

  // Appends the pieces of `text` (valid UTF-8) to `out`.
  void Split(std::string_view text, pcre2_match_data* md,
             std::vector<std::string_view>& out) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t offset = 0;
    while (offset < text.size()) {
      int rc = pcre2_match(code_, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
        // JIT stack exhaustion on a pathological run: retry with the (heap-based) interpreter.
        rc = pcre2_match(code_, subject, text.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                         md, nullptr);
      }
      if (rc < 0) {  // no match (or a resource error): keep the rest whole
        out.push_back(text.substr(offset));
        return;
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md);
      size_t start = ovector[0];
      size_t end = ovector[1];
      if (start > offset) out.push_back(text.substr(offset, start - offset));
      if (end == start) {  // cannot happen with our patterns; consume one character
        end = start + DecodeUtf8At(text, start).length;
      }
      out.push_back(text.substr(start, end - start));
      offset = end;
    }
  }

  pcre2_code* code() const { return code_; }

 private:
  explicit Pcre2Regex(pcre2_code* code) : code_(code) {}
  pcre2_code* code_;
};

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string> PreTokenizer::SupportedNames() {
  std::vector<std::string> names;
  for (const auto& spec : Specs()) names.emplace_back(spec.name);
  return names;
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(std::string_view name) {
  for (const auto& spec : Specs()) {
    if (spec.name != name) continue;
    std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
    pre->name_ = std::string(name);
    for (std::string_view pattern : spec.stages) {
      auto regex = Pcre2Regex::Compile(pattern);
      if (!regex.ok()) return regex.status();
      pre->stages_.push_back(*std::move(regex));
    }
    return pre;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported tokenizer.ggml.pre \"", Av(name),
                   "\"; supported: ", absl::StrJoin(SupportedNames(), ", ")));
}

void PreTokenizer::SplitValid(std::string_view text, std::vector<std::string_view>& out) const {
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (const auto& stage : stages_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(stage->code(), nullptr);
    next.clear();
    for (std::string_view piece : current) stage->Split(piece, md, next);
    pcre2_match_data_free(md);
    std::swap(current, next);
  }
  out.insert(out.end(), current.begin(), current.end());
}

std::vector<std::string_view> PreTokenizer::Split(std::string_view text) const {
  std::vector<std::string_view> out;
  if (text.empty()) return out;
  if (IsValidUtf8(text)) {
    SplitValid(text, out);
    return out;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t run = CompleteUtf8Prefix(text.substr(pos));
    if (run > 0) SplitValid(text.substr(pos, run), out);
    pos += run;
    if (pos < text.size()) {  // one invalid (or truncated) byte
      out.push_back(text.substr(pos, 1));
      ++pos;
    }
  }
  return out;
}

}  // namespace witcert
