#pragma once
// Expected failures travel as values: Result<T> = std::expected<T, Error>.
// Exceptions are only used to stop a command and are caught once, in main.

#include <cerrno>
#include <cstring>
#include <expected>
#include <string>
#include <utility>

namespace gpureap {

/// What went wrong, in words a user can act on. `sys_errno` is 0 unless the
/// failure came from a system call.
struct Error {
  std::string message;
  int sys_errno = 0;

  /// An error carrying the current errno, formatted as "<what>: <strerror>".
  static Error from_errno(std::string what, int err = errno) {
    return Error{what + ": " + std::strerror(err), err};
  }
};

template <typename T>
using Result = std::expected<T, Error>;

/// Shorthand for returning a failure: `return fail("bad size '{}'")`.
inline std::unexpected<Error> fail(std::string message, int err = 0) {
  return std::unexpected(Error{std::move(message), err});
}

}  // namespace gpureap
