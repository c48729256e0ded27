// The system Abseil is built with its own absl::string_view (not an alias of
// std::string_view), so std::string_view must be bridged explicitly into StrCat, StrContains
// and heterogeneous hash-map lookups.
#pragma once

#include <string_view>

#include "absl/strings/string_view.h"

namespace witcert {

inline absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace witcert
