#include "reclaim/free_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpureap::reclaim {

Result<FreeLock> FreeLock::acquire(const std::string& state_dir, std::string_view file,
                                   std::string_view who, std::string_view advice) {
  std::string path = fmt::format("{}/{}", state_dir, file);
  // Never through a symlink, and nothing is truncated before we know the file
  // is a regular file of our own: a planted link once made this overwrite
  // another file with our pid.
  UniqueFd lock(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600));
  const int fd = lock.get();
  if (fd < 0) {
    if (errno == ELOOP)
      return fail(
          fmt::format("lock {} is a symbolic link; refusing to follow it (remove it)", path));
    return std::unexpected(Error::from_errno("cannot open lock " + path));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) return std::unexpected(Error::from_errno("cannot stat lock " + path));
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    return fail(fmt::format("lock {} is {}; refusing to use it (remove it)", path,
                            !S_ISREG(st.st_mode)
                                ? std::string("not a regular file")
                                : fmt::format("owned by uid {}, not by you", st.st_uid)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    std::string holder = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "unknown";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return fail(
        fmt::format("another {} (pid {}) is running; {} (lock: {})", who, holder, advice, path));
  }
  std::string me = fmt::format("{}\n", ::getpid());
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, me.data(), me.size(), 0);
  return FreeLock(std::move(lock));
}

}  // namespace gpureap::reclaim
