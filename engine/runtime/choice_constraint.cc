#include "engine/runtime/choice_constraint.h"

#include <algorithm>

namespace witcert {

void ChoiceAllowed(const std::vector<std::string>& choices, std::string_view output,
                   const TokenByteTable& tokens, std::vector<uint8_t>* allowed) {
  const int32_t vocab = tokens.vocab_size();
  allowed->assign(static_cast<size_t>(vocab), 0);
  // Only choices the output is a prefix of can still be reached.
  std::vector<std::string_view> rests;  // what each reachable choice has left
  for (const std::string& c : choices) {
    if (c.size() >= output.size() && c.compare(0, output.size(), output) == 0) {
      rests.push_back(std::string_view(c).substr(output.size()));
    }
  }
  const bool complete = std::find(rests.begin(), rests.end(), std::string_view()) != rests.end();
  for (int32_t id = 0; id < vocab; ++id) {
    if (tokens.is_end(id)) {
      (*allowed)[id] = complete ? 1 : 0;
      continue;
    }
    const std::string& b = tokens.bytes(id);
    if (b.empty()) continue;
    for (std::string_view rest : rests) {
      if (rest.size() >= b.size() && rest.compare(0, b.size(), b) == 0) {
        (*allowed)[id] = 1;
        break;
      }
    }
  }
}

bool ChoiceComplete(const std::vector<std::string>& choices, std::string_view output) {
  return std::find(choices.begin(), choices.end(), output) != choices.end();
}

}  // namespace witcert
