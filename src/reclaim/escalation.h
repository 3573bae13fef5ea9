#pragma once
// Signalling a set of processes safely and without sleeps: every target is
// identified by (pid, start time) and signalled only through a pidfd opened and
// re-verified after discovery, so a reused pid is never hit. SIGTERM (+SIGCONT)
// to all at once, wait on the pidfds until they exit or the grace period ends,
// SIGKILL the rest (through cgroup.kill only when a cgroup's whole subtree holds
// nothing but live targets, verified while frozen), wait again.

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "proc/holder.h"

namespace gpureap::reclaim {

using Clock = std::chrono::steady_clock;

/// What happened to one target.
struct Action {
  proc::ProcessId id;
  std::string comm;
  std::string signal;  // "SIGTERM", "SIGKILL", "cgroup.kill", "none"
  std::string via;     // "pidfd", "cgroup.kill <path>", "" when not sent
  double sent_at = 0;  // seconds since the engine started
  std::optional<double> exited_at;
  std::string result;  // "exited", "still running", "pid reused: not signalled",
                       // "already gone", "permission denied", ...
};

struct EscalationOptions {
  std::chrono::milliseconds grace{5000};      // SIGTERM -> SIGKILL
  std::chrono::milliseconds kill_wait{5000};  // SIGKILL -> give up waiting for exit
  bool use_cgroup_kill = true;                // freeze + cgroup.kill when a whole cgroup is ours
  std::string proc_root = "/proc";
  const std::atomic<bool>* interrupted = nullptr;  // Ctrl-C: stop waiting, report
};

struct EscalationResult {
  std::vector<Action> actions;             // one per signal sent (or skip)
  std::vector<proc::ProcessId> survivors;  // still running after SIGKILL + kill_wait
  std::vector<std::string> notes;          // e.g. why cgroup.kill was not used for a cgroup
  bool interrupted = false;
};

/// Terminates `targets`. `t0` is the time actions are measured from.
EscalationResult terminate(const std::vector<proc::ProcessId>& targets,
                           const EscalationOptions& options, Clock::time_point t0);

}  // namespace gpureap::reclaim
