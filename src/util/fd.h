#pragma once
// An owned file descriptor: the one way gpureap holds a descriptor beyond the
// scope that opened it (pidfds, sockets, cgroup files, /proc directories).

#include <unistd.h>

#include <cerrno>
#include <string_view>
#include <utility>

namespace gpureap {

/// An owned file descriptor; closed on destruction. Move-only. -1 means none.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  /// Gives up ownership: the caller closes the returned descriptor.
  int release() { return std::exchange(fd_, -1); }
  /// Closes the descriptor held (if any) and takes `fd`.
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

/// Writes all of `text` to `fd`, resuming after EINTR and short writes; gives up
/// at the first error (EPIPE: the reader is gone). Async-signal-safe: a forked
/// child may use it before exec.
inline void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace gpureap
