#pragma once
// One `gpureap run`, start to finish, as a list of steps:
//   contain  -> the run cgroup (or subreaper mode, with the reason)
//   launch   -> reaper + CMD (launcher.h)
//   supervise-> forward signals, sample which GPUs the run holds
//   teardown -> every process of the run: SIGTERM, grace, SIGKILL (teardown.h)
//   verify   -> wait until the GPUs the run held are back at baseline
// The result says what happened; the CLI prints it (library code never prints,
// except through the `log` callback the CLI passes for --verbose).

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_source.h"
#include "reclaim/audit.h"
#include "reclaim/leftovers.h"
#include "reclaim/release_wait.h"
#include "supervise/launcher.h"
#include "supervise/free_wait.h"
#include "supervise/run_gpus.h"
#include "supervise/teardown.h"

namespace gpureap::supervise {

struct RunSettings {
  std::vector<std::string> argv;           // CMD and its arguments
  std::string name;                        // run name; default: basename of argv[0]
  bool use_cgroup = true;                  // false: subreaper mode even where a cgroup is possible
  std::chrono::milliseconds grace = kDefaultTeardownGrace;  // SIGTERM -> SIGKILL; 0: SIGKILL at once
  std::chrono::milliseconds kill_wait = reclaim::kDefaultKillWait;         // SIGKILL -> give up on a process
  std::chrono::milliseconds release_timeout = kDefaultWaitTimeout;  // teardown -> GPUs at baseline
  /// Called once CMD runs (its run id and pid), before the supervision: `run --replace`'s
  /// "launched" line. Not called when the launch fails.
  std::function<void(const std::string& run_id, pid_t cmd_pid)> on_launch;
};

enum class Containment { cgroup, subreaper };

struct RunOutcome {
  std::string run_id;
  Containment mode = Containment::subreaper;
  std::string cgroup_path;                      // cgroup mode: as /proc/PID/cgroup shows it
  std::string no_cgroup_reason;                 // subreaper mode: why there is no cgroup
  std::optional<LaunchFailure> launch_failure;  // CMD never ran
  pid_t cmd_pid = 0;
  std::optional<int> cmd_wait_status;
  std::optional<int> stop_signal;  // SIGTERM/SIGINT that told gpureap to stop
  bool reaper_lost = false;        // someone killed the reaper: the run's status is unknown
  TeardownReport teardown;
  /// The GPUs the run held (RunGpuWatch::held()) as the release wait left them; set
  /// when there was something to verify.
  std::optional<reclaim::ReleaseResult> release;
  std::vector<reclaim::Leftover> leftovers;       // GPUs still held after the teardown
  std::string source_problem;                       // NVML could not be used to verify
  std::vector<std::string> warnings;              // device nodes ignored, baselines refused
  double seconds = 0;                             // start to return
  double stop_to_return_seconds = 0;  // from the end of CMD (or the stop signal) to return

  /// Why the release could not be measured (NVML failed or hung, or a GPU the
  /// run held cannot be read); empty when it was measured or nothing needed it.
  std::string unverified;

  /// True when the release was measured and could not be: "not measured" is
  /// never "released".
  bool memory_unverified() const {
    if (!unverified.empty()) return true;
    return release && std::any_of(release->gpus.begin(), release->gpus.end(),
                                  [](const reclaim::GpuRelease& g) { return !g.problem.empty(); });
  }
  /// True when every GPU the run held was measured back at its baseline (or
  /// the run held none, as far as NVML could tell).
  bool memory_released() const {
    return !memory_unverified() && (!release || release->all_freed);
  }
};

/// Progress lines for --verbose (no trailing newline).
using RunLog = std::function<void(std::string_view)>;

/// Runs CMD under gpureap's supervision until it ends or gpureap is told to
/// stop, tears the run down and verifies the release. Blocks SIGINT, SIGTERM,
/// SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH in this process for good. Each
/// signal of the teardown, and its verdict, is recorded in `audit` (actor run-teardown;
/// the signals forwarded to CMD while it runs are someone else's, relayed, and are not).
RunOutcome supervise_run(const RunSettings& settings, inventory::Node& node, const RunLog& log,
                         reclaim::AuditSink& audit);

}  // namespace gpureap::supervise
