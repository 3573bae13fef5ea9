#pragma once
// The agent's incremental inventory. It never re-scans all of /proc at a tick:
//  - NVML's process lists (cheap, the worker keeps NVML open) and the processes
//    that started (or exec'd) since the last tick name the candidates; only those
//    are scanned (proc::ScanOptions::only_pids). As root the kernel's process events
//    say which (proc/proc_events.h: no listing of /proc at all); else the pids that
//    appeared in a listing of /proc;
//  - known holders' stat lines are re-read each tick (zombie leaders, orphaning);
//  - a pidfd on each holder, its parent and its process-group leader fires the
//    moment one of them dies, so orphaning is seen at once (watch_fds());
//  - a full scan runs at a slow interval as a safety net; by default (full_scan_auto)
//    stretched past it so that it costs at most kFullScanShare of a core.
// The inventory it keeps is the one node.look() would return.

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/holder_table.h"
#include "agent/new_process_finder.h"
#include "agent/scan_pace.h"
#include "agent/source_reader.h"
#include "inventory/events.h"
#include "inventory/import_witness.h"
#include "inventory/inventory.h"
#include "inventory/node.h"
#include "proc/event_lineage.h"
#include "proc/holder_scan.h"
#include "proc/process_handle.h"
#include "util/clock.h"

namespace gpureap::agent {

/// Seconds since the epoch, now: the time of an event and of a dead parent's death.
using util::wall_now;

/// The agent's defaults (`gpureap watch --tick`, `--full-scan-interval`), written once.
inline constexpr std::chrono::milliseconds kDefaultTick{1000};
inline constexpr std::chrono::milliseconds kDefaultFullScan{30000};
/// With WatchOptions::full_scan_auto: the share of one core the full scans may take
/// (the next one waits its last one's CPU time / kFullScanShare, at least full_scan),
/// and the longest the safety net waits. 10,000 processes: a full scan takes about
/// 0.5 s of CPU, so it runs about every 100 s instead of 30 (issue 38).
inline constexpr double kFullScanShare = 0.005;
inline constexpr std::chrono::milliseconds kFullScanMax{600000};

struct WatchOptions {
  std::chrono::milliseconds tick = kDefaultTick;        // NVML, new pids, holders' state
  std::chrono::milliseconds full_scan = kDefaultFullScan;  // the whole of /proc, as a safety net
  /// The full scan's interval is full_scan or longer, so that it costs at most
  /// kFullScanShare of a core (`--full-scan-interval auto`, the default).
  bool full_scan_auto = false;
  /// Find new processes through the kernel's process events when this process may
  /// (root, the initial namespaces, proc_root is /proc); else by listing proc_root.
  bool proc_events = true;
  std::chrono::milliseconds source_deadline{2000};
  /// The most pidfds the watcher holds (agent/descriptors.h pidfd_budget); past it,
  /// the rest are watched at each tick (their stat lines) instead of at once.
  std::size_t max_pidfds = 1 << 20;
};

/// Why the agent cannot see everything it should, as of its last look.
struct WatchLimits {
  /// The last look ran out of descriptors (EMFILE, ENFILE): the holders it could not
  /// read are kept as the look before saw them, not dropped (W3-04). The message.
  std::optional<std::string> look_failed;
  std::size_t watched = 0;    // processes with a pidfd
  std::size_t unwatched = 0;  // processes that matter, past max_pidfds: watched by tick
};

/// How the tick finds new processes.
enum class NewProcesses {
  listing,  // a listing of proc_root, against the last one
  events,   // the kernel's process events (proc connector)
};

class Watcher {
 public:
  Watcher(inventory::Node& node, WatchOptions options);

  /// The inventory as of the last refresh.
  const inventory::Inventory& inventory() const { return inv_; }

  /// A tick: NVML snapshot, new pids and candidates scanned, holders' state
  /// re-read; a full scan when it is due or `full` is set.
  void refresh(bool full = false);

  /// Descriptors to poll (pidfds of holders, parents and group leaders, and the proc
  /// connector's socket when the agent reads it): when one is readable call on_ready()
  /// with it.
  std::vector<int> watch_fds() const;
  /// A watched process died: records when (for dead_parents()). A holder's death
  /// rebuilds the inventory from the last NVML figures (no round trip). A holder's
  /// parent or group leader's death is a tick's look at once (one NVML round trip):
  /// its dependents are re-read, and a sibling that took the GPU since the last
  /// tick (a worker whose CUDA context came later) is found now, so that the
  /// announcement names every orphan of the server, not those the last tick knew.
  /// The connector's socket (its events drained into the lineage table at once, while
  /// a forking parent can still be read) is a look at the living children of a process
  /// the events show crashed (proc/event_lineage.h), with no tick in between.
  void on_ready(int fd);

