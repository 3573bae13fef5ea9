#include "proc/process_handle.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <csignal>
#include <utility>

#include "proc/proc_files.h"
#include "proc/proc_parse.h"

namespace gpureap::proc {
namespace {

// glibc < 2.36 has no wrappers; the raw syscalls work on every libc.
int sys_pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

int sys_pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

OpenFailure open_failure(OpenError kind, std::string message, int err = 0) {
  return OpenFailure{kind, std::move(message), err};
}

}  // namespace

std::string_view to_string(OpenError kind) {
  switch (kind) {
    case OpenError::gone:
      return "gone";
    case OpenError::reused:
      return "reused";
    case OpenError::no_permission:
      return "no_permission";
    case OpenError::unsupported:
      return "unsupported";
    case OpenError::other:
      return "other";
  }
  return "other";
}

Result<ProcessId> read_process_id(pid_t pid, std::string_view proc_root) {
  ReadBuffer buf;
  std::string path = fmt::format("{}/{}/stat", proc_root, pid);
  if (int err = read_file_at(AT_FDCWD, path.c_str(), buf); err != 0) {
    if (process_gone(err)) return fail(fmt::format("process {} not found", pid), ESRCH);
    return std::unexpected(Error::from_errno("cannot read " + path, err));
  }
  auto st = parse_stat(buf.view());
  if (!st) return fail(fmt::format("{}: {}", path, st.error().message));
  return ProcessId{pid, st->start_time};
}

namespace {

constexpr long kPidfsMagic = 0x50494446;  // "PIDF", include/uapi/linux/magic.h

// The inode of a pidfd when pidfds live on pidfs (unique per process), else 0
// (older kernels give every pidfd the same anonymous inode).
std::uint64_t inode_of_pidfd(int fd) {
  struct statfs fs {};
  struct stat st {};
  if (::fstatfs(fd, &fs) != 0 || fs.f_type != kPidfsMagic || ::fstat(fd, &st) != 0) return 0;
  return st.st_ino;
}

}  // namespace

std::uint64_t pidfs_inode(pid_t pid) {
  int fd = sys_pidfd_open(pid);
  if (fd < 0) return 0;
  std::uint64_t ino = inode_of_pidfd(fd);
  ::close(fd);
  return ino;
}

OpenResult ProcessHandle::open(ProcessId id, std::string_view proc_root) {
  if (id.pid <= 0) return std::unexpected(open_failure(OpenError::other, "invalid pid"));
  int fd = sys_pidfd_open(id.pid);
  if (fd < 0) {
    int err = errno;
    std::string what = fmt::format("pidfd_open({})", id.pid);
    switch (err) {
      case ESRCH:
        return std::unexpected(
            open_failure(OpenError::gone, fmt::format("process {} has exited", id.pid), err));
      case EPERM:
      case EACCES:
        return std::unexpected(
            open_failure(OpenError::no_permission, Error::from_errno(what, err).message, err));
      case ENOSYS:
        return std::unexpected(
            open_failure(OpenError::unsupported,
                         "pidfd_open is not supported by this kernel (needs Linux 5.3)", err));
      default:
        return std::unexpected(
            open_failure(OpenError::other, Error::from_errno(what, err).message, err));
    }
  }
  ProcessHandle handle(id, fd);

  // The exact test, where the kernel offers it: the pidfs inode seen at discovery.
  if (id.pidfs_ino != 0) {
    std::uint64_t ino = inode_of_pidfd(fd);
    if (ino != 0 && ino != id.pidfs_ino)
      return std::unexpected(open_failure(
          OpenError::reused, fmt::format("pid {} was reused (a different process since discovery)", id.pid)));
  }

  // pidfd_open does not promise that the pid still names the process we
  // discovered (pidfd_open(2) NOTES: only for our own unreaped children). The
  // process we saw existed before the pidfd was opened; if /proc shows the same
  // start time afterwards, it lived throughout, so the pidfd is for it.
  auto now = read_process_id(id.pid, proc_root);
  if (!now) {
    if (now.error().sys_errno == ESRCH)
      return std::unexpected(open_failure(OpenError::gone, now.error().message, ESRCH));
    return std::unexpected(
        open_failure(OpenError::other, now.error().message, now.error().sys_errno));
  }
  if (now->start_time != id.start_time)
    return std::unexpected(open_failure(
        OpenError::reused, fmt::format("pid {} was reused (start time {} instead of {})", id.pid,
                                       now->start_time, id.start_time)));
  return handle;
}

ProcessHandle::ProcessHandle(ProcessHandle&& other) noexcept
    : id_(other.id_), fd_(std::exchange(other.fd_, -1)) {}

ProcessHandle& ProcessHandle::operator=(ProcessHandle&& other) noexcept {
  if (this != &other) {
    close();
    id_ = other.id_;
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

ProcessHandle::~ProcessHandle() {
  close();
}

void ProcessHandle::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<void> ProcessHandle::signal(int sig) const {
  if (fd_ < 0) return fail("process handle is empty");
  if (sys_pidfd_send_signal(fd_, sig) == 0) return {};
  if (errno == ESRCH) return fail(fmt::format("process {} exited", id_.pid), ESRCH);
  return std::unexpected(Error::from_errno(fmt::format("signal {} to process {}", sig, id_.pid)));
}

bool ProcessHandle::has_exited() const {
  if (fd_ < 0) return true;
  pollfd p{fd_, POLLIN, 0};
  int n;
  do n = ::poll(&p, 1, 0);
  while (n < 0 && errno == EINTR);
  return n > 0;
}

std::vector<std::size_t> wait_for_exit(std::span<ProcessHandle* const> handles,
                                       std::chrono::steady_clock::time_point deadline) {
  using namespace std::chrono;
  std::vector<bool> exited(handles.size(), false);
  std::vector<pollfd> fds;
  std::vector<std::size_t> index;  // fds[i] belongs to handles[index[i]]
  for (;;) {
    fds.clear();
    index.clear();
    for (std::size_t i = 0; i < handles.size(); ++i) {
      if (exited[i]) continue;
      if (handles[i] == nullptr || handles[i]->fd() < 0) {
        exited[i] = true;
        continue;
      }
      fds.push_back(pollfd{handles[i]->fd(), POLLIN, 0});
      index.push_back(i);
    }
    if (fds.empty()) return {};
    auto left = deadline - steady_clock::now();
    // Round up so that we never wake a hair before the deadline and spin.
    int timeout_ms =
        left <= nanoseconds::zero() ? 0 : static_cast<int>(ceil<milliseconds>(left).count());
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) break;  // cannot wait: report everyone as still alive
    for (std::size_t k = 0; k < fds.size(); ++k)
      if (fds[k].revents != 0) exited[index[k]] = true;  // POLLIN on exit; POLLERR/HUP too
    if (n == 0 && steady_clock::now() >= deadline) break;
  }
  std::vector<std::size_t> alive;
  for (std::size_t i = 0; i < handles.size(); ++i)
    if (!exited[i]) alive.push_back(i);
  return alive;
}

}  // namespace gpureap::proc
