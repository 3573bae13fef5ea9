#pragma once
// Which processes the agent's tick looks at (agent/watcher.h): those new since the last
// tick, from the kernel's process events when this process may read them (root, the
// initial namespaces, proc_root is /proc: proc/proc_events.h), else from a listing of
// proc_root against the last one; those new at the last tick once more (a process seen
// between its fork and the open of its device node); and the living children of a
// process the events show crashed (proc/event_lineage.h). The events are drained at
// once (while a forking parent can still be read) and kept for the tick.

#include <sys/types.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "proc/event_lineage.h"
#include "proc/proc_events.h"

namespace gpureap::agent {

class NewProcessFinder {
 public:
  explicit NewProcessFinder(const std::string& proc_root);

  /// Opens the kernel's process events, once (before the first listing of /proc: a
  /// process started after it is an event); `asked` false: listing only.
  void start(bool asked, const std::string& proc_root);

  /// A tick's (or, `death_look`, a death's) candidates: new processes since the last
  /// tick, those new at the last one, and the children of crashes; false when neither
  /// the events nor a listing could tell (a full scan is due). A death's look keeps the
  /// tick's young processes for the next tick.
  bool candidates(int proc_fd, bool death_look, std::set<pid_t>& out);
  /// After a full scan: the processes it listed (none when the listing failed).
  void listed(std::vector<pid_t> pids) { seen_ = std::move(pids); }
  /// Processes as of the last tick.
  std::size_t processes() const { return seen_.size(); }

  /// Moves what the connector queued into the tick's batch and the lineage table; the
  /// living children of a process that crashed join the crash looks.
  void pump();
  /// How `pid` exited (its wait status), if the events say.
  std::optional<int> exit_status(pid_t pid);
  /// The living children of crashes, to be looked at (taken: the set is emptied).
  bool crash_looks_pending() const { return !crash_looks_.empty(); }
  std::set<pid_t> take_crash_looks() { return std::exchange(crash_looks_, {}); }

  bool from_events() const { return events_.has_value(); }
  /// The connector's descriptor to poll, when the events are read.
  std::optional<int> fd() const;
  /// Why not through events, when not.
  const std::string& unavailable() const { return unavailable_; }
  /// Who forked whom and who exited how (empty without the events).
  const proc::EventLineage& lineage() const { return lineage_; }

 private:
  bool by_events(int proc_fd, std::set<pid_t>& out);
  bool by_listing(int proc_fd, std::set<pid_t>& out);
  static constexpr std::size_t kMaxPending = 1 << 16;

  std::optional<proc::ProcEvents> events_;  // when new processes are found by events
  bool tried_ = false;
  std::string unavailable_;
  proc::ProcEventBatch pending_;  // drained, not yet read by a tick
  proc::EventLineage lineage_;    // fed by pump
  std::set<pid_t> crash_looks_;   // children of a crash, looked at next
  std::vector<pid_t> seen_;       // the processes as of the last tick, sorted
  std::set<pid_t> young_;         // new at the last tick: looked at again at the next
};

}  // namespace gpureap::agent
