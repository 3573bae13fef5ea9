#include "reclaim/free_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

namespace gpureap::reclaim {

Result<FreeLock> FreeLock::acquire(const std::string& state_dir) {
  std::string path = state_dir + "/free.lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return std::unexpected(Error::from_errno("cannot open lock " + path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    std::string holder = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "unknown";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return fail(
        fmt::format("another gpureap free (pid {}) is running; wait for it to finish (lock: {})",
                    holder, path));
  }
  std::string me = fmt::format("{}\n", ::getpid());
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, me.data(), me.size(), 0);
  return FreeLock(fd);
}

FreeLock::~FreeLock() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the flock
}

}  // namespace gpureap::reclaim
