#pragma once
// Starting CMD so that nothing it spawns can escape, and hearing about it.
//
// Process layout of `gpureap run`:
//
//   gpureap                 the front: receives signals, runs the teardown, talks to NVML
//    └─ gpureap-reaper      child subreaper (PR_SET_CHILD_SUBREAPER): every orphan of
//        │                  the run, double-forked and setsid() daemons included, is
//        │                  re-parented here and reaped; forwards signals to CMD
//        └─ CMD             own session and process group (setsid), in the run's
//                           cgroup when there is one, GPUREAP_RUN_ID in its environment
//
// Why a separate reaper process: a subreaper has to reap with waitpid(-1), which
// would also collect the front's own children (NVML runs in a watchdog child)
// and break their owners' waitpid. The reaper has no other children, so "it has
// no children left" means "no process of the run is alive". It dies with the
// front (PR_SET_PDEATHSIG), so a SIGKILLed gpureap leaves the run's processes
// orphaned and identifiable (cgroup name, GPUREAP_RUN_ID) for `free --orphans`.
//
// CMD execs only once the front has heard its pid and called LaunchSpec::before_exec
// (where the run records it) and sent a byte on the release socket, which only the
// front holds: a front that dies first leaves CMD an EOF, and CMD exits unrun.
//
// The reaper and CMD run between fork and exec without allocating: everything
// they need is prepared before the fork.

#include <signal.h>
#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "proc/process_handle.h"
#include "util/fd.h"
#include "util/result.h"

namespace gpureap::supervise {

using Clock = std::chrono::steady_clock;

/// The signals `gpureap run` passes on to CMD.
inline constexpr std::array<int, 7> kForwardedSignals = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT,
                                                         SIGUSR1, SIGUSR2, SIGWINCH};

/// Blocks kForwardedSignals in this process and receives them on a signalfd.
/// They stay blocked for the life of the process: a late SIGTERM must not cut
/// a teardown short (the caller is expected to exit when the run is over).
class ForwardedSignals {
 public:
  static Result<ForwardedSignals> block();
  ForwardedSignals(ForwardedSignals&&) noexcept = default;
  ForwardedSignals& operator=(ForwardedSignals&&) = delete;
  ForwardedSignals(const ForwardedSignals&) = delete;
  ~ForwardedSignals() = default;

  int fd() const { return fd_.get(); }
  /// The mask this process had before block(); CMD gets it back before exec.
  const sigset_t& original_mask() const { return original_; }
  /// One pending forwarded signal, nullopt when none is pending.
  std::optional<int> take();

 private:
  ForwardedSignals() = default;
  UniqueFd fd_;
  sigset_t original_{};
};

struct LaunchSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH (execvpe)
  std::vector<std::string> env;   // CMD's whole environment, "KEY=value"
  int cgroup_procs_fd = -1;       // when >= 0, CMD writes "0" here before exec
  /// Called in the front once CMD is forked, with the reaper's and CMD's pids; CMD
  /// waits for its return before it execs (and never execs if the front dies first).
  /// The run records what it started here, so nothing CMD does comes before the record
  /// that names it: a gpureap killed at any later moment leaves its command recorded.
  std::function<void(pid_t reaper, pid_t cmd)> before_exec = nullptr;
};

/// Why CMD did not start. `stage` says which step failed.
struct LaunchFailure {
  enum class Stage { setup, cgroup, exec };
  Stage stage = Stage::setup;
  int err = 0;
  std::string message;
};

/// tini's contract for a command that could not be executed: 127 when it
/// was not found, 126 when it was found but could not be executed.
int exit_code_for_exec_error(int err);

/// A wait status as an exit code: the exit status, or 128+N for signal N.
int exit_code_of(int wait_status);

struct RunEvent {
  enum class Kind {
    signal,       // one of kForwardedSignals arrived (value: its number); see forward()
    cmd_exited,   // CMD ended (value: its wait status)
    all_reaped,   // the reaper has no children left: no process of the run is alive
    reaper_lost,  // the reaper died (someone killed it): reaping and forwarding stopped
    deadline,     // nothing happened before the deadline
  };
  Kind kind = Kind::deadline;
  int value = 0;
};

/// A command started under its reaper. Move-only; the destructor ends the
/// reaper (finish()).
class LaunchedRun {
 public:
  /// Forks the reaper, which forks CMD; calls spec.before_exec, then lets CMD exec;
  /// returns once CMD has exec'd (or failed to: then the reaper is already gone).
  /// `signals` must outlive the run.
  static std::expected<LaunchedRun, LaunchFailure> start(const LaunchSpec& spec,
                                                         ForwardedSignals& signals);

  LaunchedRun(LaunchedRun&&) noexcept = default;
  LaunchedRun& operator=(LaunchedRun&& other) noexcept;
  LaunchedRun(const LaunchedRun&) = delete;
  ~LaunchedRun();

  pid_t cmd_pid() const { return cmd_pid_; }
  pid_t reaper_pid() const { return reaper_.id().pid; }

  /// Waits for the next event, up to `deadline`. A signal is returned, not
  /// passed on: the caller decides (forward() it, or start the teardown).
  RunEvent next_event(Clock::time_point deadline);

  /// Takes the reaper's reports (CMD's exit, "all reaped") until both are in,
  /// the reaper is lost, or `deadline` passes; Clock::now() takes only those
  /// already waiting. A signal that arrives meanwhile is consumed, not returned.
  void take_pending(Clock::time_point deadline);

  /// Passes `signo` on to CMD (through the reaper, which alone may signal its
  /// child by pid without a reuse race). No effect once CMD has been reaped.
  void forward(int signo);

  /// CMD's wait status, once it has exited.
  std::optional<int> cmd_status() const { return cmd_status_; }
  bool all_reaped() const { return all_reaped_; }
  bool reaper_alive() const { return !reaper_lost_; }

  /// Ends the reaper: closes the control channel (the reaper exits on EOF) and
  /// reaps it. Processes of the run still alive are re-parented above us.
  void finish();

 private:
  LaunchedRun() = default;
  void handle_message(int kind, int value, RunEvent& event);

  ForwardedSignals* signals_ = nullptr;
  proc::ProcessHandle reaper_;
  UniqueFd channel_;  // SOCK_SEQPACKET to the reaper: signals down, reports up
  pid_t cmd_pid_ = 0;
  std::optional<int> cmd_status_;
  bool all_reaped_ = false;
  bool reaper_lost_ = false;
};

}  // namespace gpureap::supervise
