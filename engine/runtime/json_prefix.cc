#include "engine/runtime/json_prefix.h"

namespace witcert {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

constexpr std::string_view kLiterals[] = {"true", "false", "null"};

}  // namespace

bool JsonPrefix::Feed(char c) {
  JsonPrefix next = *this;
  if (!next.FeedOne(c)) return false;
  *this = next;
  return true;
}

bool JsonPrefix::Feed(std::string_view bytes) {
  JsonPrefix next = *this;
  for (char c : bytes) {
    if (!next.FeedOne(c)) return false;
  }
  *this = next;
  return true;
}

bool JsonPrefix::StartValue(char c) {
  switch (c) {
    case '{':
    case '[':
      if (depth_ == kMaxDepth) return false;
      stack_[depth_++] = c;
      mode_ = c == '{' ? Mode::kKeyOrClose : Mode::kValueOrClose;
      return true;
    case '"':
      mode_ = Mode::kString;
      key_ = false;
      return true;
    case '-':
      mode_ = Mode::kNumber;
      number_ = NumberState::kMinus;
      return true;
    case 't':
    case 'f':
    case 'n':
      mode_ = Mode::kLiteral;
      literal_ = c == 't' ? 0 : c == 'f' ? 1 : 2;
      count_ = 1;
      return true;
    default:
      if (!IsDigit(c)) return false;
      mode_ = Mode::kNumber;
      number_ = c == '0' ? NumberState::kZero : NumberState::kInt;
      return true;
  }
}

bool JsonPrefix::AfterValue() {
  mode_ = depth_ == 0 ? Mode::kDone : Mode::kCommaOrClose;
  return true;
}

bool JsonPrefix::CloseContainer(char c) {
  if (depth_ == 0 || stack_[depth_ - 1] != (c == '}' ? '{' : '[')) return false;
  --depth_;
  return AfterValue();
}

bool JsonPrefix::NumberMayEnd() const {
  return number_ == NumberState::kZero || number_ == NumberState::kInt ||
         number_ == NumberState::kFrac || number_ == NumberState::kExpInt;
}

bool JsonPrefix::FeedOne(char c) {
  switch (mode_) {
    case Mode::kStart:
      if (IsSpace(c)) return true;
      if (c != '{') return false;  // json_object: the document is an object
      return StartValue(c);
    case Mode::kKeyOrClose:
      if (IsSpace(c)) return true;
      if (c == '}') return CloseContainer(c);
      [[fallthrough]];
    case Mode::kKey:
      if (IsSpace(c)) return true;
      if (c != '"') return false;
      mode_ = Mode::kString;
      key_ = true;
      return true;
    case Mode::kColon:
      if (IsSpace(c)) return true;
      if (c != ':') return false;
      mode_ = Mode::kValue;
      return true;
    case Mode::kValueOrClose:
      if (IsSpace(c)) return true;
      if (c == ']') return CloseContainer(c);
      return StartValue(c);
    case Mode::kValue:
      if (IsSpace(c)) return true;
      return StartValue(c);
    case Mode::kCommaOrClose:
      if (IsSpace(c)) return true;
      if (c == ',') {
        mode_ = stack_[depth_ - 1] == '{' ? Mode::kKey : Mode::kValue;
        return true;
      }
      if (c == '}' || c == ']') return CloseContainer(c);
      return false;
    case Mode::kString:
      if (c == '"') {
        if (key_) {
          mode_ = Mode::kColon;
          return true;
        }
        return AfterValue();
      }
      if (c == '\\') {
        mode_ = Mode::kEscape;
        return true;
      }
      return static_cast<unsigned char>(c) >= 0x20;
    case Mode::kEscape:
      if (c == 'u') {
        mode_ = Mode::kUnicode;
        count_ = 0;
        return true;
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
          c == 't') {
        mode_ = Mode::kString;
        return true;
      }
      return false;
    case Mode::kUnicode:
      if (!IsHex(c)) return false;
      if (++count_ == 4) mode_ = Mode::kString;
      return true;
    case Mode::kNumber:
      switch (number_) {
        case NumberState::kMinus:
          if (!IsDigit(c)) return false;
          number_ = c == '0' ? NumberState::kZero : NumberState::kInt;
          return true;
        case NumberState::kZero:
        case NumberState::kInt:
        case NumberState::kFrac:
          if (IsDigit(c) && number_ != NumberState::kZero) return true;
          if (c == '.' && number_ != NumberState::kFrac) {
            number_ = NumberState::kDot;
            return true;
          }
          if (c == 'e' || c == 'E') {
            number_ = NumberState::kExp;
            return true;
          }
          break;  // the number ends before c
        case NumberState::kDot:
          if (!IsDigit(c)) return false;
          number_ = NumberState::kFrac;
          return true;
        case NumberState::kExp:
          if (c == '+' || c == '-') {
            number_ = NumberState::kExpSign;
            return true;
          }
          [[fallthrough]];
        case NumberState::kExpSign:
          if (!IsDigit(c)) return false;
          number_ = NumberState::kExpInt;
          return true;
        case NumberState::kExpInt:
          if (IsDigit(c)) return true;
          break;
      }
      if (!NumberMayEnd()) return false;
      AfterValue();  // numbers sit inside containers: kCommaOrClose, which takes c
      return FeedOne(c);
    case Mode::kLiteral: {
      const std::string_view word = kLiterals[literal_];
      if (c != word[count_]) return false;
      if (++count_ == word.size()) return AfterValue();
      return true;
    }
    case Mode::kDone:
      return IsSpace(c);
  }
  return false;
}

std::string JsonPrefix::Key() const {
  // Fields a mode does not read are left out, so that a state inside a string matches every
  // other one at the same nesting whatever value came before.
  const bool in_string = mode_ == Mode::kString || mode_ == Mode::kEscape || mode_ == Mode::kUnicode;
  std::string key = {static_cast<char>(mode_),
                     static_cast<char>(mode_ == Mode::kNumber ? static_cast<int>(number_) : 0),
                     static_cast<char>(in_string && key_ ? 1 : 0),
                     static_cast<char>(mode_ == Mode::kLiteral ? literal_ : 0),
                     static_cast<char>(mode_ == Mode::kLiteral || mode_ == Mode::kUnicode ? count_ : 0),
                     static_cast<char>(depth_)};
  key.append(stack_.data(), depth_);
  return key;
}

void JsonTokenMask::Allowed(const JsonPrefix& state, std::vector<uint8_t>* allowed) const {
  if (state.Complete()) {
    *allowed = tokens_.end_flags();
    return;
  }
  const std::string key = state.Key();
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ++hits_;
      *allowed = it->second;
      return;
    }
  }
  const int32_t vocab = tokens_.vocab_size();
  allowed->assign(static_cast<size_t>(vocab), 0);
  for (int32_t id = 0; id < vocab; ++id) {
    const std::string& bytes = tokens_.bytes(id);
    if (bytes.empty() || tokens_.is_end(id)) continue;
    JsonPrefix next = state;
    (*allowed)[id] = next.Feed(bytes) ? 1 : 0;
  }
  absl::MutexLock lock(&mu_);
  if (cache_.size() >= kCacheEntries) cache_.clear();
  cache_.emplace(key, *allowed);
}

int64_t JsonTokenMask::cache_hits() const {
  absl::MutexLock lock(&mu_);
  return hits_;
}

void JsonTokenMask::Advance(int32_t token, JsonPrefix* state) const {
  if (token >= 0 && token < tokens_.vocab_size()) state->Feed(tokens_.bytes(token));
}

}  // namespace witcert
