// Status plumbing shared by every engine component.
//
// Library code returns absl::Status / absl::StatusOr at boundaries and never aborts; these
// macros keep the early-return pattern short without hiding control flow.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define WITCERT_CONCAT_INNER(a, b) a##b
#define WITCERT_CONCAT(a, b) WITCERT_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status witcert_status_ = (expr);       \
    if (!witcert_status_.ok()) return witcert_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, Foo());` binds the value of a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(WITCERT_CONCAT(witcert_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
