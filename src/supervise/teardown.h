#pragma once
// The end of a run: every process that is still part of it gets SIGTERM, then
// SIGKILL after the grace period (reclaim::terminate: pidfd-verified, and
// freeze + cgroup.kill when the whole run cgroup is targeted). Repeated until
// no new member appears, because a member may fork while we signal; then the
// run cgroup is killed outright and waited empty, and the reaper is waited for
// until it has reaped everything. Every signal goes through the caller's
// AuditedControl, so each is recorded (actor run-teardown).

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpu/device_id.h"
#include "proc/holder.h"
#include "reclaim/audited_control.h"
#include "reclaim/escalation.h"
#include "supervise/launcher.h"
#include "supervise/run_cgroup.h"

namespace gpureap::supervise {

/// Who belongs to the run now: the members of its cgroup (and the cgroups
/// beneath it) plus every descendant of the reaper (the reaper is a subreaper,
/// so every process the run started and that is still alive is below it).
/// Never includes the reaper, this process, or a process whose identity could
/// not be read (it exited).
std::vector<proc::ProcessId> run_members(pid_t reaper, const RunCgroup* cgroup,
                                         const std::string& proc_root);

/// `run`'s teardown grace (SIGTERM -> SIGKILL) by default: a server gets longer than
/// `free`'s stray holders (reclaim's default) to flush and exit on its own.
inline constexpr std::chrono::milliseconds kDefaultTeardownGrace{10000};

/// The GPUs one member of the run used, and NVML's figure for it there (for its records).
struct MemberGpus {
  std::vector<gpu::DeviceId> gpus;
  std::uint64_t bytes = 0;
};

struct TeardownOptions {
  std::chrono::milliseconds grace = kDefaultTeardownGrace;  // SIGTERM -> SIGKILL; 0: SIGKILL at once
  std::chrono::milliseconds kill_wait = reclaim::kDefaultKillWait;  // SIGKILL -> give up on a process
  int max_rounds = reclaim::kDefaultMaxRounds;                         // members that keep appearing: bounded
  std::string proc_root;  // no default: the node's (inventory::Node::proc_root())
  std::map<proc::ProcessId, MemberGpus> member_gpus;  // RunGpuWatch::member_gpus()
};

struct TeardownReport {
  std::vector<reclaim::Action> actions;    // every signal sent, in order
  std::vector<proc::ProcessId> survivors;  // alive after SIGKILL + kill_wait
  std::size_t processes = 0;               // distinct processes signalled
  int rounds = 0;
  bool cgroup_killed = false;  // the final cgroup.kill sweep was needed
  bool empty = false;          // nothing of the run is alive any more
  double seconds = 0;
};

/// Tears the run down (see the file comment), signalling through `control`. `run` is
/// pumped for its events meanwhile, so CMD's status is known when this returns (unless
/// the reaper was lost). Bounded by grace + rounds * kill_wait.
TeardownReport tear_down(LaunchedRun& run, RunCgroup* cgroup, const TeardownOptions& options,
                         Clock::time_point t0, reclaim::AuditedControl& control);

}  // namespace gpureap::supervise
