#pragma once
// Who forked whom, and who exited how, from the kernel's process events
// (proc/proc_events.h): the agent's memory of lineages between its looks (issue 49).
//
// A server SIGKILLed 50 ms after its workers' first allocation dies before any tick
// saw those workers hold a GPU, so the agent never watched it as a holder's parent;
// the events still say that it forked them and how it ended. This table keeps that:
//  - a fork event records the child under its parent; the parent's names, group,
//    session and start time are read (/proc, at the drain: alive or a zombie) once it
//    has a living child, and again at its exec;
//  - an exit event records the manner (exit code or signal) of a process that still
//    has living children; one without is forgotten at once, and a dead one is
//    forgotten when its last child exits.
// So it keeps one small entry per process forked since the agent started listening
// that still lives, names only for processes with living children, and exits only
// while they matter; at most kMaxEntries entries (forks past it are not recorded:
// their lineage is unknown, never invented). Lost events (an overrun) clear it.
//
// It decides nothing: dead_parent_of() gives the facts as a DeadParent, and the one
// orphan rule (proc/lineage.h classify_lineage) judges them as it judges a death the
// agent's pidfd saw.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "proc/lineage.h"
#include "proc/proc_events.h"

namespace gpureap::proc {

/// What the table reads of a process while it lives (or lies a zombie): its names, its
/// process group and session, and its start time (clock ticks since boot).
struct LineageIdentity {
  std::string comm;
  std::string cmdline;  // empty for a zombie
  std::uint64_t start_time = 0;
  pid_t pgid = 0;
  pid_t sid = 0;
};
/// Reads one process's identity; nullopt when it is gone (reaped) already.
using IdentityReader = std::function<std::optional<LineageIdentity>(pid_t)>;

/// Reads /proc/PID/stat and /proc/PID/cmdline under proc_root; the command line cut at
/// EventLineage::kMaxCmdline bytes.
IdentityReader proc_identity_reader(std::string proc_root);

/// A death the events show: the process, as a holder's dead parent (was_parent), and its
/// own start time (to compare with a run's recorded supervisor).
struct LineageDeath {
  DeadParent dead;
  std::uint64_t start_time = 0;
};

class EventLineage {
 public:
  static constexpr std::size_t kMaxEntries = 1 << 16;
  static constexpr std::size_t kMaxCmdline = 1024;

  explicit EventLineage(IdentityReader read, std::size_t max_entries = kMaxEntries);

  /// Applies one drained batch, in the kernel's order. `wall_offset`: the wall clock's
  /// seconds minus CLOCK_MONOTONIC's, to date an exit (ProcEvent::at_ns). Returns the
  /// living children of processes that crashed in it (killed by a signal, or exited
  /// non-zero): the caller looks at them now, between its ticks. A batch that lost
  /// events clears the table (what it missed could be a pid's reuse).
  std::set<pid_t> apply(const ProcEventBatch& batch, double wall_offset);

  /// When the events show that the process that forked `pid` has exited while `pid`
  /// lives: what it was and how it ended. nullopt otherwise (its parent lives, or its
  /// fork was not seen).
  std::optional<LineageDeath> dead_parent_of(pid_t pid) const;

  std::size_t size() const { return live_.size() + dead_.size(); }
  /// Exited processes kept for their living children.
  std::size_t dead() const { return dead_.size(); }
  /// Forks not recorded because the table was full.
  std::uint64_t untracked() const { return untracked_; }
  /// The memory the table keeps, by its own count: entries, hash buckets and strings.
  std::size_t bytes() const;

 private:
  struct Entry {
    pid_t pid = 0;
    pid_t parent = 0;              // 0: forked before the agent listened (unknown)
    std::uint32_t parent_serial = 0;
    std::uint32_t serial = 0;      // this entry (a pid is reused; a serial is not)
    std::uint32_t live_children = 0;
    bool identity_read = false;
    ExitManner manner = ExitManner::unknown;
    int exit_value = 0;
    double died_at = 0;
    std::unique_ptr<LineageIdentity> identity;  // while it has living children
  };
  Entry* find_parent(const Entry& child);
  const Entry* find_parent(const Entry& child) const;
  void started(const ProcEvent& e);
  void execed(const ProcEvent& e);
  void exited(const ProcEvent& e, double wall_offset, std::set<pid_t>& crashed_children);
  void child_gone(const Entry& child);
  void read_pending();

  IdentityReader read_;
  std::size_t max_entries_;
  std::unordered_map<pid_t, Entry> live_;            // by pid
  std::unordered_map<std::uint32_t, Entry> dead_;    // by serial
  std::vector<std::pair<pid_t, std::uint32_t>> to_read_;  // parents whose identity is due
  std::uint32_t next_serial_ = 1;
  std::uint64_t untracked_ = 0;
};

}  // namespace gpureap::proc
