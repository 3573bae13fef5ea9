#pragma once
// The authoritative answer to "who holds this GPU": every process with an
// open fd or a memory mapping of an NVIDIA device node, from /proc.

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "proc/device_nodes.h"
#include "proc/holder.h"
#include "proc/process_table.h"

namespace gpureap::proc {

struct ScanOptions {
  std::string proc_root;  // no default: the node's (inventory::Node::proc_root())
  const DeviceSet* devices = nullptr;  // nodes to look for; null or empty finds nothing
  std::set<pid_t> exclude;             // pids to skip (gpureap itself, for instance)
  bool read_maps = true;               // false: fds only (misses mapping-only holders)
  unsigned workers = 0;                // scanning threads; 0 = 2 when there are many processes
  /// Scan only these pids instead of every process in proc_root (the agent's
  /// incremental scan: new processes and known holders). Pids that do not exist
  /// are skipped silently.
  std::optional<std::vector<pid_t>> only_pids;
  /// Also read the process table (every process's stat) from the same listing of
  /// proc_root, into ScanResult::table: free's looks, whose plans need the table too.
  /// Ignored with only_pids.
  bool with_table = false;
  /// The identities (pid and start time) of the live `gpureap run`s' supervisors, as
  /// the runs recorded them (inventory/run_records.h): a holder below one is a member of
  /// a live run (Holder::run_alive). Never a process's name (W4-06).
  std::vector<ProcessId> run_supervisors;
};

struct ScanResult {
  std::vector<Holder> holders;        // sorted by pid
  std::vector<ScanProblem> problems;  // per process that could not be read; pid 0 = whole scan
  std::size_t processes_scanned = 0;  // processes whose /proc directory was opened
  /// A descriptor limit (EMFILE, ENFILE) stopped some read: the scan is incomplete,
  /// and a process missing from it may still hold a GPU (the agent keeps its last look).
  bool out_of_descriptors = false;
  /// With ScanOptions::with_table: every process of the listing (read_process_table's).
  std::optional<std::vector<ProcessEntry>> table;
};

/// Of `holders` (from an earlier scan), the pids that need a scan again: gone,
/// unreadable, or holding other device nodes than they did. Each is checked by its
/// fd table (and its maps when it was found by a mapping), without describing it:
/// the agent's check, at each tick, that a holder NVML does not list still holds
/// (W3-14), a fraction of a scan's cost. The pid's identity is the caller's: a pid
/// reused since is seen by its start time in the stat line the caller reads.
std::set<pid_t> changed_holders(const ScanOptions& options,
                                const std::vector<const Holder*>& holders);

/// Finds the holders of `options.devices` among the processes of `proc_root`:
///  - fds: stat() of each /proc/PID/fd/N (link followed, cached attributes only,
///    so a dead NFS server cannot hang the scan) matched with DeviceSet::match_fd;
///  - mappings: each /proc/PID/maps line's (dev, inode) with DeviceSet::match_mapping;
///  - a zombie leader (state Z, Threads > 1) has an empty fd table and maps, so
///    then task/<tid>/fd and task/<tid>/maps of its live threads are read
///    instead; such a holder has zombie_leader = true. A pure zombie holds nothing.
/// Kernel threads are skipped. A process that exits during the scan is skipped
/// silently; one whose fds cannot be read (EACCES: another user's process when
/// not root) becomes a ScanProblem, never a guess. Every Holder field except
/// wchan is filled.
ScanResult scan_holders(const ScanOptions& options);

/// Describes processes that hold a GPU by another account than /proc's (NVML
/// lists them, but their fds cannot be read: another user's process when not
/// root). Every Holder field that /proc/PID/{stat,status,cgroup,cmdline} gives
/// is filled; found_by and nodes stay empty. Pids that do not exist are skipped.
std::vector<Holder> describe_processes(const std::vector<pid_t>& pids,
                                       const std::string& proc_root);

}  // namespace gpureap::proc
