#pragma once
// A process as a (pid, pidfd) value, re-verified against its start time after
// the pidfd is opened (the systemd pidref pattern). Signals go through the
// pidfd, so a pid reused by an unrelated process is never hit.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <expected>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proc/holder.h"
#include "util/fd.h"
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

/// Its name (util/enum_names.h).
std::string_view enum_name(OpenError kind);

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

/// How a child of ours ended, as waitid(2) reports it.
struct ChildExit {
  enum class How {
    exited,   // it called exit: `status` is its exit status
    killed,   // a signal ended it (core dump or not): `status` is the signal
    unknown,  // it was reaped by someone else (ECHILD: SIGCHLD ignored, a waitpid(-1))
  };
  How how = How::unknown;
  int status = 0;

  /// The shell's convention: the exit status, 128+N for signal N, -1 when unknown.
  int exit_code() const;
};

class ProcessHandle;
using OpenResult = std::expected<ProcessHandle, OpenFailure>;

/// Owns a pidfd for one process identity. Move-only; closes the pidfd on destruction.
class ProcessHandle {
 public:
  using Clock = std::chrono::steady_clock;

  /// pidfd_open(id.pid), then re-reads the start time from PROC_ROOT/PID/stat:
  /// a different start time means the pid was reused (OpenError::reused). A
  /// zombie opens fine (it exits as soon as it is reaped).
  static OpenResult open(ProcessId id, std::string_view proc_root);

  /// A handle for `pid`, a child of this process not yet reaped: until we reap
  /// it its pid cannot be reused, so no start-time check is needed (id().start_time
  /// is 0). Never fails: where the kernel has no pidfd_open (< 5.3) the handle
  /// works through the pid (signal with kill(2), reap with waitid(P_PID)), and
  /// wait_exit() falls back to short polls of waitid(WNOWAIT).
  static ProcessHandle open_child(pid_t pid);

  /// An empty handle (also what a moved-from handle becomes): it signals
  /// nothing, has_exited() is true, reap() returns ChildExit::How::unknown.
  ProcessHandle() = default;
  ProcessHandle(ProcessHandle&& other) noexcept;
  ProcessHandle& operator=(ProcessHandle&& other) noexcept;
  ProcessHandle(const ProcessHandle&) = delete;
  ProcessHandle& operator=(const ProcessHandle&) = delete;
  ~ProcessHandle() = default;

  /// Sends `sig` with pidfd_send_signal. Fails with "process exited" (ESRCH) once
  /// it has exited, with EPERM when not allowed. Signal 0 checks existence.
  /// A reaped child is never signalled (its pid may name another process by now).
  Result<void> signal(int sig) const;

  /// True once every thread of the process has exited (the pidfd polls readable).
  /// A zombie leader with live threads has not exited.
  bool has_exited() const;

  /// Waits until the process has exited (the pidfd polls readable) or `deadline`
  /// passes; returns whether it has exited. Does not reap.
  bool wait_exit(Clock::time_point deadline) const;

  /// Reaps the child (open_child only), waiting for it to exit: waitid(P_PIDFD)
  /// (P_PID before Linux 5.4). Once reaped, later calls return the same ending.
  ChildExit reap();

  /// Reaps the child if it has exited, never blocking; nullopt while it runs
  /// (a child stuck in D state cannot be reaped).
  std::optional<ChildExit> try_reap();

  /// How the process (any process, not only a child) ended, as the kernel says: the
  /// pidfd's exit information (PIDFD_GET_INFO with PIDFD_INFO_EXIT, Linux >= 6.15, once
  /// it was reaped), else a zombie's stat line (exit_code, field 52, readable where we
  /// may read its memory; `proc_root`). nullopt while it runs or when neither says:
  /// the manner is unknown, never "exited 0".
  std::optional<ChildExit> exit_manner(std::string_view proc_root) const;

  int fd() const { return fd_.get(); }
  ProcessId id() const { return id_; }

 private:
  ProcessHandle(ProcessId id, UniqueFd fd, bool child)
      : id_(id), fd_(std::move(fd)), child_(child) {}
  std::optional<ChildExit> wait_child(bool block);

  ProcessId id_;
  UniqueFd fd_;
  bool child_ = false;              // open_child: ours to reap
  std::optional<ChildExit> ended_;  // set once reaped
};

/// Waits, with one poll() over all pidfds, until every process has exited or
/// `deadline` passes (an interrupted poll resumes with the time left). Returns
/// the indices (into `handles`) of the processes still alive at the deadline,
/// ascending; empty when all exited. Null handles and handles without a pidfd
/// count as exited; so does a pidfd poll() reports as invalid. If poll() itself fails, every
/// process not yet seen exiting is reported alive. Does not reap.
std::vector<std::size_t> wait_for_exit(std::span<ProcessHandle* const> handles,
                                       std::chrono::steady_clock::time_point deadline);

/// The identity (pid, start time) of `pid` now. Fails with ESRCH in sys_errno
/// when there is no such process.
Result<ProcessId> read_process_id(pid_t pid, std::string_view proc_root);

}  // namespace gpureap::proc
