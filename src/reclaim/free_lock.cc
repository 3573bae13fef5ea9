#include "reclaim/free_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "util/poll.h"

namespace gpureap::reclaim {

namespace {

// Who holds the lock, from the pid it wrote.
std::string holder_of(int fd) {
  char buf[32] = {};
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string holder = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "unknown";
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  return holder;
}

// Blocks until `fd`'s flock is free or `wait_until`; true when taken.
bool wait_for_flock(int fd, std::chrono::steady_clock::time_point wait_until) {
  using namespace std::chrono;
  // Watch the file we hold open (through /proc/self/fd, so a path replaced meanwhile
  // cannot redirect the watch): the holder's close is the event. Armed before the
  // next try, so a release between the try and the poll is not missed.
  UniqueFd events(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (events.get() >= 0) {
    std::string self = fmt::format("/proc/self/fd/{}", fd);
    if (::inotify_add_watch(events.get(), self.c_str(), IN_CLOSE_WRITE | IN_CLOSE_NOWRITE) < 0)
      events = UniqueFd();
  }
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK && errno != EINTR) return false;
    auto now = steady_clock::now();
    if (now >= wait_until) return false;
    auto slice = std::min(wait_until, now + milliseconds(250));
    if (events.get() >= 0) {
      if (poll_until(events.get(), POLLIN, slice) & POLLIN) {
        char drain[4096];
        while (::read(events.get(), drain, sizeof drain) > 0) {
        }
      }
    } else {
      std::this_thread::sleep_until(slice);  // no inotify (limit reached): the retry alone
    }
  }
}

}  // namespace

Result<FreeLock> FreeLock::acquire(const std::string& state_dir, std::string_view file,
                                   std::string_view who, std::string_view advice,
                                   std::chrono::steady_clock::time_point wait_until) {
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
    const std::string holder = holder_of(fd);
    const auto started = std::chrono::steady_clock::now();
    if (!wait_for_flock(fd, wait_until)) {
      if (started >= wait_until)
        return fail(
            fmt::format("another {} (pid {}) is running; {} (lock: {})", who, holder, advice, path),
            EWOULDBLOCK);
      double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      return fail(fmt::format("another {} (pid {}) was still running after waiting {:.1f} s for "
                              "it (lock: {})",
                              who, holder_of(fd), waited, path),
                  EWOULDBLOCK);
    }
  }
  std::string me = fmt::format("{}\n", ::getpid());
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, me.data(), me.size(), 0);
  return FreeLock(std::move(lock));
}

}  // namespace gpureap::reclaim
