#pragma once
// Signalling a set of processes safely and without sleeps: every target is
// identified by (pid, start time) and signalled only through a handle opened and
// re-verified after discovery (ProcessControl: a pidfd on a real node), so a
// reused pid is never hit. SIGTERM (+SIGCONT) to all at once, wait for the exits
// until they happen or the grace period ends, SIGKILL the rest (through
// cgroup.kill only when a cgroup's whole subtree holds nothing but live targets,
// verified while frozen), wait again.

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "proc/holder.h"
#include "reclaim/plan.h"
#include "reclaim/process_control.h"
#include "util/clock.h"

namespace gpureap::reclaim {

/// `free --grace`'s default: SIGTERM -> SIGKILL.
inline constexpr std::chrono::milliseconds kDefaultGrace{5000};
/// After SIGKILL, how long to wait for a process to exit before giving up on it (free's
/// escalation and run's teardown alike).
inline constexpr std::chrono::milliseconds kDefaultKillWait{5000};
/// Rounds of signals before holders that keep appearing are left to the report.
inline constexpr int kDefaultMaxRounds = 5;

/// The signal of an action.
enum class Signal { none, sigterm, sigkill };
/// Its number (SIGTERM, SIGKILL; 0 for none).
int signal_number(Signal s);
/// Its word: "SIGTERM", "SIGKILL" (util/signal_name.h names signals), "none".
std::string signal_word(Signal s);

/// What happened to a target after an action (report/names.h words it).
enum class Outcome {
  pending,                    // not known yet (never left in a finished result)
  exited,                     // exited after this signal
  exiting,                    // dying (every thread in its exit) with what it held back:
                              // not waited for further
  still_running,              // alive when the engine stopped waiting
  still_running_after_grace,  // a later signal followed
  already_exited,             // the signal found it exited
  signal_failed,              // detail says why
  already_gone,               // not signalled: exited before its handle was opened
  pid_reused,                 // not signalled: the pid belongs to another process now
  permission_denied,          // not signalled
  no_pidfd_support,           // not signalled: kernel < 5.3
  not_signalled,              // not signalled: detail says why
};

/// What happened to one target.
struct Action {
  proc::ProcessId id;
  std::string comm;
  Signal signal = Signal::none;
  std::string via;     // "pidfd", "cgroup.kill <path>", "" when not sent
  double sent_at = 0;  // seconds since the engine started
  std::optional<double> exited_at;
  Outcome outcome = Outcome::pending;
  std::string detail;  // for signal_failed and not_signalled: the reason
  std::optional<double> exiting_at;  // Outcome::exiting: when the wait for its exit ended
};

struct EscalationOptions {
  std::chrono::milliseconds grace = kDefaultGrace;  // SIGTERM -> SIGKILL; 0: SIGKILL at once
  std::chrono::milliseconds kill_wait = kDefaultKillWait;        // SIGKILL -> give up waiting for exit
  bool use_cgroup_kill = true;  // freeze + cgroup.kill when a whole cgroup is ours
};

struct EscalationResult {
  std::vector<Action> actions;             // one per signal sent (or skip)
  std::vector<proc::ProcessId> survivors;  // still running after SIGKILL + kill_wait
  std::vector<std::string> notes;          // e.g. why cgroup.kill was not used for a cgroup
  bool interrupted = false;
  /// The Outcome::exiting targets' handles: their exits, not waited for here, are the
  /// caller's to wait for before it is done.
  std::vector<ProcessPtr> exiting;
};

/// Where terminate() reads time and processes, and what stops its waits.
struct EscalationEnv {
  ProcessControl& control;
  util::Clock& clock;
  const std::atomic<bool>* interrupted = nullptr;  // Ctrl-C: stop waiting, report
  util::Clock::time_point t0;                      // actions are measured from here
  /// Optional. Asked, at most every 5 ms while exits are awaited, once every target still
  /// alive is dying by the kernel's word (ControlledProcess::exiting): whether what they
  /// held is back already (free: their GPUs read at or below their thresholds). Yes ends
  /// the wait: they are Outcome::exiting, no survivors, and no SIGKILL follows.
  std::function<bool()> released{};
};

/// Terminates `targets` (a plan's, with their comm as planned).
EscalationResult terminate(std::span<const Target> targets, const EscalationOptions& options,
                           const EscalationEnv& env);

/// For run's teardown: targets known by identity (and the GPUs they held, where
/// known); a comm left empty is read from `proc_root`. The system clock, no interrupt.
EscalationResult terminate(std::vector<Target> targets, const EscalationOptions& options,
                           std::chrono::steady_clock::time_point t0, ProcessControl& control,
                           const std::string& proc_root);

}  // namespace gpureap::reclaim
