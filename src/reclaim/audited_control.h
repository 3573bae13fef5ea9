#pragma once
// The choke point of the audit trail: a ProcessControl that forwards every call to
// the one it wraps (the kernel's, or the engine tests' fake) and records every signal
// that passes through it, whatever sent it (SIGTERM, SIGCONT, SIGKILL by pidfd,
// cgroup.kill of a whole cgroup, a run's final sweep of its own cgroup), with the
// result the kernel gave. free_selection (free, the reaper, the Slurm hooks) and
// tear_down (run) take an AuditedControl, not a bare ProcessControl, so a new caller
// cannot signal without recording.

#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "reclaim/audit.h"
#include "reclaim/process_control.h"

namespace gpureap::reclaim {

class AuditedControl final : public ProcessControl {
 public:
  /// Signals through `inner`, records through `trail`; reads each target's owner,
  /// cgroup and container from `proc_root` when it is opened. All three must outlive it.
  AuditedControl(ProcessControl& inner, AuditTrail& trail, std::string proc_root)
      : inner_(inner), trail_(trail), proc_root_(std::move(proc_root)) {}

  AuditTrail& trail() { return trail_; }
  const std::string& proc_root() const { return proc_root_; }

  std::expected<ProcessPtr, proc::OpenFailure> open(const Target& target, bool first) override;
  std::vector<std::size_t> wait_for_exit(std::span<ControlledProcess* const> live,
                                         util::Clock::time_point deadline) override;
  CgroupKills kill_whole_cgroups(std::span<ControlledProcess* const> live,
                                 std::span<ControlledProcess* const> planned) override;
  /// Records one SIGKILL per member of the subtree as listed just before the kill (a
  /// process forked into it in between is killed too, and not named).
  CgroupSweep sweep_cgroup(const std::string& dir,
                           std::chrono::steady_clock::time_point deadline) override;

 private:
  ProcessControl& inner_;
  AuditTrail& trail_;
  std::string proc_root_;
};

}  // namespace gpureap::reclaim
