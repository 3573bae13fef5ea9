#pragma once
// The process-control seam of the reclaim engine (ninja's CommandRunner pattern:
// one real, one fake): open a process verified against its identity, signal it,
// see whether it has exited, wait for exits with a deadline, and SIGKILL whole
// cgroups when that is safe. SystemProcessControl is the kernel (pidfds, cgroup
// v2); FakeProcessControl (fake_process_control.h) scripts processes for the
// engine's unit tests. AuditedControl (audited_control.h) wraps either and records
// every signal that passes; the flows that signal (free_selection, tear_down) take
// only an AuditedControl.

#include <chrono>
#include <expected>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "proc/holder.h"
#include "proc/process_handle.h"
#include "reclaim/plan.h"
#include "util/clock.h"
#include "util/result.h"

namespace gpureap::reclaim {

/// One process, opened after discovery and verified against its identity:
/// every signal reaches that process or nothing.
class ControlledProcess {
 public:
  virtual ~ControlledProcess() = default;
  virtual const proc::ProcessId& id() const = 0;
  /// Sends `sig`. Fails once the process has exited, or when not allowed.
  virtual Result<void> signal(int sig) = 0;
  /// True once every thread has exited.
  virtual bool has_exited() const = 0;
  /// True when stopped by job control (state T): it cannot act on SIGTERM before SIGCONT.
  virtual bool stopped() const = 0;
  /// True when the kernel attests that it is dying: every thread inside its exit, or a
  /// zombie (proc/exiting.h). False when it cannot be told.
  virtual bool exiting() const = 0;
};

using ProcessPtr = std::unique_ptr<ControlledProcess>;

/// SIGKILL through cgroup.kill: which processes one write killed.
struct CgroupKill {
  std::string path;                  // the cgroup, as /proc/PID/cgroup names it
  std::vector<std::size_t> members;  // indices into the `live` span passed in
  Result<void> sent;
};

struct CgroupKills {
  std::vector<CgroupKill> killed;
  std::vector<std::string> notes;  // why a cgroup was left to the pidfds
};

/// SIGKILL to everything left in a cgroup gpureap made for a run (its own): how it went.
struct CgroupSweep {
  bool through_cgroup_kill = true;  // false: frozen, then SIGKILL to each member's pidfd (< 5.14)
  Result<void> sent;
};

class ProcessControl {
 public:
  virtual ~ProcessControl() = default;
  /// Opens `target.id`, verified: fails with OpenError::gone/reused/no_permission/... .
  /// `first` is true for the first open of a batch (one terminate() call). The rest of
  /// `target` (comm, user, GPUs, bytes) is what the plan knew of it, for the record.
  virtual std::expected<ProcessPtr, proc::OpenFailure> open(const Target& target,
                                                            bool first) = 0;
  /// Waits, driven by exit events, until every process of `live` has exited or
  /// `deadline` passes. Returns the indices (into `live`) still alive, ascending.
  virtual std::vector<std::size_t> wait_for_exit(std::span<ControlledProcess* const> live,
                                                 util::Clock::time_point deadline) = 0;
  /// SIGKILLs, through cgroup.kill, each cgroup of `live` whose whole subtree
  /// holds nothing but live processes of `live` (checked, then checked again
  /// while frozen); `planned` are every process opened for this batch (a member
  /// that is planned but exited is named as such). The rest are left to the caller.
  virtual CgroupKills kill_whole_cgroups(std::span<ControlledProcess* const> live,
                                         std::span<ControlledProcess* const> planned) = 0;
  /// A run's last word on its own cgroup `dir` (a filesystem path): SIGKILL to every
  /// member of it and of the cgroups beneath (proc::cgroup_kill_all). Only for a cgroup
  /// gpureap created for a run, whose members are all the run's.
  virtual CgroupSweep sweep_cgroup(const std::string& dir,
                                   std::chrono::steady_clock::time_point deadline) = 0;
};

/// PROC_ROOT/PID/comm without its newline; empty when the process is gone.
std::string read_comm(pid_t pid, const std::string& proc_root);

/// The kernel: pidfds (proc::ProcessHandle) re-verified by start time, poll() on
/// them for exits, cgroup v2 freeze + cgroup.kill.
class SystemProcessControl final : public ProcessControl {
 public:
  explicit SystemProcessControl(std::string proc_root)
      : proc_root_(std::move(proc_root)) {}
  std::expected<ProcessPtr, proc::OpenFailure> open(const Target& target, bool first) override;
  std::vector<std::size_t> wait_for_exit(std::span<ControlledProcess* const> live,
                                         util::Clock::time_point deadline) override;
  CgroupKills kill_whole_cgroups(std::span<ControlledProcess* const> live,
                                 std::span<ControlledProcess* const> planned) override;
  CgroupSweep sweep_cgroup(const std::string& dir,
                           std::chrono::steady_clock::time_point deadline) override;

 private:
  std::string proc_root_;
};

}  // namespace gpureap::reclaim
