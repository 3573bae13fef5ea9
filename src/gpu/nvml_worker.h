#pragma once
// The NVML worker: a child process that loads NVML and answers queries over a
// socket, so that a driver call stuck in the kernel (even in D state) stalls
// the child and never gpureap. NvmlSource (nvml_source.h) drives it.
//
// Protocol (frames of nvml_wire.h). The worker speaks first:
//   {"ready": true, "driver_version": "580.65.06"}
//   {"ready": false, "state": "library_missing" | "init_failed", "problem": "..."}, then exits
// then answers each request in turn:
//   {"op": "snapshot"}                 -> {"gpus": [...], "problems": [...]} | {"error": "..."}
//   {"op": "memory", "indices": [..]}  -> {"readings": [...]} | {"error": "..."}
//   {"op": "shutdown"}                 -> {"ok": true}, after nvmlShutdown; then exits
// EOF on its socket makes the worker exit at once.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

#include "proc/process_handle.h"
#include "util/fd.h"
#include "util/result.h"

namespace gpureap::gpu {

/// The worker's process name (comm): how a scan tells gpureap's own NVML helpers.
inline constexpr const char* kWorkerComm = "gpureap-nvml";

/// Parent-side handle of one worker process: its socket and its pidfd. Move-only.
/// Destroying it closes both without waiting; the owner decides how to end the
/// worker (kill, reap) first.
class NvmlWorker {
 public:
  /// Forks a worker that loads `library_path`. The socket returned by fd() is
  /// non-blocking. Fork happens without exec: call it while no other thread of
  /// gpureap holds a lock the child would need (malloc, the dynamic loader).
  static Result<NvmlWorker> spawn(const std::string& library_path);

  NvmlWorker(NvmlWorker&& other) noexcept = default;
  NvmlWorker& operator=(NvmlWorker&& other) noexcept = default;
  NvmlWorker(const NvmlWorker&) = delete;
  NvmlWorker& operator=(const NvmlWorker&) = delete;
  ~NvmlWorker() = default;

  int fd() const { return socket_.get(); }
  pid_t pid() const { return child_.id().pid; }
  bool reaped() const { return ending_.has_value(); }

  /// Closes the socket: an idle worker sees EOF and exits.
  void close_channel();

  /// SIGKILL, through the pidfd when there is one (proc::ProcessHandle::open_child).
  void kill();

  /// Reaps the worker if it has exited, never blocking (a worker stuck in D
  /// state cannot be reaped). Returns how it ended ("exited with status 1",
  /// "was killed by signal 9 (Killed)") once reaped, nullopt while it lives.
  std::optional<std::string> try_reap();

  /// Waits until the worker exits, at most `limit` (poll on the pidfd), then
  /// reaps it with WNOHANG. Returns how it ended, or nullopt if still alive.
  std::optional<std::string> wait_exit(std::chrono::milliseconds limit);

 private:
  NvmlWorker(proc::ProcessHandle child, UniqueFd socket)
      : child_(std::move(child)), socket_(std::move(socket)) {}

  proc::ProcessHandle child_;
  UniqueFd socket_;
  std::optional<std::string> ending_;  // how it ended, once reaped
};

}  // namespace gpureap::gpu