  /// Holder pid -> the parent or group leader whose death the agent saw.
  const std::map<pid_t, inventory::DeadParent>& dead_parents() const { return dead_parents_; }
  /// What an earlier agent saw die (inventory/witness_store.h), for a restarted agent:
  /// each record applies only to the same process (pid and start time).
  void remember_dead_parents(const std::map<pid_t, inventory::DeadParent>& seen) {
    for (const auto& [holder, dead] : seen) dead_parents_.try_emplace(holder, dead);
  }

  const WatchLimits& limits() const { return limits_; }
  /// Who forked whom and who exited how, from the kernel's events (empty without them).
  const proc::EventLineage& lineage() const { return new_.lineage(); }

  std::uint64_t full_scans() const { return pace_.full(); }
  std::uint64_t incremental_scans() const { return pace_.incremental(); }
  /// Incremental scans a death caused (a watched holder's or its parent's, or a crash
  /// the kernel's events showed), not a tick, a question or a scrape.
  std::uint64_t death_scans() const { return pace_.death(); }
  /// How new processes are found now, and why not through events when not.
  NewProcesses new_processes() const {
    return new_.from_events() ? NewProcesses::events : NewProcesses::listing;
  }
  const std::string& events_unavailable() const { return new_.unavailable(); }
  /// When the next full scan is due (its interval after the last one, stretched).
  util::Clock::time_point next_full_scan() const { return pace_.next_full(); }
  /// Pids the agent itself runs (its NVML worker): excluded from every scan.
  std::set<pid_t> own_pids() const;

 private:
  struct Watched;  // a pidfd and what depends on it
  void full_scan();
  /// A tick's look (new processes, changed holders, NVML's list); a death's look also
  /// reads `also` (the dead process's dependents) and keeps the tick's young processes
  /// for the next tick.
  enum class Look { tick, death };
  void incremental_scan(Look look = Look::tick, const std::set<pid_t>& also = {});
  /// After deaths were noted (a pidfd fired, during a look or between ticks): the
  /// dependents and the rest of the machine are looked at afresh, NVML's list included,
  /// so that what the dead process's workers took since the last look is in the verdicts
  /// and the announcement (one place for both paths).
  void look_after_deaths(std::set<pid_t> affected);
  void rescan(const std::set<pid_t>& pids);  // these pids only, fds and maps
  void rebuild();  // the inventory from the holder table and the last NVML snapshot
  /// Records the death of the watched process behind `fd` (dead_parents_) and stops
  /// watching it; returns its dependents.
  std::set<pid_t> note_death(int fd);
  /// note_death for every watched process that has exited and was not handled yet;
  /// returns their dependents.
  std::set<pid_t> note_deaths();
  void look_failed(const proc::ScanResult& result);  // out of descriptors: limits_
  void rewatch();
  /// A holder whose parent the events show dead (and the pidfd path did not see die):
  /// that death joins dead_parents_, for the one orphan rule to judge.
  void witness_from_lineage();
  /// Looks at the living children of crashes the drains queued.
  void look_at_crashes();
  /// How the process behind `w` ended (DeadParent::manner, exit_value), as the kernel says.
  void read_exit(const Watched& w, inventory::DeadParent& dead);
  void take_snapshot();  // NVML (SourceReader)

  inventory::Node& node_;
  WatchOptions options_;
  inventory::Inventory inv_;
  SourceReader source_;   // NVML's snapshots, and when to ask a hung one again
  HolderTable holders_;   // the holders known, by pid, and their scans' problems
  NewProcessFinder new_;  // which processes a tick looks at (events or listings)
  ScanPace pace_;         // when the next full scan is due; the looks counted
  std::map<int, std::shared_ptr<Watched>> watched_;  // by fd
  std::map<pid_t, inventory::DeadParent> dead_parents_;
  /// CUDA IPC imports seen happen (an exporter's death, its bytes moved to a live process),
  /// kept in the state directory; made at the first look.
  std::optional<inventory::ImportWitness> imports_;
  WatchLimits limits_;
};

}  // namespace gpureap::agent
