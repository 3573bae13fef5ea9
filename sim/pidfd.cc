#include "sim/pidfd.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "sim/proc_stat.h"

namespace gpureap::sim {

PidFd& PidFd::operator=(PidFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

PidFd::~PidFd() {
  if (fd_ >= 0) ::close(fd_);
}

PidFd PidFd::open_verified(pid_t pid, std::uint64_t start_time) {
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return PidFd{};
  PidFd handle(fd);
  auto st = read_proc_stat(pid);
  if (!st || st->start_time != start_time) return PidFd{};
  return handle;
}

bool PidFd::signal(int sig) const {
  return fd_ >= 0 && ::syscall(SYS_pidfd_send_signal, fd_, sig, nullptr, 0) == 0;
}

bool PidFd::wait_exit(std::chrono::milliseconds timeout) const {
  if (fd_ < 0) return true;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::max<long>(0, left.count())));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

}  // namespace gpureap::sim
