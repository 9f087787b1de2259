// Status helpers. Abseil 20220623 has no status macros, so these are ours.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#define TANDEM_CONCAT_INNER(a, b) a##b
#define TANDEM_CONCAT(a, b) TANDEM_CONCAT_INNER(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define TANDEM_RETURN_IF_ERROR(expr)                  \
  do {                                                \
    ::absl::Status tandem_status_ = (expr);           \
    if (!tandem_status_.ok()) return tandem_status_;  \
  } while (0)

// `lhs = value of expr` when expr (an absl::StatusOr) holds a value; otherwise returns its status.
#define TANDEM_ASSIGN_OR_RETURN(lhs, expr) \
  TANDEM_ASSIGN_OR_RETURN_IMPL(TANDEM_CONCAT(tandem_statusor_, __LINE__), lhs, expr)
#define TANDEM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()

// Invariants: a broken one is a bug in tandem, not bad input, so it aborts with a location.
#define TANDEM_CHECK(cond)                                                            \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "internal error: %s:%d: check failed: %s\n", __FILE__,     \
                   __LINE__, #cond);                                                  \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

namespace tandem {

// Debian's Abseil 20220623 has its own absl::string_view, distinct from std::string_view, and absl::StrCat does
// not take the latter. Cat() is StrCat that accepts both.
namespace internal {
template <typename T>
decltype(auto) AbslArg(const T& x) {
  if constexpr (std::is_convertible_v<const T&, std::string_view> &&
                !std::is_convertible_v<const T&, absl::string_view>) {
    const std::string_view sv(x);
    return absl::string_view(sv.data(), sv.size());
  } else {
    return (x);
  }
}
}  // namespace internal
template <typename... Args>
std::string Cat(const Args&... args) {
  return absl::StrCat(internal::AbslArg(args)...);
}
inline std::string Message(const absl::Status& s) { return std::string(s.message()); }

// Shorthands for the common error kinds; each takes absl::StrCat-style pieces.
template <typename... Args>
absl::Status InvalidArgument(const Args&... args) {
  return absl::InvalidArgumentError(Cat(args...));
}
template <typename... Args>
absl::Status DataLoss(const Args&... args) {
  return absl::DataLossError(Cat(args...));
}
template <typename... Args>
absl::Status Unimplemented(const Args&... args) {
  return absl::UnimplementedError(Cat(args...));
}
template <typename... Args>
absl::Status ResourceExhausted(const Args&... args) {
  return absl::ResourceExhaustedError(Cat(args...));
}
template <typename... Args>
absl::Status FailedPrecondition(const Args&... args) {
  return absl::FailedPreconditionError(Cat(args...));
}

}  // namespace tandem
