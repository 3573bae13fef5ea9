#include "proc/process_handle.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <utility>

#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "util/poll.h"

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

// waitid(P_PIDFD, ...) (Linux 5.4); spelled out for C libraries that predate it.
constexpr auto kIdTypePidfd = static_cast<idtype_t>(3);

}  // namespace

std::string_view enum_name(OpenError kind) {
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
  return {};
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
  UniqueFd fd(sys_pidfd_open(pid));
  return fd.valid() ? inode_of_pidfd(fd.get()) : 0;
}

int ChildExit::exit_code() const {
  switch (how) {
    case How::exited:
      return status;
    case How::killed:
      return 128 + status;
    case How::unknown:
      return -1;
  }
  return -1;
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
  ProcessHandle handle(id, UniqueFd(fd), false);

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

ProcessHandle ProcessHandle::open_child(pid_t pid) {
  if (pid <= 0) return ProcessHandle();  // kill(0 or -N, ...) would hit a whole group
  // pidfd_open(2): for a child not yet reaped, the pid names it until we reap
  // it, so this pidfd is for our child; -1 only where the kernel has no pidfds.
  return ProcessHandle(ProcessId{pid, 0}, UniqueFd(sys_pidfd_open(pid)), true);
}

ProcessHandle::ProcessHandle(ProcessHandle&& other) noexcept
    : id_(std::exchange(other.id_, ProcessId{})),
      fd_(std::move(other.fd_)),
      child_(std::exchange(other.child_, false)),
      ended_(std::exchange(other.ended_, std::nullopt)) {}

ProcessHandle& ProcessHandle::operator=(ProcessHandle&& other) noexcept {
  if (this != &other) {
    id_ = std::exchange(other.id_, ProcessId{});
    fd_ = std::move(other.fd_);
    child_ = std::exchange(other.child_, false);
    ended_ = std::exchange(other.ended_, std::nullopt);
  }
  return *this;
}

Result<void> ProcessHandle::signal(int sig) const {
  if (ended_) return fail(fmt::format("process {} exited", id_.pid), ESRCH);
  if (fd_.valid()) {
    if (sys_pidfd_send_signal(fd_.get(), sig) == 0) return {};
  } else if (child_) {
    // No pidfds on this kernel: our unreaped child's pid cannot have been reused.
    if (::kill(id_.pid, sig) == 0) return {};
  } else {
    return fail("process handle is empty");
  }
  if (errno == ESRCH) return fail(fmt::format("process {} exited", id_.pid), ESRCH);
  return std::unexpected(Error::from_errno(fmt::format("signal {} to process {}", sig, id_.pid)));
}

bool ProcessHandle::has_exited() const {
  if (ended_) return true;
  if (fd_.valid()) return poll_until(fd_.get(), POLLIN, std::chrono::steady_clock::now()) != 0;
  if (!child_) return true;
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(id_.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
         info.si_pid != 0;
}

bool ProcessHandle::wait_exit(Clock::time_point deadline) const {
  // A pidfd polls readable once the process has exited.
  if (fd_.valid()) return ended_ || poll_until(fd_.get(), POLLIN, deadline) != 0;
  // Linux < 5.3: nothing to wait on for a child but SIGCHLD, which belongs to
  // the program; look again every 5 ms until the deadline.
  for (;;) {
    if (has_exited()) return true;
    int left = poll_timeout_ms(deadline);
    if (left == 0) return false;
    ::poll(nullptr, 0, std::min(left, 5));
  }
}

std::optional<ChildExit> ProcessHandle::wait_child(bool block) {
  if (ended_ || !child_) return ended_;
  const int flags = WEXITED | (block ? 0 : WNOHANG);
  bool by_pidfd = fd_.valid();
  for (;;) {
    siginfo_t info{};
    int rc = by_pidfd ? ::waitid(kIdTypePidfd, static_cast<id_t>(fd_.get()), &info, flags)
                      : ::waitid(P_PID, static_cast<id_t>(id_.pid), &info, flags);
    if (rc == 0 && info.si_pid == 0) return std::nullopt;  // still running (WNOHANG)
    if (rc != 0 && errno == EINTR) continue;
    if (rc != 0 && errno == EINVAL && by_pidfd) {
      // Linux 5.3 has pidfd_open but not waitid(P_PIDFD): the pid, still our
      // unreaped child, says the same.
      by_pidfd = false;
      continue;
    }
    if (rc == 0) {
      ended_ = ChildExit{info.si_code == CLD_EXITED ? ChildExit::How::exited : ChildExit::How::killed,
                         info.si_status};
    } else {
      ended_ = ChildExit{};  // ECHILD: someone else reaped it
    }
    return ended_;
  }
}

ChildExit ProcessHandle::reap() {
  return wait_child(true).value_or(ChildExit{});
}

std::optional<ChildExit> ProcessHandle::try_reap() {
  return wait_child(false);
}

std::vector<std::size_t> wait_for_exit(std::span<ProcessHandle* const> handles,
                                       std::chrono::steady_clock::time_point deadline) {
  using std::chrono::steady_clock;
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
    int n = ::poll(fds.data(), fds.size(), poll_timeout_ms(deadline));
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

namespace gpureap::proc {

namespace {

// PIDFD_GET_INFO (linux/pidfd.h, Linux 6.13; exit information 6.15), spelled here: the
// build's kernel headers may predate it. The ABI is versioned by size: the first 64
// bytes hold the exit code at offset 60.
struct PidfdInfo {
  std::uint64_t mask;
  std::uint64_t cgroupid;
  std::uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
  std::int32_t exit_code;
};
static_assert(sizeof(PidfdInfo) == 64);
constexpr std::uint64_t kPidfdInfoExit = 1U << 3;
constexpr unsigned long kPidfdGetInfo = _IOWR(0xFF, 11, PidfdInfo);

ChildExit from_wait_status(int status) {
  if (WIFSIGNALED(status)) return {ChildExit::How::killed, WTERMSIG(status)};
  return {ChildExit::How::exited, WEXITSTATUS(status)};
}

}  // namespace

std::optional<ChildExit> ProcessHandle::exit_manner(std::string_view proc_root) const {
  if (!fd_.valid() || !has_exited()) return std::nullopt;
  PidfdInfo info{};
  info.mask = kPidfdInfoExit;
  if (::ioctl(fd_.get(), kPidfdGetInfo, &info) == 0 && (info.mask & kPidfdInfoExit))
    return from_wait_status(info.exit_code);
  // Not reaped yet (a zombie), or an older kernel: the zombie's own stat line, if it is
  // still this process (its start time) and still a zombie.
  const std::string text = read_small_file(fmt::format("{}/{}/stat", proc_root, id_.pid));
  auto stat = parse_stat(text);
  if (!stat || stat->state != 'Z' || (id_.start_time != 0 && stat->start_time != id_.start_time))
    return std::nullopt;
  // Field 52; shown as 0 to a reader not allowed to read the process's memory, so a 0
  // says nothing unless we may (root, or the same user: the stat file is ours then).
  const auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::string_view rest = std::string_view(text).substr(close + 2);
  int field = 3, code = 0;
  bool found = false;
  for (std::size_t at = 0; at < rest.size();) {
    const std::size_t end = std::min(rest.find(' ', at), rest.size());
    if (field == 52) {
      std::string word(rest.substr(at, end - at));
      code = std::atoi(word.c_str());
      found = true;
      break;
    }
    ++field;
    at = end + 1;
  }
  if (!found) return std::nullopt;
  struct stat st {};
  const bool may_read = ::geteuid() == 0 ||
                        (::stat(fmt::format("{}/{}", proc_root, id_.pid).c_str(), &st) == 0 &&
                         st.st_uid == ::geteuid());
  if (code == 0 && !may_read) return std::nullopt;
  return from_wait_status(code);
}

}  // namespace gpureap::proc
