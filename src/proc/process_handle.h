#pragma once
// A process as a (pid, pidfd) value, re-verified against its start time after
// the pidfd is opened (the systemd pidref pattern). Signals go through the
// pidfd, so a pid reused by an unrelated process is never hit.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <expected>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proc/holder.h"
#include "util/result.h"

namespace gpureap::proc {

/// Why ProcessHandle::open failed.
enum class OpenError {
  gone,           // no such process (exited and reaped): ESRCH / ENOENT
  reused,         // the pid now belongs to another process (start time differs)
  no_permission,  // EPERM / EACCES
  unsupported,    // no pidfd_open in this kernel (< 5.3): ENOSYS
  other,          // anything else (EMFILE, unreadable stat, ...)
};

std::string_view to_string(OpenError kind);

/// A failed open: the kind to branch on and a message for the user. Converts
/// to Error, so `return std::unexpected(failure)` works in a Result function.
struct OpenFailure {
  OpenError kind = OpenError::other;
  std::string message;
  int sys_errno = 0;
  operator Error() const { return Error{message, sys_errno}; }  // NOLINT: implicit on purpose
};

/// The pidfs inode of a process (see ProcessId::pidfs_ino), read through a
/// short-lived pidfd; 0 when the kernel has no pidfs or the process is gone.
std::uint64_t pidfs_inode(pid_t pid);

class ProcessHandle;
using OpenResult = std::expected<ProcessHandle, OpenFailure>;

/// Owns a pidfd for one process identity. Move-only; closes the pidfd on destruction.
class ProcessHandle {
 public:
  /// pidfd_open(id.pid), then re-reads the start time from PROC_ROOT/PID/stat:
  /// a different start time means the pid was reused (OpenError::reused). A
  /// zombie opens fine (it exits as soon as it is reaped).
  static OpenResult open(ProcessId id, std::string_view proc_root = "/proc");

  ProcessHandle(ProcessHandle&& other) noexcept;
  ProcessHandle& operator=(ProcessHandle&& other) noexcept;
  ProcessHandle(const ProcessHandle&) = delete;
  ProcessHandle& operator=(const ProcessHandle&) = delete;
  ~ProcessHandle();

  /// Sends `sig` with pidfd_send_signal. Fails with "process exited" (ESRCH) once
  /// it has exited, with EPERM when not allowed. Signal 0 checks existence.
  Result<void> signal(int sig) const;

  /// True once every thread of the process has exited (the pidfd polls readable).
  /// A zombie leader with live threads has not exited.
  bool has_exited() const;

  int fd() const { return fd_; }
  ProcessId id() const { return id_; }

 private:
  ProcessHandle(ProcessId id, int fd) : id_(id), fd_(fd) {}
  void close();

  ProcessId id_;
  int fd_ = -1;
};

/// Waits, with one poll() over all pidfds, until every process has exited or
/// `deadline` passes. Returns the indices (into `handles`) of the processes
/// still alive at the deadline, ascending; empty when all exited. Null entries
/// count as exited.
std::vector<std::size_t> wait_for_exit(std::span<ProcessHandle* const> handles,
                                       std::chrono::steady_clock::time_point deadline);

/// The identity (pid, start time) of `pid` now. Fails with ESRCH in sys_errno
/// when there is no such process.
Result<ProcessId> read_process_id(pid_t pid, std::string_view proc_root = "/proc");

}  // namespace gpureap::proc
