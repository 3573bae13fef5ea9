#pragma once
// Race-free signalling of a process known by (pid, start time): open a pidfd,
// re-verify the start time through /proc, signal through the pidfd.

#include <sys/types.h>

#include <chrono>
#include <cstdint>

namespace gpureap::sim {

/// An owned pidfd (-1 when empty). Move-only.
class PidFd {
 public:
  PidFd() = default;
  explicit PidFd(int fd) : fd_(fd) {}
  PidFd(PidFd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  PidFd& operator=(PidFd&& o) noexcept;
  PidFd(const PidFd&) = delete;
  PidFd& operator=(const PidFd&) = delete;
  ~PidFd();

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

  /// Opens a pidfd for `pid` and keeps it only if the process it names started at
  /// `start_time` (a pid reused after the pidfd_open is caught by the re-check).
  /// Empty when the process is gone or is another process now.
  static PidFd open_verified(pid_t pid, std::uint64_t start_time);

  /// pidfd_send_signal; false if the process has already exited.
  bool signal(int sig) const;
  /// Waits until the process has exited (pidfd readable), up to `timeout`.
  bool wait_exit(std::chrono::milliseconds timeout) const;

 private:
  int fd_ = -1;
};

}  // namespace gpureap::sim
